"""Every `veotrace ...` line of the ```sh blocks of README.md and of every page under docs/ runs as written on
sample_traces/, and the samples are what sample_traces/regenerate.py writes.

Each command line is one test, named by its file and line (``README.md:42``, ``docs/recipes/dask.md:12``); a line
that repeats one already run (same text, writing no file) is run once. The lines run in this process (Typer's
CliRunner, as ``veotrace ARGS``) from one scratch folder that links every top-level entry of the repository (so paths
read as from the repository root, and ``-o`` outputs land in the scratch folder, where later lines can read them), in
file and line order. Expected exit
code: 0, or the one a comment on the line documents (``# exit 3 ...``); a ``|| ...`` tail accepts 0 or 3.
``| jq ...`` runs only when jq is installed. Skipped: lines with ``pip install``, ``pytest``, ``benchmarks/``,
``nsys``/``ncu`` commands (tools absent here), lines that are not veotrace commands (shell around them), the
line after a ``# not run`` comment line, and a ``# not run: veotrace ...`` line itself.

Each ```python block (the Python sessions) runs whole, as one ``python3 -c`` in the same scratch folder, and
must exit 0 (its ``assert`` lines are the checks); a block whose first line is a ``# not run`` comment (it needs
torch and a GPU) is left out.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLES

#: One worker runs this module's tests in order under -n (``--dist loadgroup``): a page's later commands read
#: what its earlier ones wrote in the module's scratch folder.
pytestmark = pytest.mark.xdist_group("readme_examples")

README = REPO / "README.md"
DOCS = REPO / "docs"
#: Fewest command lines README.md and docs/ must yield together (about 100 runnable ones in all).
MIN_COMMANDS = 80
#: Options whose value is a file the command writes: a repeated line with one of them runs again.
WRITES = ("-o", "--output", "--save-baseline", "--junit", "--pairs-out", "--plot", "--state")
OPERATORS = {"&&", "||", "|", ";", ">"}
SKIP_WORDS = ("pip install", "pytest", "benchmarks/")
TIMEOUT_S = 180


def doc_files() -> list[Path]:
    """README.md, then every Markdown file under docs/ (the command texts in docs/_commands/ included)."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name


@dataclass
class Example:
    line: int  # 1-based line in its file
    text: str
    block: int = 0  # which ```sh block of the file
    file: str = "README.md"  # the file, relative to the repository root
    commands: list[list[str]] = field(default_factory=list)  # veotrace argument lists, run in order (&&)
    jq: list[str] | None = None  # the jq arguments of a `| jq ...` tail
    stdout_to: str | None = None  # `> FILE`
    expected: tuple[int, ...] = (0,)


def _tokens(text: str) -> list[str]:
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|>")
    lex.whitespace_split = True
    return list(lex)


def _veotrace_args(tokens: list[str]) -> list[str] | None:
    """The arguments after `veotrace` / `python3 -m veotrace`, or None when the segment is something else."""
    if tokens[:1] == ["veotrace"]:
        return tokens[1:]
    if len(tokens) >= 3 and tokens[0].startswith("python") and tokens[1:3] == ["-m", "veotrace"]:
        return tokens[3:]
    return None


def parse(line_no: int, raw: str) -> Example | str:
    """An Example, or the reason the line is not run."""
    text = raw.strip()
    if any(w in text for w in SKIP_WORDS):
        return "pip/pytest/benchmark line"
    tokens = _tokens(text)
    segments, ops, cur = [], [], []
    for tok in tokens:
        if tok in OPERATORS:
            segments.append(cur)
            ops.append(tok)
            cur = []
        else:
            cur.append(tok)
    segments.append(cur)
    if any(seg[:1] in (["nsys"], ["ncu"]) for seg in segments):
        return "needs nsys/ncu"
    ex = Example(line_no, text)
    comment = re.search(r"\s#\s*(.*)$", text)
    code = re.search(r"\bexit (\d)\b", comment.group(1)) if comment else None
    if code:
        ex.expected = (int(code.group(1)),)
    args = _veotrace_args(segments[0])
    if args is None:
        return "not a veotrace command"
    ex.commands.append(args)
    for op, seg in zip(ops, segments[1:]):
        if op == "&&" and _veotrace_args(seg) is not None:
            ex.commands.append(_veotrace_args(seg))
        elif op == "|" and seg[:1] == ["jq"]:
            ex.jq = seg[1:]
        elif op == ">" and len(seg) == 1:
            ex.stdout_to = seg[0]
        elif op == "||":
            ex.expected = (0, 3)
            break
        else:
            return f"shell construct {op!r} {' '.join(seg[:1])}"
    return ex


