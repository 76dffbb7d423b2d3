"""Coverage-guided fuzzing of every reader and command target with atheris (libFuzzer), for a fixed time budget each.

    pip install 'veotrace[fuzz]'                           # atheris: not a test dependency
    python3 fuzz/fuzz_readers.py --seconds 60              # every reader, 60 s each, summary table
    python3 fuzz/fuzz_readers.py --target alloc_events --seconds 300
    python3 fuzz/fuzz_readers.py --target fragmentation --target simulate --target banks --target gate_baseline --target report
    python3 fuzz/fuzz_readers.py --target snapshot_stream --target checkpoint_entropy --target checkpoint_fragmentation
    python3 fuzz/fuzz_readers.py --target names --target snapshot_numbers --target cli_numbers   # issue 47

Each reader runs in its own process, starting from the valid seed files of ``fuzz/targets.py``;
inputs are mutated by libFuzzer and by ``fuzz/mutate.py`` (truncation, huge numbers, stray quotes,
gzip cut short, ...). A reader may return or raise ``VeotraceError``; any other exception, a
signal, a timeout (``--timeout``, default 20 s per input) or an RSS over ``--rss-mb`` (default
2048) is a crash, saved as ``WORKDIR/crashes/TARGET-...``: turn it into a regression test in
tests/bad_inputs (EXPECTED.tsv) or tests/test_hardening.py.
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _fuzz_one(target: str, workdir: Path, argv: list[str]) -> None:
    """Run libFuzzer on ``target`` in this process (does not return)."""
    import atheris

    with atheris.instrument_imports(include=["veotrace"]):
        import veotrace.sources  # noqa: F401
        import veotrace.sources.arrays  # noqa: F401
        import veotrace.sources.frames  # noqa: F401
        import veotrace.sources.logs.alloc_log  # noqa: F401
        import veotrace.sources.nsight.ncu  # noqa: F401
        import veotrace.sources.nsight.ncu_fast  # noqa: F401
        import veotrace.sources.nsight.nsys_csv  # noqa: F401
        import veotrace.sources.nsight.nsys_sqlite  # noqa: F401
        import veotrace.sources.parquet  # noqa: F401
        import veotrace.sources.probe  # noqa: F401
        import veotrace.sources.snapshots.large  # noqa: F401
        import veotrace.sources.snapshots.stream  # noqa: F401
        import veotrace.sources.snapshots.torch_snapshot  # noqa: F401
        if target.startswith("checkpoint_"):
            import veotrace.live  # noqa: F401
            import veotrace.live.checkpoint  # noqa: F401
            import veotrace.live.contract  # noqa: F401
            import veotrace.runs.follow  # noqa: F401
        if target in ("fragmentation", "simulate", "banks", "gate_baseline", "report", "names", "snapshot_numbers",
                      "cli_numbers"):
            import veotrace.allocators  # noqa: F401
            import veotrace.analysis.banks  # noqa: F401
            import veotrace.frag  # noqa: F401
            import veotrace.gating.baseline  # noqa: F401
            import veotrace.reporting.run  # noqa: F401
            import veotrace.runs.fragmentation  # noqa: F401
            import veotrace.runs.simulate  # noqa: F401
    from fuzz.checkpoints import mutate_state
    from fuzz.hostile import mutate_numbers
    from fuzz.mutate import mutate
    from fuzz.pickles import mutate_ops
    from fuzz.targets import STATE_TARGETS, run
    from veotrace.errors import VeotraceError

    scratch = workdir / f"input-{target}-{os.getpid()}"
    if target in STATE_TARGETS:  # a checkpoint names the log it follows: beside it, in the work dir
        scratch = workdir / f"input-{target}.state"
    structured = (mutate_state if target in STATE_TARGETS else mutate_ops if target == "snapshot_stream" else
                  mutate_numbers if target == "snapshot_numbers" else mutate)

    def test_one_input(data: bytes) -> None:
        scratch.write_bytes(data)
        try:
            run(target, scratch)
        except VeotraceError:
            pass

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        if seed % 3 == 0:
            return atheris.Mutate(data, max_size)
        rng = random.Random(seed)
        return (structured if seed % 3 == 1 else mutate)(data, rng)[: max(max_size, 1)]

    atheris.Setup(argv, test_one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()


def _corpus(target: str, workdir: Path) -> Path:
    from fuzz.targets import SEED_COMMANDS, SEED_TARGETS, STATE_TARGETS, seeds

    corpus = workdir / "corpus" / target
    corpus.mkdir(parents=True, exist_ok=True)
    if target in STATE_TARGETS:
        from fuzz.checkpoints import seed_states

        command = target.removeprefix("checkpoint_")
        (corpus / f"{command}.state").write_bytes(seed_states(workdir)[f"{command}.state"])
        return corpus
    if target == "snapshot_numbers":
        from fuzz.hostile import mutate_numbers

        for i in range(8):
            (corpus / f"numbers-{i}.pickle").write_bytes(mutate_numbers(b"", random.Random(i)))
        (corpus / "seed.pickle").write_bytes(pickle.dumps(__import__("fuzz.hostile").hostile.snapshot_seed(), protocol=4))
        return corpus
    if target == "cli_numbers":
        for i in range(17):
            (corpus / f"case-{i}").write_bytes(bytes([i]) + os.urandom(7))
        return corpus
    if target == "snapshot_stream":
        from fuzz.pickles import oddities, unframed
        from veotrace.synth.torch import synthetic_snapshot

        snap, _ = synthetic_snapshot(seed=2, n_allocs=4, devices=2)
        for protocol in (2, 4, 5):
            (corpus / f"small-{protocol}.pickle").write_bytes(pickle.dumps(snap, protocol=protocol))
        (corpus / "small-unframed.pickle").write_bytes(unframed(pickle.dumps(snap, protocol=5)))
        for name, data in oddities(snap).items():
            (corpus / f"{name}.pickle").write_bytes(data)
    for name, data in seeds(workdir).items():
        wanted = target in SEED_TARGETS[name] + SEED_COMMANDS.get(name, ()) or target in ("info", "names")
        if wanted or (target == "snapshot_stream" and name.endswith((".pickle", ".pkl"))):
            (corpus / name).write_bytes(data)
    return corpus


def _run_budget(target: str, seconds: int, workdir: Path, timeout: int, rss_mb: int) -> dict:
    corpus = _corpus(target, workdir)
    crashes = workdir / "crashes"
    crashes.mkdir(exist_ok=True)
    cmd = [sys.executable, __file__, "--child", target, "--workdir", str(workdir), "--",
           str(corpus), f"-max_total_time={seconds}", f"-timeout={timeout}", f"-rss_limit_mb={rss_mb}",
           "-print_final_stats=1", f"-artifact_prefix={crashes}/{target}-", "-max_len=65536"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    text = out.stdout + out.stderr
    runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", text)
    found = sorted(p.name for p in crashes.glob(f"{target}-*"))
    return {"target": target, "runs": int(runs[-1]) if runs else None, "exit": out.returncode,
            "crashes": found, "tail": text.strip().splitlines()[-12:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", action="append", help="a reader (default: every one)")
    parser.add_argument("--seconds", type=int, default=60, help="budget per reader")
    parser.add_argument("--timeout", type=int, default=20, help="seconds one input may take")
    parser.add_argument("--rss-mb", type=int, default=2048, help="memory one run may reach")
    parser.add_argument("--workdir", type=Path, default=None, help="corpus and crashes (default: a temp folder)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="veotrace-fuzz-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.child:
        _fuzz_one(args.child, workdir, [sys.argv[0], *[a for a in rest if a != "--"]])
        return 0
    from fuzz.targets import TARGETS

    results = [_run_budget(t, args.seconds, workdir, args.timeout, args.rss_mb) for t in (args.target or TARGETS)]
    print(f"{'reader':<14} {'inputs run':>11}  crashes   (budget {args.seconds} s each; work dir {workdir})")
    for r in results:
        print(f"{r['target']:<14} {r['runs'] if r['runs'] is not None else '?':>11}  {len(r['crashes'])}  "
              + " ".join(r["crashes"][:3]))
    for r in results:
        if r["crashes"] or r["runs"] is None:
            print(f"\n--- {r['target']} (exit {r['exit']}):\n" + "\n".join(r["tail"]))
    return 1 if any(r["crashes"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
