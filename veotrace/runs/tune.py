"""Run `tune`: read a trace once, decode its requests once, replay every candidate setting through the torch
model (pruned, on the engines), and recommend one, with its trust and robustness."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from veotrace.defaults import SIMULATE_MAX_UNKNOWN_FREES
from veotrace.runs import common
from veotrace.runs.result import RunResult


@dataclass
class TuneResult:
    """``tune/1``: every candidate's numbers, the Pareto front, the recommendation, the validation."""

    params: dict
    candidates: list[dict]
    pareto: list[int]
    recommendation: dict
    validation: dict | None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"schema": "tune/1", "params": self.params, "candidates": self.candidates, "pareto": self.pareto,
                "recommendation": self.recommendation, "validation": self.validation, "notes": self.notes}


@dataclass
class TuneRun(RunResult):
    """``tune``'s result: ``value`` is the ``TuneResult``."""

    command = "tune"

    def tables(self) -> dict[str, Any]:
        from veotrace.schemas.tune import candidates_table

        return {"candidates": candidates_table(self.value.candidates, self.value.pareto)}

    def headline(self) -> list[tuple[str, Any]]:
        rec = self.value.recommendation
        if rec.get("conf") is None:
            return [("recommendation", f"none: {rec['why']}")]
        out = [("recommendation", rec["export"] or rec["why"]), ("predicted peak reserved", rec["peak_reserved_bytes"])]
        for s in rec["savings"]:
            out.append((f"saves against {s['against']}", s["peak_reserved_bytes"]))
        if rec.get("side_note"):  # the tie-breaker: under the margin, not a gain
            out.append(("side note", rec["side_note"]["text"]))
        return out

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.tune import render_tune

        render_tune(console, self.value, max_rows=max_rows)