def readme_examples(path: Path | None = None) -> tuple[list[Example], list[tuple[int, str, str]]]:
    """(examples to run, [(line, text, why skipped)]) from one file's ```sh blocks (README.md by default)."""
    path = README if path is None else path
    run, skipped = [], []
    in_sh, not_run, block = False, False, 0
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("```"):
            in_sh = stripped == "```sh" and not in_sh
            block += in_sh
            not_run = False
            continue
        if not in_sh or not stripped:
            continue
        if stripped.startswith("#"):
            marker = re.match(r"#\s*not run\b(.*)$", stripped)
            if marker and re.search(r"(?:^|[\s:])veotrace\s+[a-z]", marker.group(1)):
                skipped.append((n, stripped, "# not run"))  # the marker holds the command itself
            elif marker:
                not_run = True  # the marker stands on its own line: the next command is not run
            continue
        if not_run:
            skipped.append((n, stripped, "# not run"))
            not_run = False
            continue
        ex = parse(n, raw)
        if isinstance(ex, str):
            skipped.append((n, stripped, ex))
        else:
            ex.block, ex.file = block, _rel(path)
            run.append(ex)
    return run, skipped


def _writes(ex: Example) -> bool:
    return ex.stdout_to is not None or any(a in WRITES or a.split("=")[0] in WRITES for args in ex.commands for a in args)


def all_examples() -> tuple[list[Example], list[tuple[str, str, str]]]:
    """The examples of every file, a line already run elsewhere (same text, writing nothing) left out."""
    run, skipped, seen = [], [], set()
    for path in doc_files():
        examples, skips = readme_examples(path)
        skipped += [(f"{_rel(path)}:{n}", text, why) for n, text, why in skips]
        for ex in examples:
            key = (tuple(map(tuple, ex.commands)), ex.jq and tuple(ex.jq), ex.expected)
            if key in seen and not _writes(ex):
                skipped.append((f"{ex.file}:{ex.line}", ex.text, "run already"))
                continue
            seen.add(key)
            run.append(ex)
    return run, skipped


EXAMPLES, SKIPPED = all_examples()


def python_blocks(path: Path | None = None) -> list[tuple[str, str]]:
    """(file:line of the opening fence, code) of each ```python block of README.md and docs/ (or of one file)."""
    blocks = []
    for p in doc_files() if path is None else [path]:
        current, start = None, 0
        for n, raw in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
            stripped = raw.strip()
            if current is None and stripped == "```python":
                current, start = [], n
            elif current is not None and stripped.startswith("```"):
                code = "\n".join(current) + "\n"
                if not re.match(r"\s*#\s*not run\b", code):
                    blocks.append((f"{_rel(p)}:{start}", code))
                current = None
            elif current is not None:
                current.append(raw)
    return blocks


PYTHON_BLOCKS = python_blocks()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A folder that looks like the repository root (links to its entries) but takes the outputs."""
    root = tmp_path_factory.mktemp("readme")
    for entry in REPO.iterdir():
        if not entry.name.startswith("."):
            (root / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return root


@dataclass
class Done:
    """What one veotrace command of an example did (as a CliRunner result)."""

    args: list[str]
    returncode: int
    stdout: bytes
    stderr: bytes


def _run(args: list[str], cwd: Path) -> Done:
    from typer.testing import CliRunner

    from veotrace.cli import app

    old = os.getcwd()
    os.chdir(cwd)
    try:
        res = CliRunner().invoke(app, args, catch_exceptions=True)
    finally:
        os.chdir(old)
    err = res.stderr_bytes or b""
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        err += "".join(traceback.format_exception(res.exception)).encode()
    return Done(args, res.exit_code, res.stdout_bytes, err)


def run_example(ex: Example, cwd: Path) -> list[Done]:
    """Run the example's commands in order, stopping at the first that fails."""
    done = []
    for args in ex.commands:
        done.append(_run(args, cwd))
        if done[-1].returncode != 0:
            break
    if ex.stdout_to:
        (cwd / ex.stdout_to).write_bytes(done[-1].stdout)
    return done


def test_the_readme_yields_enough_commands():
    assert len(EXAMPLES) >= MIN_COMMANDS, (len(EXAMPLES), SKIPPED)
    assert all(ex.commands for ex in EXAMPLES)


#: The examples run in each scratch folder (by file and line).
_RAN: dict[Path, set[tuple[str, int]]] = {}


def _after_its_page(ex: Example, scratch: Path) -> None:
    """Run the earlier lines of ``ex``'s page not yet run in ``scratch`` (what they write is what it reads): the
    order the tests run in is not the page's under every scheduler (two pages' later lines found their inputs
    missing in a clean clone's ``pytest -n 2``), and a page reads as a session, top to bottom."""
    ran = _RAN.setdefault(scratch, set())
    for before in EXAMPLES:
        if before.file == ex.file and before.line < ex.line and (before.file, before.line) not in ran:
            run_example(before, scratch)
            ran.add((before.file, before.line))
    ran.add((ex.file, ex.line))


