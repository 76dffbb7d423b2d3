"""Every command has help text; --help starts without heavy imports."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import run_cli


def test_every_command_has_help():
    from veotrace.cli import app

    for cmd in app.registered_commands:
        assert cmd.callback.__doc__, cmd.name
        r = run_cli(cmd.name or cmd.callback.__name__, "--help")
        assert r.exit_code == 0 and "Usage" in r.stdout


def test_help_does_not_import_pyarrow_numpy_or_scipy():
    code = ("import sys; from veotrace.cli import app; "
            "bad=[m for m in ('pyarrow','numpy','scipy','pandas') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_entropy_run_imports_neither_pandas_nor_scipy_stats(tmp_path):
    # pyarrow would import pandas (0.3 s) and the trend once used scipy.stats (1.4 s): the CLI needs neither.
    from tests.conftest import SAMPLES

    code = ("import sys, atexit; "
            "atexit.register(lambda: print([m for m in ('pandas', 'scipy.stats') if m in sys.modules])); "
            "from veotrace.cli import main; "
            f"sys.argv = ['veotrace', 'entropy', {str(SAMPLES / 'alloc_logs')!r}, '-f', 'json', '-o', {str(tmp_path / 'o.json')!r}]; "
            "main()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "o.json").stat().st_size > 0


def test_formats_lists_every_input_kind():
    from veotrace.sources.detect import FORMATS

    r = run_cli("formats")
    assert r.exit_code == 0 and r.stderr == ""
    names = [ln.split()[0] for ln in r.stdout.splitlines() if ln.startswith("  ")]
    assert names == [f.name for f in FORMATS] + ["frames", "arrays"]
    frames = next(ln for ln in r.stdout.splitlines() if ln.startswith("  frames"))
    assert "coherence" in frames and "JSON" in frames and "Parquet" in frames


def test_help_texts_describe_each_commands_own_inputs():
    wanted = {"l2-breakpoints": ("ncu --csv", ".ncu-rep", "--launch-count"),
              "info": ("per-frame metric tables", "commands that will run"),
              "correlate": ("ADDRS", "EPE", ".npy/.npz/CSV/Parquet"),
              "coherence": ("id_match_rate", "exits 3", "Per-frame metrics table"),
              "formats": ("every input kind",)}
    for command, needles in wanted.items():
        r = run_cli(command, "--help")
        text = " ".join(r.stdout.split())  # rich wraps lines
        for needle in needles:
            assert needle in text, (command, needle)


def test_every_duration_option_says_the_unit_of_a_bare_number():
    """Issue 24: a bare number means seconds for --window, milliseconds for --gap, hours for --segments."""
    import typer.main

    from veotrace.cli import app

    durations = {"--window", "--step", "--gap", "--segments", "--at", "--tiers"}
    group = typer.main.get_command(app)
    seen = 0
    for name, command in group.commands.items():
        for param in command.params:
            if getattr(param, "param_type_name", "") == "option" and durations & set(param.opts):
                seen += 1
                assert "a bare number is" in (param.help or ""), f"{name} {param.opts[0]}: {param.help}"
    assert seen >= 9