def tune(paths, *, capacity: str | int | None = None, fraction: float | str | None = None,
         torch_version: str | None = None, objective: str = "peak-reserved", tries: list[str] | None = None,
         space: str | None = None, exhaustive: bool = False, torch_core: str = "auto",
         max_unknown_frees: float = SIMULATE_MAX_UNKNOWN_FREES, no_recorded_releases: bool = False,
         id_col: str | None = None, engine: str = "local", jobs: int = 1, scheduler: str | None = None,
         workers: int | None = None, time_unit: str = "ns", skip_bad_rows: bool = False,
         format_hint: str | None = None, on_progress: common.Progress = None, events_table=None) -> TuneRun:
    """Which PYTORCH_CUDA_ALLOC_CONF for this trace: every candidate replayed through the torch model, the
    Pareto front (peak reserved against device allocations) and one recommendation.

    Args:
        capacity: the device's memory per GPU; without it, a recorded OOM's budget (the torch model's reserved
            bytes before the failed request, under the settings in use, plus the free bytes the trace recorded)
            on its device.
        fraction: the job's ``set_per_process_memory_fraction`` (needs ``capacity``): every candidate runs under
            it, and only then is garbage_collection_threshold searched.
        torch_version: the release whose settings rules apply (default: from the snapshot's keys).
        objective: ``peak-reserved`` (default), ``device-allocs`` or ``flushes``: what the rule minimises.
        tries: ``KEY=V1,V2`` values replacing a knob's in the grid. space: a TOML file replacing the grid.
        exhaustive: run every candidate to the end (no pruning; the front then covers all).
        engine, jobs, scheduler, workers: where the candidates run (each candidate a task).
        events_table: the ``ALLOC_EVENTS`` table of ``paths`` when it was read already (one process; ``diagnose``).

    Raises:
        UsageError: an unknown knob or value, an unknown objective. VeotraceError: unreadable input, no
        allocation to replay, a capacity no candidate fits.
    """
    from veotrace.allocators.conf import TorchConf
    from veotrace.allocators.simulate import check_core
    from veotrace.allocators.stream import open_requests
    from veotrace.analysis.ooms import OomTap, with_device_free
    from veotrace.errors import AnalysisError, UsageError
    from veotrace.runs.simulate import load_trace
    from veotrace.tuning import space as sp
    from veotrace.tuning.evaluate import OBJECTIVES

    paths = common.as_paths(paths)
    if objective not in OBJECTIVES:
        raise UsageError(f"unknown --objective {objective!r}", hint=f"Objectives are {', '.join(OBJECTIVES)}")
    check_core(torch_core)
    config = common.engine(engine, jobs, scheduler, workers)
    cap = common.nbytes(capacity, "--capacity")
    frac = common.fraction(fraction, cap)
    options, report = common.reading(time_unit, skip_bad_rows, format_hint,
                                     extra_columns=(id_col,) if id_col is not None else (), option="--id-col")
    tap = OomTap()
    table, base, snap_conf, seed = load_trace(paths, options, report, None, whole=True, ooms=tap, events=events_table,
                                              torch_version=torch_version, fraction=frac, config=config)
    rel = base.torch_release
    try:
        req = open_requests(table, ["torch"], seed, max_unknown_frees=max_unknown_frees,
                            use_releases=not no_recorded_releases, key=id_col or "address", conf=snap_conf)
    except AnalysisError as exc:
        if exc.path is None and len(paths) == 1:
            exc.path = str(paths[0])
        from veotrace.runs.profiler import clash_hint

        exc.hint = clash_hint(report, exc.hint)  # two rank-less traces on one device: the pairing's likely cause
        raise
    if not req.counts["allocs"]:
        raise AnalysisError("the trace holds no allocation to replay", path=paths[0] if len(paths) == 1 else None,
                            hint="Record the steps to study with torch.cuda.memory._record_memory_history()")
    notes: list[str] = []
    in_use = snap_conf  # the settings the run used: a snapshot's (PyTorch's defaults when it records none)
    job_fraction = in_use.per_process_memory_fraction if in_use is not None else frac
    if job_fraction is not None and cap is None:  # a recorded fraction with no device memory to apply it to
        notes.append(f"the recorded per_process_memory_fraction {job_fraction:g} is not applied: give --capacity (the "
                     "device's memory) to apply it")
        job_fraction = None
        in_use = None if in_use is None else replace(in_use, per_process_memory_fraction=None)
    ooms = with_device_free(tap.ooms(), common.oom_free(paths)) if tap.rows else []
    limit, limit_rule, in_use_ooms = _capacity(cap, ooms, req, seed, in_use, torch_core)
    values = sp.grid(tries=tries or [], space=space, fraction=job_fraction is not None, torch_release=rel)
    cands = sp.candidates(values, torch_release=rel, fraction=job_fraction)
    defaults = TorchConf(source="PyTorch defaults", torch_release=rel, per_process_memory_fraction=job_fraction)
    first = []
    profiled = snap_conf is not None and (snap_conf.recorded or {}).get("profiler_trace")  # kineto_seed.ASSUMPTION
    for label, conf in (("the settings in use" if _has_settings(in_use) else
                         "the settings in use (PyTorch's defaults: a profiler trace records none)" if profiled else
                         "the settings in use (PyTorch's defaults: the snapshot records none)", in_use),
                        ("PyTorch defaults", defaults)):
        if conf is None:
            continue
        hit = next((c for c in cands if c.conf.same(conf)), None)
        if hit is None:
            hit = sp.candidate_of(len(cands), conf)
            cands.append(hit)
        same = next((k for k, (_, i) in enumerate(first) if i == hit.index), None)
        if same is None:
            first.append((label, hit.index))
    if in_use is None:
        notes.append("the trace does not say which allocator settings the job used: savings are against PyTorch "
                     "defaults")
    validation = None
    if seed is not None:
        from veotrace.allocators.validation import validate

        validation = validate(table, seed, snap_conf, capacity=cap, max_unknown_frees=max_unknown_frees,
                              torch_core=torch_core)
        if profiled:  # what simulate says of a profiler trace's seed and validation (runs.profiler)
            from veotrace.runs.profiler import profiler_validation
            from veotrace.sources import ReadReport, resolve_inputs

            profiler_validation(validation, seed, profiled,
                                [p for p, _ in resolve_inputs(paths, "alloc_events", options=options, report=ReadReport())])
    from veotrace.tuning.program import program_releases

    released = program_releases(req, table)  # the program's own empty_cache() calls, for diagnose's rules
    del table
    settle = _settler(req, cands, in_use, in_use_ooms, seed, limit, torch_core)
    rows = _search(req, cands, [i for _, i in first], seed, limit, torch_core, objective,
                   not exhaustive, config, on_progress, settle)
    from veotrace.tuning.search import pareto, recommend

    rec = recommend(rows, objective=objective, capacity=limit)
    if rec is None and limit is not None and not in_use_ooms:
        _none_fits(req, cands, seed, torch_core, limit, limit_rule, paths)
    result = TuneResult(
        params={"objective": objective, "capacity_bytes": cap, "capacity": _cap_dict(limit), "capacity_rule": limit_rule,
                "fraction": job_fraction, "torch_release": rel,
                "torch_release_from": (base.recorded or {}).get("release_from"),
                "grid": {k: [v if v is not None else sp.UNSET for v in vals] for k, vals in values.items()},
                "candidates": len(cands), "pruning": not exhaustive,
                "evaluated": sum(r["status"] == "finished" for r in rows),
                "pruned": sum(r["status"] == "pruned" for r in rows),
                "requests": len(req), "counts": req.counts,
                "seed": ((validation or {}).get("seed") if profiled else None) or (
                    seed.describe() if seed is not None else "not seeded (not a PyTorch snapshot)"),
                "variable": _variable(rel, paths, options),
                "baselines": {label: i for label, i in first}, "in_use": in_use.to_dict() if in_use else None,
                "recorded_ooms": in_use_ooms, "program_releases": released, "read": report.to_dict(),
                "engine": config.kind, "jobs": config.jobs},
        candidates=rows, pareto=pareto(rows), validation=validation, notes=notes,
        recommendation=_recommendation(rec, rows, first, validation, req, seed, limit, torch_core, cands, paths, options,
                                       objective, in_use, in_use_ooms))
    lines = common.settings_lines(base) + [f"Note: {n}" for n in notes]
    run = TuneRun(result, [*report.messages(), *lines], common.input_files(paths))
    return run


