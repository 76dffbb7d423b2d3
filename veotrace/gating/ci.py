"""Gate layer: CI-native outputs that are not terminal views: JUnit XML and GitHub Actions workflow commands.

JUnit: one ``<testsuite name="veotrace gate">``, one ``<testcase>`` per check; a failed check has a
``<failure>`` with its message, a skipped one ``<skipped>``. GitLab CI shows it as a test report
(``artifacts:reports:junit``), Jenkins and most CI systems read the same file.

GitHub Actions: ``::error`` for a failed check, ``::warning`` for an increase above tolerance that
is not significant, ``::notice`` for the verdict; the runner turns them into annotations. They are
written on stderr (the runner reads both streams) so that stdout stays the result, e.g. JSON.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from veotrace.gating.compare import GateResult


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.6g}"


def junit_xml(result: GateResult, *, elapsed_s: float = 0.0) -> str:
    """The JUnit XML report of ``result`` (UTF-8 text with an XML declaration)."""
    checks = result.checks
    suite = ET.Element("testsuite", {
        "name": "veotrace gate", "tests": str(len(checks)),
        "failures": str(sum(c.verdict == "fail" for c in checks)), "errors": "0",
        "skipped": str(sum(c.verdict == "skipped" for c in checks)), "time": f"{elapsed_s:.3f}"})
    props = ET.SubElement(suite, "properties")
    for key in ("path", "recorded_at", "veotrace_version"):
        ET.SubElement(props, "property", {"name": f"baseline.{key}", "value": str(result.baseline.get(key, ""))})
    for c in checks:
        case = ET.SubElement(suite, "testcase", {"classname": "veotrace.gate.entropy", "name": c.name, "time": "0"})
        if c.verdict == "fail":
            f = ET.SubElement(case, "failure", {"message": c.message, "type": "EntropyRegression"})
            f.text = (f"value {_num(c.value)} {c.unit}, baseline {_num(c.baseline)}, change {_num(c.change)}, "
                      f"tolerance {_num(c.tolerance)}, p {_num(c.p_value)}\nmethod: {c.method}")
        elif c.verdict == "skipped":
            ET.SubElement(case, "skipped", {"message": c.message})
        else:
            out = ET.SubElement(case, "system-out")
            out.text = c.message
    root = ET.Element("testsuites", {"name": "veotrace", "tests": suite.get("tests"),
                                     "failures": suite.get("failures"), "skipped": suite.get("skipped")})
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _escape(text: str, *, prop: bool = False) -> str:
    # GitHub's escaping of workflow command data (and, for properties, also ':' and ',').
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def github_commands(result: GateResult) -> list[str]:
    """Workflow command lines for ``result``: one per failed or borderline check, then the verdict."""
    lines = []
    for c in result.checks:
        if c.verdict == "fail":
            lines.append(f"::error title={_escape('veotrace gate: ' + c.name, prop=True)}::{_escape(c.message)}")
        elif c.verdict == "pass" and "not significant" in c.message:
            lines.append(f"::warning title={_escape('veotrace gate: ' + c.name, prop=True)}::{_escape(c.message)}")
    kind = "error" if result.verdict == "fail" else "notice"
    lines.append(f"::{kind} title=veotrace gate::{_escape(result.headline())}")
    return lines
