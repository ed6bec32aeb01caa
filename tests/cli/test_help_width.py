"""Help is never cut: `trimtab --help` and the help of every command fit 120 columns with no text cut short ("…"),
whether the terminal says 80 columns or 120, and a wider terminal gets its width."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

# every command's help, as `trimtab ... --help` prints it, by command path
ALL_HELP = """
import json
import typer
from typer.testing import CliRunner
from trimtab.cli import app

def paths(command, prefix):
    yield prefix
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from paths(sub, [*prefix, name])

runner = CliRunner()
commands = paths(typer.main.get_command(app), [])
print(json.dumps({" ".join(p): runner.invoke(app, [*p, "--help"]).output for p in commands}))
"""


def all_help(columns: int) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": str(columns)}
    env.pop("TERMINAL_WIDTH", None)
    done = subprocess.run([sys.executable, "-c", ALL_HELP], capture_output=True, text=True, env=env, timeout=120,
                          check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize("columns", [80, 120])
def test_every_help_fits_120_columns_and_cuts_nothing(columns: int) -> None:
    helps = all_help(columns)
    assert {"", "simulate", "tune", "login", "config set", "bench packing", "token create"} <= set(helps)
    for command, text in helps.items():
        assert "Usage:" in text, command
        assert "…" not in text, f"trimtab {command} --help cuts text:\n{text}"
        assert max(len(line) for line in text.splitlines()) <= 120, f"trimtab {command} --help is over 120 wide"
    # an example of an option's help that 80 columns used to cut, and one of a command's docstring
    assert "([tiresias:|philly:|gavel:|csv:]PATH)" in helps["simulate"]
    assert "trimtab login http://gpu-box:8470 --token" in " ".join(helps["login"].split())


def test_a_wider_terminal_gets_its_width() -> None:
    assert max(len(line) for line in all_help(160)[""].splitlines()) == 160