def _variable(rel: str, paths, options) -> str:
    """The variable the export line names (the release's, a ROCm build's on a ROCm profiler trace): the
    candidates table's header says the same."""
    from veotrace.allocators.conf import alloc_conf_variable
    from veotrace.runs.profiler import profiler_hip

    return alloc_conf_variable(rel, rocm=profiler_hip(paths, options))[0]


def _has_settings(conf) -> bool:
    return conf is not None and conf.source == "snapshot allocator_settings"


def _cap_dict(limit):
    if isinstance(limit, dict):
        return {str(d): v for d, v in limit.items()}
    return limit


def _capacity(cap, ooms, req, seed, in_use, core):
    """(the capacity the candidates must fit, its rule, the recorded OOMs probed under the settings in use):
    --capacity per device, or each recorded OOM's budget on its device (``allocators.oomprobe``); None when
    there is neither."""
    if not ooms:
        return cap, ("--capacity (per device)" if cap is not None else "none: no --capacity and no recorded OOM"), []
    from veotrace.allocators.conf import TorchConf
    from veotrace.allocators.oomprobe import probe_ooms
    from veotrace.allocators.tiered import DEFAULT_TIERS

    probed = probe_ooms(req, ooms, policies=["torch"], conf=in_use or TorchConf(), seed=seed, tiers=DEFAULT_TIERS,
                        core=core, capacity=cap)
    if cap is not None:
        return cap, "--capacity (per device)", probed
    budgets = {}
    for o in probed:
        b = (o.get("what_if") or {}).get("budget_bytes")
        if b is not None:
            budgets[o["device"]] = min(b, budgets.get(o["device"], b))
    if not budgets:
        return None, "none: the recorded OOM has no free bytes to set a budget; give --capacity", probed
    return budgets, ("each recorded OOM's budget on its device: the torch model's reserved bytes before the failed "
                     "request, under the settings in use, plus the free bytes the trace recorded"), probed


