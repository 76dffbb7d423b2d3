"""Issue 47's fuzz targets: names as bytes, NaN/inf in every numeric field of a snapshot, Unicode digits in
every number the command line parses (edited checkpoints: ``fuzz.checkpoints``).

- ``names`` (target): the input file written under a hostile name (bytes that are not UTF-8, terminal control
  characters: ESC [2J, BEL, CR) and run through a command chosen by the content (sites, fragmentation,
  simulate, entropy, convert, view, report, diagnose) in-process. It must exit 0, 1 or 2 with no exception,
  and no stderr line may hold a raw control character or a lone surrogate.
- ``snapshot_numbers`` (target, with ``mutate_numbers``): a snapshot with one numeric field (of a segment, a
  block, a trace entry, a frame, the settings) replaced by NaN, inf, -inf, -0.0, a huge integer or a float
  where an integer belongs; read by sites, fragmentation, simulate and view on both read routes: each returns
  or raises ``VeotraceError``, and both routes give one verdict.
- ``cli_numbers`` (target): a command line with a numeric option (``CLI_CASES``) whose digits are replaced
  (the input's bytes choose which) by Arabic-Indic, extended Arabic-Indic, Devanagari, full-width, superscript
  or mathematical digits, or an underscore: the command must refuse it (exit 1 or 2, one ``Error:`` line),
  never read it as a number, never raise. In a ``--conf`` string a number read as PyTorch reads it (the ASCII
  digits before the first other character: ``0._9`` is 0.0) is accepted when a note says so.
"""

from __future__ import annotations

import math
import os
import pickle
import random
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOG = REPO / "sample_traces" / "alloc_logs" / "alloc.log.1.csv"
TRAINING = REPO / "sample_traces" / "simulate" / "training_log.csv"

#: Names as bytes: not UTF-8, control characters a terminal acts on, both.
HOSTILE_NAMES = (b"snap\xff\xfe", b"a\x1b[2J\x07b", b"\xc3(\x1b]0;title\x07", b"line\rover", b"\x80\x81\x82",
                 b"tab\there", b"del\x7fx", b"\xed\xa0\x80surrogate", b"nul-free\x9b31m")
COMMANDS = ("sites", "fragmentation", "simulate", "entropy", "convert", "view", "report", "diagnose")
_OUT = {"view": "out.html", "report": "out.html", "convert": "out.parquet"}


def _cli(args: list) -> tuple[int, str, str]:
    from typer.testing import CliRunner

    from veotrace.cli import app

    r = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def _clean_stderr(stderr: str) -> str | None:
    """What is wrong with stderr as a terminal would show it, or None."""
    for ch in stderr:
        o = ord(ch)
        if 0xD800 <= o <= 0xDFFF or (o < 0x20 and ch not in "\n\t") or 0x7F <= o <= 0x9F:
            return f"a raw {ch!r} on stderr"
    return None


