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