def _settler(req, cands, in_use, in_use_ooms, seed, limit, core):
    """``settle(row)`` for the search: a finished candidate marked when it is the settings in use, and charged
    with the recorded OOMs it counts (``oomprobe.counted``: all of them for the settings in use; for any
    other, those it cannot serve within the budget, probed under its own settings)."""
    from veotrace.allocators.oomprobe import counted, probe_ooms
    from veotrace.allocators.tiered import DEFAULT_TIERS

    def settle(row):
        conf = cands[row["id"]].conf
        row["in_use"] = in_use is not None and conf.same(in_use)
        if not in_use_ooms:
            return
        probed = in_use_ooms if row["in_use"] else probe_ooms(
            req, [{k: v for k, v in o.items() if k != "what_if"} for o in in_use_ooms], policies=["torch"], conf=conf,
            seed=seed, tiers=DEFAULT_TIERS, core=core, capacity=limit)
        c = counted("torch", row["in_use"], probed)
        row["recorded_ooms"], row["ooms"] = c, row["ooms"] + c["counted"]
        for d, v in row["per_device"].items():
            v["ooms"] += counted("torch", row["in_use"], [o for o in probed if str(o["device"]) == d])["counted"]

    return settle


def _search(req, cands, first, seed, limit, core, objective, prune, config, on_progress, settle):
    from veotrace.tuning.search import search

    kw = {"seed": seed, "capacity": limit, "core": core, "objective": objective}
    done = [0]

    def step(row):
        done[0] += 1
        if on_progress is not None:
            on_progress(done[0], len(cands))

    if not config.parallel:
        return search(req, cands, first=first, prune=prune, on_progress=step, settle=settle, **kw)
    from veotrace.engine.calls import call_pool, width
    from veotrace.tuning.evaluate import evaluate_call

    with call_pool(evaluate_call, (req, kw), config) as run_many:
        return search(req, cands, first=first, prune=prune, run_many=run_many, wave=width(config), on_progress=step,
                      settle=settle, **kw)


def _none_fits(req, cands, seed, core, limit, rule, paths):
    """No candidate fits: the smallest peak any reaches without a limit, and by how much it is over."""
    from veotrace.errors import AnalysisError
    from veotrace.render.console import fmt_bytes
    from veotrace.tuning.search import recommend, search

    rows = search(req, cands, seed=seed, capacity=None, core=core)
    best = recommend(rows)
    per = best["per_device"]
    over = {d: v["peak_reserved_bytes"] - (limit.get(int(d)) if isinstance(limit, dict) else limit)
            for d, v in per.items() if (limit.get(int(d)) if isinstance(limit, dict) else limit) is not None}
    d, worst = max(over.items(), key=lambda kv: kv[1])
    raise AnalysisError(f"no candidate fits the capacity ({rule}): the smallest peak reserved, "
                        f"{fmt_bytes(per[d]['peak_reserved_bytes'])} on device {d} with "
                        f"{best['conf'] or 'PyTorch defaults'!r}, is {fmt_bytes(worst)} over",
                        path=paths[0] if len(paths) == 1 else None,
                        hint="Give a larger --capacity, or widen the search with --try/--space")


def _parts(req, paths, options):
    """The parts the recommendation is checked on: the two halves of the requests, and the snapshot's
    record_function phases when it has them (the requests of a phase; seeded ones in none)."""
    import numpy as np

    from veotrace.errors import UsageError
    from veotrace.sources import ReadReport
    from veotrace.tuning.evaluate import halves

    out = [("halves", halves(req), {0: "first half", 1: "second half"})]
    try:
        keyed = common.snapshot_keys(paths, "phase", options=options, report=ReadReport())
    except UsageError:  # several snapshots, nsys exports: no phases to check on, the halves only
        keyed = None
    if keyed is not None:
        _, by_row, names = keyed
        rows = np.frombuffer(req.seq, np.int64)
        parts = np.where((rows >= 0) & (rows < by_row.size), by_row[np.clip(rows, 0, max(by_row.size - 1, 0))], -1)
        if len(names) > 1:
            out.append(("phases", parts, dict(names)))
    return out


