"""Run `simulate`: read a trace (a snapshot's settings and state too) and replay it through allocator policies.

``load_trace`` is the one reading path behind the command, the report's section and the API.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from veotrace.defaults import SIMULATE_MAX_UNKNOWN_FREES, SITES_DEPTH
from veotrace.errors import EXIT_CHECK_FAILED
from veotrace.runs import common
from veotrace.runs.result import RunResult


@dataclass
class SimulateRun(RunResult):
    """``simulate``'s result: ``value`` is the ``SimulationResult`` of every policy replayed."""

    command = "simulate"

    def tables(self) -> dict[str, Any]:
        if self.value.keyed is None:
            return {"windows": self.value.windows}
        from veotrace.allocators.bykey import keyed_table

        return {"windows": self.value.windows, "by_key": keyed_table(self.value.keyed["policies"])}

    def headline(self) -> list[tuple[str, Any]]:
        from veotrace.analysis.ooms import oom_verdict
        from veotrace.render.console import fmt_bytes

        res = self.value
        by_name = {r["policy"]: r for r in res.policies}
        out = [("best policy", res.whatif[0]["policy"])]
        for name in ("torch", "ideal"):
            if name not in by_name:
                continue
            per_device = by_name[name].get("per_device") or {}
            if len(per_device) > 1:  # the pooled peak sums GPUs' peaks that no one GPU holds
                out.append((f"{name} peak reserved per device",
                            ", ".join(f"device {d}: {fmt_bytes(x['peak_reserved_bytes'])}"
                                      for d, x in sorted(per_device.items(), key=lambda kv: int(kv[0])))))
            else:
                out.append((f"{name} peak reserved", by_name[name]["peak_reserved_bytes"]))
        if "torch" in by_name and "ideal" in by_name:
            out.append(("torch vs ideal", next(w["vs_ideal"] for w in res.whatif if w["policy"] == "torch")))
        for o in res.params.get("recorded_ooms") or []:
            out.append((f"recorded OOM (device {o['device']})", oom_verdict(o)))
        v = res.validation
        if v is not None and not v.get("recorded_segment_allocs"):  # nothing recorded to check against
            out.append(("validation", v.get("note", "nothing to validate")))
        elif v is not None:
            if v["allocator"]["pytorch_cuda_caching"] is False:
                out.append(("validation", "not PyTorch's CUDA caching allocator: " + v["allocator"]["why"]))
            out += [("segment allocs reproduced", f"{100 * v['share']:.1f}%"),
                    ("extra segment allocs", f"{v['extra']} ({100 * v['extra_share']:.1f}%)")]
        return out

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.simulate import render_simulate

        render_simulate(console, self.value, max_rows=max_rows)


