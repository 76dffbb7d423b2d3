"""Reader: .ncu-rep reports through NVIDIA's optional ``ncu_report`` module -> NCU_METRICS."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from veotrace.errors import MissingDependencyError, TraceFormatError, printable
from veotrace.schemas import NCU_METRICS, conform
from veotrace.sources.base import ReadReport
from veotrace.sources.base import detail as _detail
from veotrace.sources.nsight.ncu_common import normalise_unit


def read_report(path: Path, *, report: ReadReport) -> pa.Table:
    """All numeric metrics of every launch in an .ncu-rep report (string attributes are left out).

    Raises:
        MissingDependencyError: ``ncu_report`` is not installed (the ``veotrace[ncu]`` extra).
        TraceFormatError: the module cannot load the report.
    """
    try:
        import ncu_report
    except ImportError:
        raise MissingDependencyError(
            "reading .ncu-rep reports needs NVIDIA's ncu-report package", path=path,
            hint="Install the extra: pip install 'veotrace[ncu]' (or export CSV with 'ncu --import FILE --csv')",
        ) from None
    try:
        ctx = ncu_report.load_report(str(path))
    except Exception as exc:  # noqa: BLE001 - the module's error types are undocumented
        raise TraceFormatError(f"ncu_report could not load the report ({_detail(exc)})", path=path) from None
    cols: dict[str, list] = {k: [] for k in ("launch_id", "kernel", "metric", "unit", "value", "device",
                                             "block_size", "grid_size")}
    launch = 0
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            kernel = action.name()
            block = _dims(action, "launch__block_dim")
            grid = _dims(action, "launch__grid_dim")
            for name in action.metric_names():
                m = action.metric_by_name(name)
                value = m.value() if m is not None else None
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    continue
                unit, factor = normalise_unit(m.unit() or "")
                cols["launch_id"].append(launch)
                cols["kernel"].append(kernel)
                cols["metric"].append(name)
                cols["unit"].append(unit or None)
                cols["value"].append(float(value) * factor)
                cols["device"].append(None)
                cols["block_size"].append(block)
                cols["grid_size"].append(grid)
            launch += 1
    if not cols["launch_id"]:
        # ncu_report loads a truncated or foreign file as an empty report instead of failing.
        raise TraceFormatError("the report holds no kernel launches with numeric metrics", path=path,
                               hint="It may be truncated or not an Nsight Compute report: copy it again, or open it in ncu-ui")
    cols["source_file"] = [printable(path)] * len(cols["launch_id"])
    return conform(pa.table(cols), NCU_METRICS).unify_dictionaries()


def _dims(action, prefix: str) -> str | None:
    parts = [action.metric_by_name(f"{prefix}_{axis}") for axis in "xyz"]
    if any(p is None for p in parts):
        m = action.metric_by_name(f"{prefix}_size")
        return None if m is None else f"({m.value()})"
    return "(" + ", ".join(str(int(p.value())) for p in parts) + ")"