#: What the model does not know, whatever the trace: beside every recommendation.
MODEL_UNKNOWNS = ("the time cudaMalloc, cudaFree and page mapping take (only their counts are predicted)",
                  "other processes on the device and the CUDA context", "CUDA graphs and their private pools",
                  "memory allocated outside PyTorch's caching allocator")


def _recommendation(rec, rows, first, validation, req, seed, limit, core, cands, paths, options, objective,
                    in_use, in_use_ooms) -> dict:
    """The chosen setting with its export line, predicted savings against the settings in use (or PyTorch's
    defaults when the trace does not say), trust per knob and robustness; or why there is none."""
    from veotrace.allocators.oomprobe import LEFT_OUT
    from veotrace.runs.profiler import profiler_hip
    from veotrace.tuning.evaluate import part_peaks
    from veotrace.tuning.program import reserved_unknown
    from veotrace.tuning.search import kept, robustness, savings, verdict
    from veotrace.tuning.space import export_lines

    trust = _trust(validation)
    best = None if rec is None else rec["id"]
    if trust["ran"] and validation["allocator"]["pytorch_cuda_caching"] is False:
        return {"conf": None, "trust": trust, "why": validation["allocator"]["why"], "best_candidate": best}
    if trust["ran"] and not validation["meets_targets"]:
        return {"conf": None, "trust": trust,
                "why": (f"the torch model misses its validation targets on this trace (reproduced "
                        f"{validation['share']:.1%} of the recorded device allocations, {validation['extra']} extra; "
                        "targets >= 95% and <= 5%): its predictions are not trusted here"
                        + (f" ({validation['explanations'][0]})" if any((validation.get("graphs") or {}).values())
                           else "")),
                "best_candidate": best}
    unknown = reserved_unknown(req, seed, rows)
    if unknown is not None:  # the input contradicts itself: nothing to recommend from
        return {"conf": None, "trust": trust, "why": unknown["why"], "contradiction": unknown, "best_candidate": best}
    unreproduced = [o for o in in_use_ooms if (o.get("what_if") or {}).get("reproduced") is False]
    if unreproduced:
        o = unreproduced[0]
        return {"conf": None, "trust": trust,
                "why": (f"the recorded OOM on device {o['device']} (a request of {o['request_bytes']:,} bytes) is not "
                        "reproduced: the torch model under the settings in use serves it within the budget, so no "
                        f"setting is recommended as a fix for it. {LEFT_OUT}")}
    if rec is None:
        why = ("no setting in the grid serves the request that ran out of memory within its budget" if in_use_ooms
               else "no finished candidate that fits and is not known to misbehave")
        return {"conf": None, "trust": trust, "why": why}
    by_id = {r["id"]: r for r in rows}
    base_rows = [(label, by_id[i]) for label, i in first]
    cand = cands[rec["id"]]
    trust["knobs"] = _knobs(cand, in_use, trust["validated"])
    from veotrace.allocators.driver import summary as addresses

    trust["addresses"] = addresses(rec.get("assumed_addresses", 0), rec.get("assumed_ties", 0),
                                   getattr(req, "driver_rules", {}), req.devices)
    trust["model_does_not_know"] = list(MODEL_UNKNOWNS)
    out = {"conf": rec["conf"], "id": rec["id"], "in_use": bool(rec.get("in_use")),
           **export_lines(cand.conf, cand.text, rocm=profiler_hip(paths, options)),
           "rule": f"least {objective.replace('-', ' ')} that fits, ties by fewest device allocations, then fewest "
                   "flushes, then fewest knobs changed; never a combination known to misbehave",
           **{k: rec[k] for k in ("peak_reserved_bytes", "device_allocs", "device_frees", "flushes", "ooms")},
           "trust": trust}
    # savings against what the job ran with: the settings in use when the trace says, else PyTorch's defaults
    against = [(label, b) for label, b in base_rows if b["status"] == "finished" and (in_use is None or b.get("in_use"))]
    out["savings"] = [] if out["in_use"] else [dict(savings(rec, b), baseline=label) for label, b in against]
    out["verdict"] = verdict(rec, against[0][1] if against else None, objective, limit)
    if not out["in_use"] and not out["verdict"]["helps"]:  # under the margin: keep the settings in use
        label, base = against[0]
        rec, cand = base, cands[base["id"]]
        trust["knobs"] = _knobs(cand, in_use, trust["validated"])
        out = kept(out, base, label, objective, has_settings=in_use is not None)
    finished = [r for r in rows if r["status"] == "finished"]
    if len({r["peak_reserved_bytes"] for r in finished}) == 1 and len(finished) == len(rows):  # a pruned one was past it
        out["ties"] = (f"every setting run to the end has the same peak reserved ({rec['peak_reserved_bytes']:,} bytes): "
                       "no setting changes the peak on this trace")
    if out["in_use"] and not out.get("keep"):  # nothing to paste: the job already runs with them
        out.update(export=None, python=None, why="the settings in use are the best of the grid: keep them")
    out["robustness"] = []
    others = [(label, b) for label, b in against if b["id"] != rec["id"]]
    if not others:  # the recommendation is the baseline's setting: nothing to check it against
        return out
    divisions = _parts(req, paths, options)

    def peaks(row):  # one replay per setting, every division read from it
        return part_peaks(req, cands[row["id"]], [parts for _, parts, _ in divisions], seed=seed, capacity=limit,
                          core=core)

    mine, theirs = peaks(rec), [peaks(b) for _, b in others]
    for i, (what, _, names) in enumerate(divisions):
        for (label, b), their in zip(others, theirs, strict=True):
            out["robustness"].append(dict(robustness(mine[i], their[i], names, b["conf"] or "PyTorch defaults"),
                                          baseline=label, parts=what))
    return out