def simulate(paths, *, policy: str | list[str] | None = None, conf: str | None = None, capacity: str | int | None = None,
             tiers: str | None = None, window: str | float | None = None, window_requests: int | None = None,
             max_unknown_frees: float = SIMULATE_MAX_UNKNOWN_FREES, no_recorded_releases: bool = False,
             id_col: str | None = None, torch_core: str = "auto", fail_on_oom: bool = False, time_unit: str = "ns",
             skip_bad_rows: bool = False, format_hint: str | None = None, by: str | None = None,
             site_filter: str | None = None, site_depth: int = SITES_DEPTH, fraction: float | None = None,
             torch_version: str | None = None, on_progress: common.Progress = None, events_table=None,
             engine: str = "local", jobs: int = 1, scheduler: str | None = None, workers: int | None = None) -> SimulateRun:
    """What-if: replay alloc/free events through allocator policies (recorded addresses ignored) and rank them.

    Args:
        policy: the policies to replay (a name or a list; default: all).
        conf: ``PYTORCH_CUDA_ALLOC_CONF`` for the torch policy (default: the snapshot's settings).
        capacity: device memory per GPU (``"80GiB"`` or bytes): allocations past it are reported.
        tiers: the tiered pools, ``"10ms:4MiB,100ms:64MiB,inf:512MiB"``.
        window, window_requests: window length, or N requests per window.
        max_unknown_frees: largest share of frees naming no live allocation before refusing the input.
        no_recorded_releases: do not follow the trace's segment frees and unmaps.
        id_col: pair allocs and frees by this column instead of the address.
        torch_core: ``"auto"``, ``"c"`` or ``"python"``.
        fail_on_oom: exit code 3 when a policy's allocation does not fit ``capacity``.
        by: ``"site"`` or ``"phase"``: which policy helps which site (or phase): each policy's live and
            stranded bytes by key at each device's peak reserved and at the end (JSON ``sites`` or
            ``phases``), for a PyTorch snapshot, its conversion, or logs with a ``site``/``phase`` column.
        site_filter, site_depth: the site rule (``--site-filter``, ``--site-depth``).
        fraction: the job's ``set_per_process_memory_fraction`` (needs ``capacity``, the device's memory).
        torch_version: the release whose settings rules apply (default: from the snapshot's keys).
        events_table: the ``ALLOC_EVENTS`` table of ``paths`` when it was read already (one process; ``diagnose``).
        engine, jobs, scheduler, workers: where a folder of profiler traces has its ranks read (the same answer).
    """
    from veotrace.allocators import simulate as sim
    from veotrace.allocators.stream import open_requests
    from veotrace.allocators.validation import validate
    from veotrace.analysis import timescale
    from veotrace.analysis.ooms import OomTap, oom_lines, with_device_free

    paths = common.as_paths(paths)
    names = sim.check_policies([policy] if isinstance(policy, str) else list(policy or []))
    sim.check_core(torch_core)
    cap = common.nbytes(capacity, "--capacity")
    frac = common.fraction(fraction, cap)
    window_s = common.seconds(window, "--window")
    tier_spec = parse_tiers(tiers)
    options, report = common.reading(time_unit, skip_bad_rows, format_hint,
                                     extra_columns=(id_col,) if id_col is not None else (), option="--id-col")
    key = id_col or "address"
    tap = OomTap()
    by = getattr(by, "value", by)
    rule = common.site_rule(site_filter, site_depth) if by == "site" else None
    config = common.engine(engine, jobs, scheduler, workers)
    table, torch_conf, snap_conf, seed = load_trace(paths, options, report, conf, whole=by is not None, ooms=tap,
                                                    events=events_table, torch_version=torch_version, fraction=frac,
                                                    config=config)
    if conf is not None and torch_conf.per_process_memory_fraction is not None and cap is None:
        common.fraction(torch_conf.per_process_memory_fraction, cap, "--conf per_process_memory_fraction")
    from veotrace.errors import AnalysisError

    try:
        req = open_requests(table, names, seed, max_unknown_frees=max_unknown_frees,
                            use_releases=not no_recorded_releases, key=key, conf=snap_conf)
    except AnalysisError as exc:  # the trace's own pairing: name its file when there is one
        if exc.path is None and len(paths) == 1:
            exc.path = str(paths[0])
        from veotrace.runs.profiler import clash_hint

        exc.hint = clash_hint(report, exc.hint)  # two rank-less traces on one device: the pairing's likely cause
        raise
    keys = _request_keys(paths, by, req, options, rule) if by is not None else None
    result = sim.simulate(req, policies=names, conf=torch_conf, capacity=cap, seed=seed, tiers=tier_spec,
                          window_s=window_s, window_requests=window_requests, torch_core=torch_core, by=keys)
    if by is not None:
        from veotrace.allocators.bykey import helps

        reference = next(iter(result.keyed), None)  # the first replayed: torch unless --policy says otherwise
        result.keyed = {"by": by, "reference": reference, "helps": helps(result.keyed, reference),
                        "policies": result.keyed, **({"site_filter": rule.internal, "site_depth": rule.depth} if rule is not None else {})}
    if not result.params["counts"]["allocs"]:  # only a snapshot's seeded blocks: every policy would tie at 1.00x
        raise AnalysisError("the trace holds no allocation to replay (a snapshot's live blocks alone rank no allocator)",
                            path=paths[0] if len(paths) == 1 else None,
                            hint="Record the steps to study with torch.cuda.memory._record_memory_history() before "
                                 "_dump_snapshot(); 'veotrace fragmentation' shows this snapshot's state")
    if seed is not None and "torch" in names:
        result.validation = validate(table, seed, snap_conf, capacity=cap, max_unknown_frees=max_unknown_frees,
                                     torch_core=torch_core)
        if (snap_conf.recorded or {}).get("profiler_trace"):  # what was assumed to replay a profiler trace
            from veotrace.runs.profiler import profiler_validation
            from veotrace.sources import ReadReport, resolve_inputs

            profiler_validation(result.validation, seed, snap_conf.recorded["profiler_trace"],
                                [p for p, _ in resolve_inputs(paths, "alloc_events", options=options, report=ReadReport())])
            result.params["seed"] = result.validation["seed"]  # the summary's seeding row says the same
    ooms = with_device_free(tap.ooms(), common.oom_free(paths)) if tap.rows else []
    if ooms:  # would each policy have served the request that failed?
        from veotrace.allocators.oomprobe import probe_ooms
        from veotrace.allocators.tiered import DEFAULT_TIERS

        ooms = probe_ooms(req, ooms, policies=result.params["policies"], conf=torch_conf, seed=seed,
                          tiers=tier_spec or DEFAULT_TIERS, core=torch_core, capacity=cap,
                          budget_conf=snap_conf or torch_conf)
        _count_recorded_ooms(result, ooms, in_use=snap_conf is not None and torch_conf.same(snap_conf))
    choice = result.params["window_choice"]
    window_note = ([timescale.window_note(choice["window_s"], choice["reason"])]
                   if choice.get("mode") == "time" and choice.get("auto") else [])
    engine_note = []
    if config.parallel:  # only a folder of profiler traces is read on the engine; the replay is one process's
        from veotrace.runs.profiler import kineto_inputs
        from veotrace.sources import ReadReport

        engine_note = [("Note: --jobs/--engine read the ranks' traces in parallel; the replay runs on one process"
                        if kineto_inputs(paths, options, ReadReport()) else
                        "Note: --jobs/--engine read the ranks of profiler traces in parallel; this input and its "
                        "replay run on one process")]
    run = SimulateRun(result, [*report.messages(), *common.settings_lines(torch_conf), *window_note, *oom_lines(ooms),
                               *engine_note], common.input_files(paths))
    result.params["recorded_ooms"] = ooms
    result.params["read"] = report.to_dict()
    result.params["pair_by"] = key
    oom = result.first_oom
    if oom is not None:
        run.closing.append(
            f"Warning: {oom['policy']}: an allocation did not fit --capacity {capacity}: request {oom['request']:,} "
            f"({oom['size_bytes']:,} bytes)" + (f"; exit {EXIT_CHECK_FAILED} because of --fail-on-oom" if fail_on_oom else ""))
        if fail_on_oom:
            run.exit_code = EXIT_CHECK_FAILED
    return run


