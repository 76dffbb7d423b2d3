"""The console entry point registers only the command it runs (start-up), and still knows every name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

LOG = Path(__file__).parents[1] / "sample_traces" / "alloc_logs" / "alloc.log.1.csv"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "veotrace", *args], capture_output=True, text=True, timeout=120)


def test_a_named_command_runs_with_only_itself_registered():
    code = ("import sys; import veotrace.cli as c; c._register_invoked_only(['entropy']); "
            "print([x.callback.__name__ for x in c.app.registered_commands])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "['entropy_command']"
    res = _run("entropy", str(LOG), "--format", "json", "--no-progress", "--window-events", "100")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["windows"]


def test_help_and_unknown_names_still_see_every_command():
    res = _run("--help")
    assert res.returncode == 0 and "entropy" in res.stdout and "fragmentation" in res.stdout
    res = _run("entropyy")
    assert res.returncode == 2 and "No such command 'entropyy'" in res.stderr


def test_the_console_script_imports_only_the_named_command_module():
    """``veotrace entropy`` imports no other command's module; ``--version`` none; the app used as a library every one."""
    code = ("import sys; sys.argv = ['veotrace', *sys.argv[1:]]; import veotrace.cli as c\n"
            "try:\n    c.main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('veotrace.cli.') and m.split('.')[2] not in "
            "('app', 'common', 'follow_opts', 'series_opts', 'engine_opts', 'replay_opts')), file=sys.stderr)")
    for args, want in ((["entropy", str(LOG), "-f", "json", "--window-events", "100"], ["veotrace.cli.entropy"]),
                       (["--version"], [])):
        res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
        assert res.stderr.strip().splitlines()[-1] == repr(want), res.stderr
    res = subprocess.run([sys.executable, "-c", "from veotrace.cli import app; print(len(app.registered_commands))"],
                         capture_output=True, text=True, timeout=120)
    from veotrace import registry

    assert int(res.stdout) == len(registry.commands()) + len(registry.SERVICES)


def test_help_lists_every_command_in_registry_order_with_its_help_text():
    """The top-level help is built from names and help texts alone, and says what it said with every command built."""
    from veotrace import registry

    built = "import sys; from veotrace.cli import app; sys.argv = ['veotrace', '--help']; app(prog_name='veotrace')"
    full = subprocess.run([sys.executable, "-c", built], capture_output=True, text=True, timeout=120).stdout
    fast = _run("--help").stdout
    assert fast.split("Commands:")[1] == full.split("Commands:")[1]
    listed = [line.split()[0] for line in fast.split("Commands:")[1].strip().splitlines()]
    assert listed == [e.command for e in registry.commands()] + list(registry.SERVICES)