def _trust(validation) -> dict:
    """How far the torch model was checked on this trace (``validation``): ``ran`` (the trace records device
    allocations to check against), ``met`` (the replay met the targets; None when it did not run) and
    ``validated`` (ran and met: never true for a validation that failed), with ``validation`` saying the
    same in one word ("met", "failed" or "not run")."""
    ran = validation is not None and bool(validation.get("recorded_segment_allocs"))
    met = bool(validation["meets_targets"]) if ran else None
    trust = {"validated": bool(ran and met), "ran": ran, "met": met,
             "validation": "met" if met else "failed" if ran else "not run"}
    if ran:
        trust.update(share_reproduced=validation["share"], extra=validation["extra"],
                     extra_share=validation["extra_share"], meets_targets=validation["meets_targets"])
        if validation.get("allocator", {}).get("pytorch_cuda_caching") is False:
            trust["allocator"] = validation["allocator"]["why"]
        if not met:
            trust["note"] = (f"the validation ran and failed: the torch model reproduces {validation['share'] or 0:.1%} "
                             f"of this trace's device allocations ({validation['extra']} extra; targets >= 95% and "
                             "<= 5%)" + (": " + trust["allocator"] if "allocator" in trust else ""))
    else:
        trust["note"] = "not validated: the trace records no device allocations to check the torch model against"
    return trust


def _knobs(cand, in_use, validated: bool) -> dict:
    """Which knobs of the recommendation the recording exercised (the values it ran with: the model was checked
    under them) and which it changes from them (predicted only, never exercised on this trace)."""
    from veotrace.tuning.space import KNOBS, candidate_of

    mine = cand.values
    theirs = candidate_of(0, in_use).values if in_use is not None else {k: None for k in KNOBS}
    same = [k for k in KNOBS if mine.get(k) == theirs.get(k)]
    changed = [k for k in KNOBS if mine.get(k) != theirs.get(k)]
    if not validated:
        return {"validated": [], "predicted": list(KNOBS),
                "why": "nothing on this trace checks the model: every knob is predicted"}
    return {"validated": same, "predicted": changed,
            "why": "validated: the values the recording ran with; predicted: changed from them, never exercised here"}