def _request_keys(paths, by: str, req, options, rule):
    """(the key code of every request of ``req``, the text of each code): a snapshot's sites or phases by
    row (``common.snapshot_keys``), or the logs' own ``by`` column read once more; the blocks a
    snapshot's seed holds (no source row) are keyed ``bykey.BEFORE``."""
    import numpy as np

    from veotrace.allocators.bykey import BEFORE
    from veotrace.sources import ReadReport

    keyed = common.snapshot_keys(paths, by, options=options, report=ReadReport(), rule=rule)
    if keyed is not None:
        _, by_row, names = keyed
    else:
        batches, names = common.keyed_read(paths, by, options=options, report=ReadReport(), columns=["seq"])
        seqs, keys = [], []
        for b in batches:
            seqs.append(b.column("seq").to_numpy())
            keys.append(b.column(by).to_numpy())
        seq = np.concatenate(seqs) if seqs else np.zeros(0, np.int64)
        by_row = np.full(int(seq.max()) + 1 if seq.size else 0, BEFORE, np.int64)
        by_row[seq] = np.concatenate(keys) if keys else by_row[:0]
    rows = np.frombuffer(req.seq, np.int64)
    inside = (rows >= 0) & (rows < by_row.size)
    return np.where(inside, by_row[np.clip(rows, 0, max(by_row.size - 1, 0))] if by_row.size else BEFORE, BEFORE), names


