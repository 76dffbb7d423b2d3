"""The site's generated pages: one reference page per command, the command index and the API reference,
made from ``veotrace.registry`` and the Typer app (each option's flags, type, default and help as
``veotrace COMMAND --help`` has them), so no option is written down twice.

Each command's page is its hand-written text (``docs/_commands/COMMAND.md``: what it answers, how, the
examples that tests/test_readme_examples.py runs) followed by the generated reference: usage, arguments,
options, exit codes, and the output's shape, an example of ``-f json`` and the Arrow schema of its table,
both from running the command on a bundled sample at build time.

MkDocs runs this file through the ``gen-files`` plugin (mkdocs.yml); ``python3 tools/gen_docs.py OUT``
writes the same pages into the folder OUT, to read them without MkDocs.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TEXTS = ROOT / "docs" / "_commands"

#: The run each command's output example comes from (paths from the repository root); a list of such runs
#: where earlier ones make a file the example reads. None: the command has no JSON output.
EXAMPLES: dict[str, list[list[str]] | None] = {
    "entropy": [["sample_traces/alloc_logs/", "--window", "1h"]],
    "convert": None,
    "bursts": [["sample_traces/alloc_logs_bursty/"]],
    "fragmentation": [["sample_traces/alloc_addr/alloc_addr.csv", "--window", "30m"]],
    "simulate": [["sample_traces/simulate/training_log.csv", "-p", "torch", "-p", "ideal"]],
    "l2-breakpoints": [["sample_traces/ncu/l2_details.csv"]],
    "correlate": [["sample_traces/arrays/addrs.npy", "sample_traces/arrays/epe.npy"]],
    "coherence": [["sample_traces/frames/frames.csv"]],
    "tune": [["sample_traces/simulate/training_log.csv", "--try", "max_split_size_mb=unset,64"]],
    "sites": [["sample_traces/snapshots/memory_snapshot.pickle"]],
    "diff": [["sample_traces/alloc_addr/alloc_addr.csv", "sample_traces/alloc_logs/"]],
    "info": [["sample_traces/ncu/launch_count_1.csv"]],
    "gate": [["entropy", "sample_traces/alloc_logs/", "--save-baseline", "{tmp}/base.json", "-f", "json", "-o", "{tmp}/e.json"],
             ["sample_traces/alloc_logs/", "--baseline", "{tmp}/base.json"]],
    "report": None,
    "view": None,
    "diagnose": [["sample_traces/simulate/training_log.csv", "sample_traces/frames/frames.csv"]],
    "banks": [["--elem-bytes", "4", "--stride", "2"]],
    "formats": None,
}

EXIT_CODES = [
    (0, "done, also when the answer is \"nothing found\""),
    (1, "input error: a missing file, a format veotrace does not read, bad content; one `Error:` line on stderr"),
    (2, "usage error: an unknown option or an impossible value, before any work"),
]


def app_command(name: str):
    """The click command of ``veotrace NAME`` (the Typer app with every command registered)."""
    import typer

    from veotrace.cli import app

    return typer.main.get_command(app).commands[name]


def commands() -> list[str]:
    """The CLI commands, in ``veotrace --help`` order (the registry's)."""
    from veotrace import registry

    return [e.command for e in registry.commands()]


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(param) -> str:
    default = param.default
    if default is None or param.required or getattr(param, "is_flag", False) and default is False:
        return ""
    if isinstance(default, (list, tuple)):
        return ", ".join(str(getattr(d, "value", d)) for d in default)
    return str(getattr(default, "value", default))


def _type(param) -> str:
    choices = getattr(param.type, "choices", None)
    if choices:
        return " \\| ".join(str(getattr(c, "value", c)) for c in choices)
    if getattr(param, "is_flag", False):
        return "flag"
    return param.type.name.lower()


def options_table(cmd) -> list[str]:
    """Markdown rows for the command's arguments and options."""
    out = []
    args = [p for p in cmd.params if p.param_type_name == "argument"]
    if args:
        out += ["### Arguments", "", "| argument | type | help |", "|---|---|---|"]
        for p in args:
            name = p.human_readable_name + ("..." if p.nargs == -1 else "")
            out.append(f"| `{name}` | {_type(p)} | {_cell(getattr(p, 'help', '') or '')} |")
        out.append("")
    opts = [p for p in cmd.params if p.param_type_name == "option" and not p.hidden]
    if opts:
        out += ["### Options", "", "| option | type | default | help |", "|---|---|---|---|"]
        for p in opts:
            flags = ", ".join(f"`{f}`" for f in [*p.opts, *p.secondary_opts])
            many = " (repeatable)" if p.multiple else ""
            default, help_ = f"`{_default(p)}`" if _default(p) else "", p.help or ""
            stated = re.search(r"\s*\[default: (.+?)\](\.?)$", help_)  # a default the help words itself
            if stated and not default:
                default, help_ = stated.group(1), help_[:stated.start()] + stated.group(2)
            out.append(f"| {flags} | {_type(p)}{many} | {_cell(default)} | {_cell(help_)} |")
        out.append("")
    return out


def check_options(cmd) -> list[str]:
    """The options that make the command exit 3 when their check finds a problem."""
    return [p.opts[0] for p in cmd.params if p.param_type_name == "option"
            and any(k in p.name for k in ("fail_on", "exit_on_fail"))]


def _shorten(value, depth: int = 0):
    """The example JSON cut to its shape: lists to their first 2 items, long strings cut."""
    if isinstance(value, dict):
        return {k: _shorten(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        head = [_shorten(v, depth + 1) for v in value[:2]]
        return head + ([f"... {len(value) - 2} more"] if len(value) > 2 else [])
    if isinstance(value, str) and len(value) > 120:
        return value[:117] + "..."
    return value


def _cut(text: str, limit: int = 8000) -> str:
    """At most ``limit`` characters, cut at a line end."""
    return text if len(text) <= limit else text[:text.rindex("\n", 0, limit)] + "\n  ... (cut here)"


def _invoke(argv: list[str]):
    from typer.testing import CliRunner

    from veotrace.cli import app

    return CliRunner().invoke(app, argv, catch_exceptions=False)


def output_section(name: str) -> list[str]:
    """The output's JSON example and its table's Arrow schema, from a run on a bundled sample."""
    runs = EXAMPLES.get(name)
    if not runs:
        return []
    import pyarrow.parquet as pq

    from veotrace.schemas.base import schema_tag

    out = ["### Output", ""]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for setup in runs[:-1]:
                _invoke([a.format(tmp=tmp) for a in setup])
            argv = [name, *(a.format(tmp=tmp) for a in runs[-1])]
            shown = " ".join(a.replace(tmp + "/", "") for a in argv)
            res = _invoke([*argv, "-f", "json"])
            if res.exit_code in (0, 3) and res.stdout.strip().startswith("{"):
                doc = _shorten(json.loads(res.stdout))
                out += [f"`-f json` of `veotrace {shown}` (lists cut to their first two items):", "",
                        "```json", _cut(json.dumps(doc, indent=2, ensure_ascii=False)), "```", ""]
            cmd = app_command(name)
            fmt = next((p for p in cmd.params if "--format" in getattr(p, "opts", [])), None)
            if fmt is not None and "parquet" in [getattr(c, "value", c) for c in fmt.type.choices]:
                target = Path(tmp) / "table.parquet"
                res = _invoke([*argv, "-f", "parquet", "-o", str(target)])
                if res.exit_code in (0, 3) and target.exists():
                    schema = pq.read_schema(target)
                    tag = schema_tag(schema) or "(untagged)"
                    out += [f"`-f csv` / `-f parquet` write one table, schema `{tag}` (`veotrace/schemas/`):", "",
                            "| column | type |", "|---|---|"]
                    out += [f"| `{f.name}` | {f.type} |" for f in schema]
                    out.append("")
    finally:
        os.chdir(cwd)
    return out


def command_page(name: str, *, with_output: bool = True) -> str:
    """The page of ``veotrace NAME``: its text, then the generated reference."""
    text_file = TEXTS / f"{name}.md"
    text = text_file.read_text(encoding="utf-8") if text_file.exists() else f"# `veotrace {name}`\n"
    cmd = app_command(name)
    lines = [text.rstrip(), "", "---", "", "## Reference", "", (cmd.help or "").strip(), "", "```text",
             f"veotrace {name} {' '.join(_usage(cmd))}", "```", ""]
    lines += options_table(cmd)
    lines += ["### Exit codes", "", "| code | meaning |", "|---|---|"]
    lines += [f"| {c} | {m} |" for c, m in EXIT_CODES]
    checks = check_options(cmd)
    if name == "gate":
        lines.append("| 3 | the gate failed: a check's increase is above its tolerance and significant |")
    elif checks:
        lines.append(f"| 3 | the check of {', '.join(f'`{c}`' for c in checks)} found a problem (the output is still written) |")
    lines.append("")
    if with_output:
        lines += output_section(name)
    lines.append(f"*Generated by `tools/gen_docs.py` from `veotrace {name} --help` and `veotrace/registry.py`.*")
    return "\n".join(lines) + "\n"


def _usage(cmd) -> list[str]:
    pieces = ["[OPTIONS]"] if any(p.param_type_name == "option" for p in cmd.params) else []
    for p in cmd.params:
        if p.param_type_name == "argument":
            pieces.append(p.human_readable_name + ("..." if p.nargs == -1 else ""))
    return pieces


def index_page() -> str:
    lines = ["# Commands", "", "Every command reads its inputs, prints a result on stdout (a table, or `-f json|csv|parquet`)",
             "and its progress and warnings on stderr; see [Outputs and exit codes](../concepts/outputs.md).", "",
             "| command | what it answers |", "|---|---|"]
    for name in commands():
        help_ = (app_command(name).help or "").strip().split("\n")[0]
        lines.append(f"| [`{name}`]({name}.md) | {_cell(help_)} |")
    return "\n".join(lines) + "\n"


def api_page() -> str:
    """The API reference: the run function behind each ``veotrace.<command>``, the result, the errors."""
    from veotrace import registry

    lines = ["# API reference", "",
             "`veotrace.<command>(...)` is the run function of the command (`veotrace.l2_breakpoints` for "
             "`l2-breakpoints`), imported on first use; its keyword arguments are the command's options. "
             "[A Python session](notebook.md) shows them at work.", ""]
    seen = set()
    for e in registry.commands():
        if not e.api or e.run in seen:
            continue
        seen.add(e.run)
        module, _, attr = e.run.partition(":")
        lines += [f"## `veotrace.{e.api_name}`", "", f"::: {module}.{attr}", "    options:", "      show_root_heading: false",
                  "      heading_level: 3", ""]
    lines += ["## The result", "", "::: veotrace.runs.result.RunResult", "    options:", "      show_root_heading: false",
              "      heading_level: 3", "", "## Errors", "", "::: veotrace.errors", "    options:", "      show_root_heading: false",
              "      heading_level: 3", ""]
    return "\n".join(lines)


def pages(*, with_output: bool = True) -> dict[str, str]:
    """Every generated page, by its path under docs/."""
    out = {"commands/index.md": index_page(), "api.md": api_page()}
    for name in commands():
        out[f"commands/{name}.md"] = command_page(name, with_output=with_output)
    return out


def _mkdocs() -> None:
    import mkdocs_gen_files

    for path, text in pages().items():
        with mkdocs_gen_files.open(path, "w") as f:
            f.write(text)
        src = f"_commands/{path.split('/')[-1]}" if path.startswith("commands/") and path != "commands/index.md" else None
        if src:
            mkdocs_gen_files.set_edit_path(path, src)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python3 tools/gen_docs.py OUT_FOLDER")
    for rel, text in pages().items():
        target = Path(sys.argv[1]) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(target)
elif __name__ == "<run_path>":  # mkdocs-gen-files runs the file with runpy.run_path
    _mkdocs()