def run_names(path: Path) -> None:
    """The ``names`` target (see the module docstring)."""
    data = path.read_bytes()
    h = sum(data[:64]) + len(data)
    raw = HOSTILE_NAMES[h % len(HOSTILE_NAMES)] + rng_suffix(data)
    folder = path.parent / "names"
    folder.mkdir(exist_ok=True)
    target = os.path.join(os.fsencode(folder), raw)
    with open(target, "wb") as fh:
        fh.write(data)
    command = COMMANDS[(h // len(HOSTILE_NAMES)) % len(COMMANDS)]
    args = [command, os.fsdecode(target)]
    if command in _OUT:
        args += ["-o", folder / _OUT[command]]
    if command == "entropy":
        args += ["--window-events", "4"]
    try:
        code, _out, err = _cli(args)
    finally:
        os.unlink(target)
    if code not in (0, 1, 2):
        raise AssertionError(f"{command} on {raw!r}: exit {code}\n{err[-2000:]}")
    bad = _clean_stderr(err)
    if bad:
        raise AssertionError(f"{command} on {raw!r}: {bad}: {err[:300]!r}")


def rng_suffix(data: bytes) -> bytes:
    """The extension the content suggests (the readers detect by content; the name keeps a familiar end)."""
    if data[:2] == b"\x80\x02" or data[:1] == b"\x80":
        return b".pickle"
    if data[:2] == b"\x1f\x8b":
        return b".csv.gz"
    return b".csv" if b"," in data[:200] else b".jsonl" if data[:1] == b"{" else b".bin"


# ----------------------------------------------------------------------------- NaN/inf in snapshots
_ODD_NUMBERS = (math.nan, math.inf, -math.inf, -0.0, 1e308, 2**64, 2**70, -(2**63), 4096.0, 0.5, -1)


def snapshot_seed(seed: int = 0) -> dict:
    """A small snapshot with segments, blocks, trace entries with frames and settings: every numeric field a
    mutation may reach."""
    base = 1 << 40
    frames = [{"filename": "train.py", "line": 12, "name": "step"}, {"filename": "main.py", "line": 3, "name": "main"}]
    seg = {"device": 0, "address": base, "total_size": 2 << 20, "allocated_size": 8192, "active_size": 8192,
           "requested_size": 8000, "stream": 0, "segment_type": "small", "segment_pool_id": (0, 0),
           "is_expandable": False, "frames": frames,
           "blocks": [{"address": base, "size": 4096, "requested_size": 4000, "state": "active_allocated", "frames": frames},
                      {"address": base + 4096, "size": 4096, "requested_size": 4000, "state": "active_allocated",
                       "frames": frames},
                      {"address": base + 8192, "size": (2 << 20) - 8192, "requested_size": 0, "state": "inactive"}]}
    trace = [{"action": "segment_alloc", "addr": base, "size": 2 << 20, "stream": 0, "time_us": 1000, "frames": frames}]
    for i in range(6 + seed % 4):
        trace.append({"action": "alloc", "addr": base + 4096 * (i % 2), "size": 4096, "stream": 0,
                      "time_us": 1010 + 20 * i, "frames": frames})
        trace.append({"action": "free_completed", "addr": base + 4096 * (i % 2), "size": 4096, "stream": 0,
                      "time_us": 1020 + 20 * i, "frames": frames})
    trace.append({"action": "oom", "size": 1 << 30, "stream": 0, "time_us": 2000, "device_free": 1 << 20})
    settings = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128", "max_split_size": 128 << 20,
                "garbage_collection_threshold": 0.0, "expandable_segments": False,
                "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)}}
    return {"segments": [seg], "device_traces": [trace], "allocator_settings": settings}


def _numeric_places(obj, prefix=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numeric_places(v, (*prefix, k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _numeric_places(v, (*prefix, i))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield prefix


def mutate_numbers(data: bytes, rng: random.Random) -> bytes:
    """One to three numeric fields of a fresh seed snapshot replaced by an odd number (NaN, inf, ...). The input
    is not unpickled (a fuzzer's bytes could name any callable): each mutation starts from ``snapshot_seed``."""
    snap = snapshot_seed(rng.randrange(4))
    snap["segments"][0]["segment_pool_id"] = list(snap["segments"][0]["segment_pool_id"])
    places = list(_numeric_places(snap))
    for _ in range(rng.randint(1, 3)):
        place = rng.choice(places)
        parent = snap
        for step in place[:-1]:
            parent = parent[step]
        parent[place[-1]] = rng.choice(_ODD_NUMBERS)
    return pickle.dumps(snap, protocol=rng.choice([2, 4, 5]))


def run_snapshot_numbers(path: Path) -> None:
    """The ``snapshot_numbers`` target (see the module docstring)."""
    from veotrace.errors import VeotraceError

    verdicts = []
    for streamed in (False, True):
        os.environ["VEOTRACE_SNAPSHOT_STREAM_BYTES"] = "1" if streamed else str(1 << 40)
        try:
            got = []
            for command in ("sites", "fragmentation", "simulate", "view"):
                try:
                    _run_command(command, path)
                    got.append((command, "ok"))
                except VeotraceError as exc:
                    got.append((command, str(exc)[:200]))
            verdicts.append(got)
        finally:
            os.environ.pop("VEOTRACE_SNAPSHOT_STREAM_BYTES", None)
    if verdicts[0] != verdicts[1]:
        raise AssertionError(f"the whole and the streamed read differ: {verdicts[0]} vs {verdicts[1]}")


def _run_command(command: str, path: Path) -> None:
    import json

    if command == "sites":
        from veotrace.runs.sites import sites

        json.dumps(sites([path]).to_dict(), allow_nan=False)
    elif command == "fragmentation":
        from veotrace.runs.fragmentation import fragmentation

        fragmentation([path]).to_dict()
    elif command == "simulate":
        from veotrace.runs.simulate import simulate

        simulate([path], policy=["torch"]).to_dict()
    else:
        from veotrace.runs.view import view

        view([path], output=path.with_suffix(".html"))


# ----------------------------------------------------------------------------- Unicode digits on the CLI
#: Command lines with a numeric option, the value's digits marked by the option's index in the list (each is
#: valid as written: the digits replaced, it must be refused).
CLI_CASES: tuple[tuple[list, int], ...] = (
    (["simulate", TRAINING, "-p", "torch", "--capacity", "80GiB"], 5),
    (["simulate", TRAINING, "-p", "torch", "--capacity", "80GiB", "--fraction", "0.5"], 7),
    (["simulate", TRAINING, "-p", "torch", "--conf", "max_split_size_mb:128"], 5),
    (["simulate", TRAINING, "-p", "torch", "--conf", "roundup_power2_divisions:[256:1,>:8]"], 5),
    (["simulate", TRAINING, "-p", "torch", "--conf", "garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
      "--capacity", "1GiB"], 5),
    (["simulate", TRAINING, "-p", "torch", "--torch-version", "2.9"], 5),
    (["simulate", TRAINING, "-p", "torch", "--window", "20ms"], 5),
    (["entropy", LOG, "--window", "300s"], 3),
    (["entropy", LOG, "--window-events", "100"], 3),
    (["entropy", LOG, "--min-class", "2"], 3),
    (["entropy", LOG, "--max-class", "12"], 3),
    (["fragmentation", LOG, "--window", "5s"], 3),
    (["fragmentation", LOG, "--threshold", "0.5"], 3),
    (["fragmentation", LOG, "--jobs", "2"], 3),
    (["sites", REPO / "tests" / "bad_inputs" / "snapshot_frame_line_nan.pickle", "--site-depth", "2"], 3),
    (["bursts", LOG, "--gap", "5ms"], 3),
    (["tune", TRAINING, "--try", "max_split_size_mb=unset,128"], 3),
)
#: Digits that are not ASCII, as ``str.isdigit``/``int()`` may take them: Arabic-Indic, extended Arabic-Indic,
#: Devanagari, full-width, superscripts, mathematical bold.
DIGIT_SETS = ("٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "０１２３４５６７８９", "⁰¹²³⁴⁵⁶⁷⁸⁹",
              "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗")


def odd_digits(text: str, rng: random.Random) -> str:
    """``text`` with some ASCII digits replaced by another script's (or an underscore between two)."""
    digits = [i for i, ch in enumerate(text) if ch.isascii() and ch.isdigit()]
    if not digits:
        return text
    chars = list(text)
    if rng.random() < 0.15 and len(digits) > 1:  # 1_000: Python's int() takes it, C's strtoull stops there
        i = rng.choice(digits[1:])
        chars.insert(i, "_")
        return "".join(chars)
    table = rng.choice(DIGIT_SETS)
    for i in rng.sample(digits, rng.randint(1, len(digits))):
        chars[i] = table[int(chars[i])]
    return "".join(chars)


def run_cli_numbers(path: Path) -> None:
    """The ``cli_numbers`` target (see the module docstring)."""
    data = path.read_bytes() or b"\x00"
    rng = random.Random(int.from_bytes(data[:8].ljust(8, b"\x00"), "little"))
    args, at = CLI_CASES[data[0] % len(CLI_CASES)]
    args = list(args)
    value = odd_digits(str(args[at]), rng)
    if value == str(args[at]):
        return
    args[at] = value
    code, out, err = _cli(args)
    if code == 0 and args[at - 1] == "--conf" and "PyTorch reads" in err and "and ignores" in err:
        return  # as PyTorch: std::stoull/stod read the ASCII digits before the first other character, said in a note
    if code == 0:
        raise AssertionError(f"{' '.join(map(str, args[:1] + args[2:]))}: a number in non-ASCII digits accepted "
                             f"(exit 0)")
    lines = [ln for ln in err.splitlines() if ln.startswith("Error:")]
    if code not in (1, 2) or len(lines) != 1:
        raise AssertionError(f"{args[0]} {args[at - 1]} {value!r}: exit {code}, stderr {err[-500:]!r}")