def _count_recorded_ooms(result, ooms: list[dict], *, in_use: bool) -> None:
    """Each policy's row counts the recorded OOMs as its own: the torch model under the settings the run used
    counts every one (the request failed), any other policy the ones it does not avoid; the what-if table
    follows (``oomprobe.counted``)."""
    from veotrace.allocators.oomprobe import counted
    from veotrace.allocators.simulate import whatif_table

    for row in result.policies:
        mine = row["policy"] == "torch" and in_use
        c = counted(row["policy"], mine, ooms)
        row["recorded_ooms"], row["ooms"] = c, row["ooms"] + c["counted"]
        row["in_use"] = mine
        for d, dev in (row.get("per_device") or {}).items():
            dev["ooms"] += counted(row["policy"], mine, [o for o in ooms if str(o["device"]) == d])["counted"]
    result.whatif = whatif_table(result.policies)


def parse_tiers(text: str | None):
    """``"10ms:4MiB,100ms:64MiB,inf:512MiB"`` -> ((0.01, 4194304), ...); None -> the defaults."""
    from veotrace.errors import UsageError

    if text is None:
        return None
    tiers = []
    for part in text.split(","):
        bound, _, gran = part.strip().partition(":")
        if not gran:
            raise UsageError(f"--tiers expects LIFETIME:GRANULARITY pairs such as 10ms:4MiB,inf:512MiB, got {part!r}")
        life = float("inf") if bound.strip() == "inf" else common.seconds(bound.strip(), "--tiers")
        tiers.append((life, common.nbytes(gran.strip(), "--tiers")))
    if [b for b, _ in tiers] != sorted(b for b, _ in tiers) or tiers[-1][0] != float("inf"):
        raise UsageError("--tiers bounds must increase and the last must be 'inf'", hint="e.g. 10ms:4MiB,100ms:64MiB,inf:512MiB")
    return tuple(tiers)


