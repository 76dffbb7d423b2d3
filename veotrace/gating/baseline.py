"""Gate layer: the baseline file (``veotrace-baseline/1``): build it from a result, write it, read and check it.

A baseline is one JSON object::

    {"schema": "veotrace-baseline/1", "veotrace_version": "0.1.0", "recorded_at": "...Z",
     "source": {"commit": "..."}, "fingerprint": {"files": [{"name", "size_bytes"}], "first_ns",
     "last_ns", "digest"},
     "metrics": {"entropy": {"params": {...}, "windows": {"window", "start_ns", "hours", "events",
                 "entropy_bits"}, "trend": {...}, "segments": [...], "summary": {...}}}}

``metrics`` is keyed by analysis name: a later analysis (fragmentation, bursts) adds its own entry
with its own params and series, and readers of one metric ignore the others, so the format does not
change. Windows are stored column-wise (one list per column), NaN as null.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from veotrace.defaults import GATE_MIN_WINDOWS
from veotrace.errors import AnalysisError, UsageError, VeotraceError

SCHEMA_NAME = "veotrace-baseline"
SCHEMA_VERSION = 1
SCHEMA = f"{SCHEMA_NAME}/{SCHEMA_VERSION}"
ENTROPY = "entropy"
#: Parameters that change the entropy numbers: a run is judged only with the baseline's values.
ENTROPY_PARAMS = ("window_s", "step_s", "window_events", "ops", "min_class", "max_class", "time_unit")
NS_PER_HOUR = 3_600_000_000_000
_MAKE_ONE = "Make one with 'veotrace entropy PATH --save-baseline FILE'"


@dataclass
class Series:
    """One run's windows as the gate uses them.

    ``x`` is hours since the first window's start (``x_unit == "hours"``), computed here from the
    window starts, or the window number for event-count windows (``"window"``); ``h`` is the entropy
    in bits, NaN for an empty window.
    """

    x: np.ndarray
    h: np.ndarray
    x_unit: str

    @property
    def finite(self) -> np.ndarray:
        return np.isfinite(self.h)

    @property
    def span(self) -> float:
        """Length covered, in ``x_unit`` (0 for fewer than two windows)."""
        return float(self.x[-1] - self.x[0]) if self.x.size > 1 else 0.0


def series_from_columns(window: Any, start_ns: Any, entropy_bits: Any) -> Series:
    """A Series from window numbers, starts (ns, or all null) and entropies (null for empty windows)."""
    h = np.array([np.nan if v is None else float(v) for v in entropy_bits], dtype=np.float64)
    starts = list(start_ns)
    if starts and all(s is not None for s in starts):
        s = np.asarray(starts, dtype=np.int64)
        return Series((s - s[0]) / NS_PER_HOUR, h, "hours")
    return Series(np.asarray(list(window), dtype=np.float64), h, "window")


def series_from_result(result: Any) -> Series:
    """The Series of an EntropyResult (reads only the stable ``window``, ``start_ns``, ``entropy_bits``)."""
    w = result.windows
    return series_from_columns(w.column("window").to_pylist(), w.column("start_ns").to_pylist(),
                               w.column("entropy_bits").to_pylist())


def require_windows(series: Series, who: str, window_text: str) -> None:
    """Raises AnalysisError when ``series`` has too few non-empty windows to test (a run, or a baseline
    before it is saved; ``compare`` re-exports it)."""
    n = int(series.finite.sum())
    if n < GATE_MIN_WINDOWS:
        raise AnalysisError(
            f"{who} is too short to test: {n} non-empty windows of {window_text}; the gate needs at least "
            f"{GATE_MIN_WINDOWS}", hint="Gate a longer run, or save the baseline with a shorter --window")


@dataclass
class Baseline:
    """A parsed baseline file, reduced to one metric."""

    path: str
    analysis: str
    params: dict
    series: Series
    trend: dict
    segments: list
    summary: dict
    fingerprint: dict
    recorded_at: str
    version: str
    #: The file's ``source`` object: the CI commit, and the devices a profiler trace ran on (``input_devices``).
    source: dict = field(default_factory=dict)

    @property
    def mean(self) -> float:
        return float(np.nanmean(self.series.h))


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        return _clean(value.item())
    return value


def input_fingerprint(paths: list[Path], first_ns: int | None, last_ns: int | None) -> dict:
    """Names and sizes of the input files (folders expanded as the readers do) and the time span."""
    from veotrace.sources.base import expand_paths

    files = []
    for given in paths:
        if given.is_dir():
            files += [{"name": f"{given.name}/{p.relative_to(given).as_posix()}", "size_bytes": p.stat().st_size}
                      for p in expand_paths([given])]
        else:
            files.append({"name": given.name, "size_bytes": given.stat().st_size})
    core = {"files": files, "first_ns": first_ns, "last_ns": last_ns}
    digest = hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()[:16]
    return {**core, "digest": digest}


def entropy_baseline(result: Any, *, fingerprint: dict, time_unit: str, recorded_at: str | None = None,
                     source: dict | None = None) -> dict:
    """The baseline document of an EntropyResult (pure: the caller supplies fingerprint and time)."""
    from veotrace import __version__

    w = result.windows
    series = series_from_result(result)
    metric = {
        "params": {**{k: result.params.get(k) for k in ENTROPY_PARAMS if k != "time_unit"},
                   "classes": result.params.get("classes"), "time_unit": time_unit,
                   "segments_hours": list(result.params.get("segments_hours") or [])},
        "windows": {"window": w.column("window").to_pylist(), "start_ns": w.column("start_ns").to_pylist(),
                    "hours": series.x.tolist() if series.x_unit == "hours" else [None] * w.num_rows,
                    "events": w.column("events").to_pylist(), "entropy_bits": series.h.tolist()},
        "x_unit": series.x_unit,
        "trend": result.trend, "segments": result.segments,
        "summary": {"windows": w.num_rows, "nonempty_windows": int(series.finite.sum()),
                    "mean_entropy_bits": float(np.nanmean(series.h)) if series.finite.any() else None,
                    "events_counted": result.summary.get("events_counted")},
    }
    stamp = recorded_at or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return _clean({"schema": SCHEMA, "veotrace_version": __version__, "recorded_at": stamp,
                   "source": source or {}, "fingerprint": fingerprint, "metrics": {ENTROPY: metric}})


def window_text(params: dict) -> str:
    """The window of entropy parameters for messages: "300 s" or "35 events"."""
    if params.get("window_events") is None:
        return f"{params['window_s']:g} s"
    return f"{params['window_events']} events"


def save_entropy_baseline(path: Path, result: Any, *, paths: list[Path], time_unit: str, inputs: Any = ()) -> Path:
    """Write the baseline of ``result`` (read from ``paths``) to ``path``, never over one of ``inputs`` (the
    run's files); the CI commit is recorded if known."""
    require_windows(series_from_result(result), "the run (for --save-baseline)", window_text(result.params))
    fp = input_fingerprint(list(paths), result.summary.get("first_ns"), result.summary.get("last_ns"))
    commit = os.environ.get("GITHUB_SHA") or os.environ.get("CI_COMMIT_SHA")
    devices = input_devices(list(paths))
    doc = entropy_baseline(result, fingerprint=fp, time_unit=time_unit,
                           source={**({"commit": commit} if commit else {}), **({"devices": devices} if devices else {})})
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # e.g. baselines/$CI_COMMIT_SHA.json in a fresh job
    from veotrace.outputs import write_text

    write_text(json.dumps(doc, allow_nan=False) + "\n", Path(path), inputs=inputs)
    return Path(path)


def input_devices(paths: list) -> list[str]:
    """The GPUs profiler traces ran on, one ``lane (name)`` each (``cuda:0 (NVIDIA H100 80GB HBM3)``, from
    ``deviceProperties``); [] for any other input or one that does not read."""
    from veotrace.errors import VeotraceError
    from veotrace.sources import ReadOptions, ReadReport, resolve_inputs
    from veotrace.sources.kineto.trace import CPU, cached_read, device_memory, lane_text, lanes

    out = []
    try:
        inputs = resolve_inputs(paths, "alloc_events", options=ReadOptions(), report=ReadReport())
        for p, fmt in inputs:
            if fmt.name != "kineto":
                return []
            read = cached_read(p, ReadOptions(), ReadReport())
            names = device_memory(read.head)
            out += [f"{lane_text(k)} ({(names.get(k[2]) or (None,))[0] or 'unnamed'})" for k in lanes(read.table)
                    if k[1] != CPU]
    except VeotraceError:
        return []
    return out


def device_note(source: dict, paths: list) -> str | None:
    """A note when the baseline's profiler trace ran on other GPUs than the run's (another model of GPU or
    another vendor's build): the gate compares the sizes allocated, not the devices."""
    before = source.get("devices") if isinstance(source, dict) else None
    if not isinstance(before, list) or not before or not all(isinstance(b, str) for b in before):
        return None
    now = input_devices(paths)
    if not now or sorted(before) == sorted(now):
        return None

    def listed(devs: list) -> str:
        return ", ".join(d[:80] for d in devs[:4]) + (f" and {len(devs) - 4:,} more" if len(devs) > 4 else "")

    return (f"the baseline ran on {listed(before)}, this run on {listed(now)}: the gate compares the sizes allocated, "
            "not the devices (veotrace diff compares their memory)")


def read_baseline(path: Path, analysis: str = ENTROPY) -> Baseline:
    """Read and check a baseline file.

    Raises:
        VeotraceError: missing, unreadable, truncated or non-JSON file; not a baseline (or the JSON
            output of a command); a newer schema; no ``analysis`` metric; damaged content.
    """
    path = Path(path)
    if path.is_dir():
        raise VeotraceError("is a folder, not a baseline file", path=path,
                            hint="Use --history FOLDER for a folder of baselines")
    if not path.exists():
        raise VeotraceError("baseline file not found", path=path, hint=_MAKE_ONE)
    return parse_baseline(path.read_bytes(), path, analysis)


def parse_baseline(data: bytes, path: Path | str, analysis: str = ENTROPY) -> Baseline:
    """Parse the bytes of a baseline file (see ``read_baseline``)."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise VeotraceError("is not a baseline: binary data, not JSON text", path=path, hint=_MAKE_ONE) from None
    except json.JSONDecodeError as exc:
        cut = " (the file ends early: truncated?)" if exc.pos >= len(data.rstrip()) else ""
        raise VeotraceError(f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}{cut}",
                            path=path, hint=_MAKE_ONE) from None
    except ValueError as exc:  # Python's bound on integer digits (a 5,000-digit number)
        raise VeotraceError(f"is not a baseline: {str(exc).split(';')[0]}", path=path, hint=_MAKE_ONE) from None
    except RecursionError:
        raise VeotraceError("is not a baseline: JSON nested too deeply", path=path, hint=_MAKE_ONE) from None
    if not isinstance(doc, dict) or "schema" not in doc:
        what = ("the JSON output of 'veotrace entropy', not a baseline" if isinstance(doc, dict)
                and "windows" in doc and "trend" in doc else "not a veotrace baseline (no 'schema' key)")
        raise VeotraceError(f"is {what}", path=path, hint=_MAKE_ONE)
    schema = str(doc["schema"])
    name, _, version = schema.partition("/")
    if name != SCHEMA_NAME or not (version.isascii() and version.isdigit() and len(version) < 10):  # not '¹²'
        raise VeotraceError(f"is not a veotrace baseline (schema {schema!r}, expected {SCHEMA!r})", path=path,
                            hint=_MAKE_ONE)
    if int(version) > SCHEMA_VERSION:
        from veotrace import __version__

        raise VeotraceError(
            f"was written by a newer veotrace ({doc.get('veotrace_version', '?')}, schema {schema}); this "
            f"veotrace {__version__} reads up to {SCHEMA}", path=path,
            hint=f"Upgrade veotrace, or save the baseline again with veotrace {__version__}")
    metrics = doc.get("metrics") if isinstance(doc.get("metrics"), dict) else {}
    if analysis not in metrics:
        held = ", ".join(sorted(metrics)) or "no metrics"
        raise VeotraceError(f"is a baseline of {held}, not of {analysis}", path=path,
                            hint=f"Save one with 'veotrace {analysis} PATH --save-baseline FILE'")
    return _entropy_baseline(doc, metrics[analysis], path)


def _entropy_baseline(doc: dict, m: Any, path: Path | str) -> Baseline:
    def damaged(what: str) -> VeotraceError:
        return VeotraceError(f"baseline is damaged: {what}", path=path, hint="Save the baseline again")

    if not isinstance(m, dict) or not isinstance(m.get("params"), dict) or not isinstance(m.get("windows"), dict):
        raise damaged("metrics.entropy needs 'params' and 'windows' objects")
    win = m["windows"]
    cols = [win.get(c) for c in ("window", "start_ns", "entropy_bits")]
    if not all(isinstance(c, list) for c in cols) or len({len(c) for c in cols}) != 1:
        raise damaged("metrics.entropy.windows needs lists 'window', 'start_ns', 'entropy_bits' of one length")
    missing = [k for k in ENTROPY_PARAMS if k not in m["params"]]
    if missing:
        raise damaged(f"metrics.entropy.params lacks {', '.join(missing)}")
    problem = _bad_params(m["params"]) or _bad_windows(*cols) or _bad_entropy(m["params"], cols[2]) or _bad_rest(doc, m)
    if problem:
        raise damaged(problem)
    try:
        series = series_from_columns(*cols)
    except (TypeError, ValueError, OverflowError):
        raise damaged("metrics.entropy.windows holds non-numbers") from None
    return Baseline(str(path), ENTROPY, dict(m["params"]), series, m.get("trend") or {}, m.get("segments") or [],
                    m.get("summary") or {}, doc.get("fingerprint") or {}, str(doc.get("recorded_at") or ""),
                    str(doc.get("veotrace_version") or "?"), source=doc.get("source") or {})


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _shown(v: Any) -> str:
    text = f"an integer of {v.bit_length()} bits" if _is_int(v) and abs(v) >= 10**30 else json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _bad_params(p: dict) -> str | None:
    """What is wrong with a baseline's entropy parameters (types and ranges, as the options take them), or None.

    The gate reruns entropy with them, so a value no option would accept (a window of 1e30 s, a class
    past 42, an unknown time unit) is refused here, naming the field, rather than deep in the run.
    """
    from veotrace.analysis.entropy.entropy import MAX_CLASS_LIMIT
    from veotrace.defaults import MAX_DURATION_NS, MIN_DURATION_NS
    from veotrace.sources.base import TIME_UNIT_NS

    where = "metrics.entropy.params."
    for key in ("window_s", "step_s"):
        v = p[key]
        if v is not None and not (_is_number(v) and MIN_DURATION_NS <= v * 1e9 < MAX_DURATION_NS):
            return f"{where}{key} = {_shown(v)} is not a duration of 1 ns .. 2**63 ns in seconds"
    v = p["window_events"]
    if v is not None and not (_is_int(v) and 1 <= v < 1 << 63):
        return f"{where}window_events = {_shown(v)} is not a whole number of events from 1 to 2**63-1"
    if p["window_s"] is None and p["window_events"] is None:
        return f"{where} has neither window_s nor window_events"
    if not (isinstance(p["ops"], list) and p["ops"] and all(isinstance(o, str) and o for o in p["ops"])):
        return f"{where}ops = {_shown(p['ops'])} is not a list of op names"
    for key in ("min_class", "max_class"):
        if not (_is_int(p[key]) and 0 <= p[key] <= MAX_CLASS_LIMIT):
            return f"{where}{key} = {_shown(p[key])} is not a size class from 0 to {MAX_CLASS_LIMIT}"
    if p["min_class"] > p["max_class"]:
        return f"{where}min_class {p['min_class']} is above max_class {p['max_class']}"
    if p["time_unit"] not in TIME_UNIT_NS:
        return f"{where}time_unit = {_shown(p['time_unit'])} is not one of {', '.join(TIME_UNIT_NS)}"
    hours = p.get("segments_hours") or []
    if not (isinstance(hours, list) and all(_is_number(h) and 0 < h < MAX_DURATION_NS / 3.6e12 for h in hours)):
        return f"{where}segments_hours = {_shown(hours)} is not a list of positive hours"
    return None


def _bad_windows(window: list, start_ns: list, entropy_bits: list) -> str | None:
    """What is wrong with a baseline's window columns, or None: window numbers and starts are integers of
    int64 (starts all null for event windows), entropies finite non-negative bits or null."""
    where = "metrics.entropy.windows."
    for i, v in enumerate(window):
        if not (_is_int(v) and 0 <= v < 1 << 63):
            return f"{where}window[{i}] = {_shown(v)} is not a window number from 0 to 2**63-1"
    for i, v in enumerate(start_ns):
        if v is not None and not (_is_int(v) and -(1 << 63) <= v < 1 << 63):
            return f"{where}start_ns[{i}] = {_shown(v)} is not a time in int64 nanoseconds"
    starts = [v for v in start_ns if v is not None]
    if starts and max(starts) - min(starts) >= 1 << 63:
        return f"{where}start_ns spans more than 2**63 ns"
    for i, v in enumerate(entropy_bits):
        if v is not None and not (_is_number(v) and v >= 0):
            return f"{where}entropy_bits[{i}] = {_shown(v)} is not a non-negative number of bits"
    return None


def _bad_entropy(p: dict, entropy_bits: list) -> str | None:
    """An entropy above log2 of the class count, which no window can have (a window of 1e308 bits made the
    slope's arithmetic overflow, with numpy warnings on stderr and a FAIL), or None."""
    classes = p["max_class"] - p["min_class"] + 1
    top = math.log2(classes) * (1 + 1e-9) + 1e-9  # the rounding of a sum of p log2 p
    for i, v in enumerate(entropy_bits):
        if v is not None and v > top:
            return (f"metrics.entropy.windows.entropy_bits[{i}] = {_shown(v)} is above {math.log2(classes):.4g} bits, "
                    f"log2 of its {classes} size classes (min_class {p['min_class']} .. max_class {p['max_class']}): "
                    "no window has more")
    return None


def _bad_rest(doc: dict, m: dict) -> str | None:
    """What is wrong with the fields besides the parameters and windows (each checked by type and range, as a
    follow checkpoint is: a fingerprint that was a string or a number ended the gate in an AttributeError),
    or None. Each may be absent (a hand-made baseline); present, it is what ``entropy_baseline`` writes."""
    from veotrace.live import checkpoint as c

    fingerprint = c.record({"files": c.items(c.record({"name": c.text(), "size_bytes": c.COUNT}), max_len=1 << 20),
                            "first_ns": c.optional(c.TIME), "last_ns": c.optional(c.TIME), "digest": c.text(64)},
                           optional_keys=("files", "first_ns", "last_ns", "digest"))

    def kind(t: type, name: str):
        def check(v, where):
            if not isinstance(v, t):
                raise c.Bad(where, f"= {_shown(v) if isinstance(v, (int, float, str, bool)) else type(v).__name__} "
                                   f"is not {name}")
            return v
        return check

    top = c.record({"fingerprint": fingerprint, "recorded_at": c.optional(c.text(64)),
                    "veotrace_version": c.optional(c.text(64)), "source": kind(dict, "an object")},
                   optional_keys=("fingerprint", "recorded_at", "veotrace_version", "source"))
    metric = c.record({"trend": c.optional(kind(dict, "an object")), "segments": c.optional(kind(list, "a list")),
                       "summary": c.optional(kind(dict, "an object"))}, optional_keys=("trend", "segments", "summary"))
    try:
        top({k: doc[k] for k in ("fingerprint", "recorded_at", "veotrace_version", "source") if k in doc}, "")
        metric({k: m[k] for k in ("trend", "segments", "summary") if k in m}, "metrics.entropy")
    except c.Bad as exc:
        return str(exc)
    return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return sorted(map(str, a)) == sorted(map(str, b))
    return a == b


def show_param(name: str, value: Any) -> str:
    """A parameter value as a user would type it (``--window 300s``, ``--ops alloc,free``)."""
    if value is None:
        return "not set"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    if name in ("window_s", "step_s"):
        return f"{value:g}s"
    return str(value)


def check_params(requested: dict, baseline: Baseline) -> None:
    """Refuse options given on the gate that differ from the baseline's parameters.

    ``requested`` holds only the options the user gave (None = take the baseline's).

    Raises:
        UsageError: names the first differing parameter and both values.
    """
    for name in ENTROPY_PARAMS:
        value = requested.get(name)
        if value is not None and not _same(value, baseline.params.get(name)):
            option = "--" + name.removesuffix("_s").replace("_", "-")
            raise UsageError(
                f"{option} {show_param(name, value)} differs from the baseline's {show_param(name, baseline.params.get(name))} "
                f"({baseline.path}); entropy values depend on it",
                hint=f"Drop {option} to judge the run with the baseline's value, or save a new baseline")


def same_params(a: Baseline, b: Baseline) -> None:
    """Refuse two baselines (of one history) made with different parameters, naming the parameter."""
    for name in ENTROPY_PARAMS:
        if not _same(a.params.get(name), b.params.get(name)):
            raise VeotraceError(
                f"{name} is {show_param(name, b.params.get(name))} here but {show_param(name, a.params.get(name))} "
                f"in {a.path}; a history must use one set of parameters", path=b.path,
                hint="Move baselines made with other parameters to another folder")


def read_history(folder: Path) -> list[Baseline]:
    """Every baseline (``*.json``) in ``folder``, oldest first by recorded time, all of one set of parameters.

    Raises:
        VeotraceError: not a folder; a file that is not a baseline; parameters that differ.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise VeotraceError("is not a folder", path=folder, hint="--history takes a folder of baseline files")
    found = sorted((read_baseline(p) for p in sorted(folder.glob("*.json"))), key=lambda b: (b.recorded_at, b.path))
    for b in found[1:]:
        same_params(found[0], b)
    return found