@pytest.mark.parametrize("ex", EXAMPLES, ids=[f"{ex.file}:{ex.line}" for ex in EXAMPLES])
def test_readme_example_runs(ex: Example, scratch):
    _after_its_page(ex, scratch)
    done = run_example(ex, scratch)
    where = f"{ex.file}:{ex.line}: {ex.text}"
    for i, proc in enumerate(done):
        last = i == len(ex.commands) - 1
        allowed = ex.expected if last else (0,)
        assert proc.returncode in allowed, (f"{where}\nveotrace {' '.join(proc.args)}: exit {proc.returncode}, expected "
                                            f"{' or '.join(map(str, allowed))}\n{proc.stderr.decode(errors='replace')[-2000:]}")
    if ex.jq is not None and shutil.which("jq"):
        piped = subprocess.run(["jq", *ex.jq], input=done[-1].stdout, capture_output=True, timeout=60, check=False)
        assert piped.returncode == 0, f"{where}: jq {' '.join(ex.jq)} on the output: {piped.stderr!r}"


def test_the_docs_have_a_python_api_session():
    assert PYTHON_BLOCKS, "neither README.md nor docs/ has a ```python block (docs/notebook.md)"
    assert any("import veotrace" in code for _, code in PYTHON_BLOCKS)


@pytest.mark.parametrize("line,code", PYTHON_BLOCKS, ids=[line for line, _ in PYTHON_BLOCKS])
def test_readme_python_block_runs(line: str, code: str, scratch):
    """The block runs from the scratch root, so ``import veotrace`` is this checkout and outputs land there."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=scratch, capture_output=True, timeout=TIMEOUT_S, check=False)
    assert proc.returncode == 0, f"{line}: the python block exits {proc.returncode}\n" \
                                 f"{proc.stderr.decode(errors='replace')[-2000:]}"


def test_parser_on_the_shapes_the_readme_uses():
    ex = parse(1, "veotrace entropy logs/ --format json | jq '.files[] | {path}'   # a comment")
    assert ex.commands == [["entropy", "logs/", "--format", "json"]] and ex.jq == [".files[] | {path}"]
    assert parse(2, "veotrace coherence f.csv --fail-on-collapse   # exit 3: collapse found").expected == (3,)
    assert parse(3, "python3 -m pip install -e . && veotrace entropy x") == "pip/pytest/benchmark line"
    assert parse(4, "nsys stats x > t.csv && veotrace bursts t.csv") == "needs nsys/ncu"
    assert parse(5, "veotrace gate x -b b.json || status=$?").expected == (0, 3)
    assert parse(6, 'case "$status" in') == "not a veotrace command"
    chain = parse(7, "python3 -m veotrace convert a -o t.parquet && veotrace entropy t.parquet")
    assert chain.commands == [["convert", "a", "-o", "t.parquet"], ["entropy", "t.parquet"]]


def _regenerate_module():
    spec = importlib.util.spec_from_file_location("regenerate_samples", SAMPLES / "regenerate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_samples_are_what_the_seeded_generator_writes():
    module = _regenerate_module()
    for rel, make in module.SAMPLES.items():
        data = make()
        assert len(data) < 200_000, rel
        assert (SAMPLES / rel).read_bytes() == data, f"sample_traces/{rel} differs: run python3 sample_traces/regenerate.py"


def test_samples_show_what_the_readme_says(cli):
    import json

    from veotrace.synth.bursts import planted_bursts_log

    doc = json.loads(cli("bursts", SAMPLES / "alloc_logs_bursty", "-f", "json").stdout)
    truth = planted_bursts_log(seed=21, bursts=40, gap_ms=5.0, max_events=25, singletons=8, frees=300, shuffle=False)
    assert doc["summary"]["bursts"] == truth.starts.size == 40
    assert [b["events"] for b in doc["bursts"]] == truth.counts.tolist()
    snap = json.loads(cli("bursts", SAMPLES / "snapshots" / "memory_snapshot.pickle", "-f", "json").stdout)
    assert snap["summary"]["bursts"] > 0
    l2 = cli("l2-breakpoints", SAMPLES / "ncu" / "launch_count_1.csv", "-f", "json")
    assert l2.exit_code == 0 and "--launch-count 20" in l2.stderr
    assert {k["changepoints"]["status"] for k in json.loads(l2.stdout)["kernels"]} == {"needs more launches"}
    corr = json.loads(cli("correlate", SAMPLES / "arrays" / "addrs.npy", SAMPLES / "arrays" / "epe.npy", "-f", "json").stdout)
    assert corr["n"] == 47 and corr["pearson"]["r"] == pytest.approx(0.65, abs=0.01)  # the README's comment


def test_not_run_markers(tmp_path, monkeypatch):
    readme = tmp_path / "README.md"
    readme.write_text("```sh\n# not run (needs pip install 'veotrace[ncu]'):\nveotrace a x\nveotrace b x\n"
                      "# not run: veotrace c x\nveotrace d x   # exit 3 when found\n```\n```\nveotrace e x\n```\n")
    run, skipped = readme_examples(readme)
    assert [ex.commands[0][0] for ex in run] == ["b", "d"] and run[1].expected == (3,)
    assert [line for line, _, why in skipped if why == "# not run"] == [3, 5]