def load_trace(paths: list[Path], options, report, conf_text: str | None, *, whole: bool = True, ooms=None,
               events=None, torch_version: str | None = None, fraction: float | None = None, config=None):
    """The events table, and for one PyTorch snapshot (or its conversion by ``convert``) its settings-derived
    conf and seed (else None).

    Settings are read as the torch release they come from parses them (:func:`release_of`: the confs'
    ``torch_release``, and why in their ``recorded["release_from"]``); ``config`` (``engine.EngineConfig``): a
    folder of profiler traces has its ranks read on the engine's workers (the same table); ``fraction`` is the job's
    ``set_per_process_memory_fraction``, applied to both confs (a fact of the run, like its device).

    ``whole=False``: for anything but a snapshot, the events come as ``open_batches(first)``, which reads
    the source's batches anew at each call (see :class:`veotrace.allocators.stream.RequestStream`), so a
    long log is never held whole; only the first read reports to ``report`` (and shows ``ooms``, an
    ``analysis.ooms.OomTap``, the events). A snapshot's table is always whole. ``events``: the
    ``ALLOC_EVENTS`` table of ``paths`` when it was read already (one process; ``diagnose``), used in
    place of reading them again.
    """
    import pyarrow as pa

    from veotrace.allocators import conf as cf
    from veotrace.allocators.seed import rebuild
    from veotrace.sources import ReadReport, iter_alloc_events, resolve_inputs
    from veotrace.sources.snapshots import torch_snapshot as ts
    from veotrace.sources.snapshots.converted import converted_snapshot

    inputs = resolve_inputs(paths, "alloc_events", options=options, report=report)
    converted = converted_snapshot(inputs[0][0]) if len(inputs) == 1 and inputs[0][1].name == "parquet" else None
    snapshot = len(inputs) == 1 and (inputs[0][1].name == "torch-snapshot" or converted is not None)

    def open_batches(first: bool):
        batches = (iter(events.to_batches()) if events is not None else
                   iter_alloc_events(paths, options=options, report=report if first else ReadReport(), inputs=inputs))
        return ooms.tap(batches) if first and ooms is not None else batches  # the recorded OOMs, on the first read

    from veotrace.runs.profiler import kineto_inputs, replay_input

    traces = kineto_inputs(paths, options, report) if events is None and not snapshot else []  # or their Parquet
    table, seed = replay_input(traces, options, report, config) if traces else (None, None)
    profiled = table is not None
    if not profiled:
        table = pa.Table.from_batches(list(open_batches(True))) if whole or snapshot else open_batches
    snap_conf = releases = None
    seed = seed if profiled else None
    if snapshot:  # the snapshot itself, or its Parquet conversion with its tables and settings beside it
        path = inputs[0][0]
        info = None if converted else ts.snapshot_info(path)
        settings = converted.allocator_settings if converted else info.allocator_settings
        releases = converted.releases if converted else info.releases
    rel, rel_from = release_of(torch_version, releases)
    if snapshot:
        snap_conf = cf.from_settings(settings, path=path, torch_release=rel) if settings else cf.TorchConf(
            source="PyTorch defaults (the snapshot has no allocator_settings)", torch_release=rel)
        segments, blocks = ((converted.read_segments(), converted.read_blocks()) if converted
                            else (ts.read_segments(path), ts.read_blocks(path)))
        seed = rebuild(table, segments, blocks)
        # the frames recorded with each release (issue 46 item 2): from the file on either read, or as convert kept them
        from veotrace.allocators.releases import snapshot_release_frames

        seed.release_frames = converted.release_frames if converted else snapshot_release_frames(path)
    if profiled:  # a profiler trace records no settings: PyTorch's defaults, said so (allocators.kineto_seed)
        from veotrace.allocators.kineto_seed import ASSUMPTION

        snap_conf = cf.TorchConf(source="PyTorch defaults (a profiler trace records no allocator settings)",
                                 torch_release=rel, recorded={"profiler_trace": ASSUMPTION})
    conf = (cf.parse_conf(conf_text, torch_release=rel, release_from=rel_from) if conf_text is not None else
            (snap_conf or cf.TorchConf(torch_release=rel)))
    if fraction is not None:
        conf = replace(conf, per_process_memory_fraction=fraction)
        snap_conf = None if snap_conf is None else replace(snap_conf, per_process_memory_fraction=fraction)
    conf = replace(conf, recorded={**(conf.recorded or {}), "release_from": rel_from})
    if snap_conf is not None:
        snap_conf = replace(snap_conf, recorded={**(snap_conf.recorded or {}), "release_from": rel_from})
    return table, conf, snap_conf, seed


def release_of(torch_version: str | None, releases: tuple[str, str] | None) -> tuple[str, str]:
    """(the torch release whose rules apply, why): ``--torch-version``, else the last release that writes the
    snapshot's keys, else the default."""
    from veotrace.allocators import conf as cf

    if torch_version is not None:
        got = cf.release(torch_version)
        return f"{got[0]}.{got[1]}", "--torch-version"
    if releases is not None:
        lo, hi = releases
        return hi, (f"the snapshot's keys: written by torch {lo}" + (f" to {hi}" if hi != lo else "") +
                    (f"; {hi} assumed (give --torch-version to say which)" if hi != lo else ""))
    return cf.DEFAULT_RELEASE, (f"nothing says: torch {cf.DEFAULT_RELEASE} assumed (the newest release modelled; "
                                "give --torch-version to say which)")
