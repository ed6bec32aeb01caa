"""The command line starts light: importing it, or asking a client command for its help, loads neither numpy, the
plotting stack, the scheduler, the simulator nor the server; the package's public names still resolve on use."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import trimtab

HEAVY = ("matplotlib", "numpy", "fastapi", "sqlalchemy", "uvicorn", "trimtab.scheduler", "trimtab.sim",
         "trimtab.profile", "trimtab.cluster", "trimtab.serve.daemon", "trimtab.report")


def _loaded_after(code: str) -> list[str]:
    """The HEAVY modules loaded once `code` ran in a fresh interpreter."""
    probe = f"import json, sys\n{code}\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_command_line_loads_nothing_heavy() -> None:
    assert _loaded_after("import trimtab.cli") == []


@pytest.mark.parametrize("args", [["--help"], ["jobs", "--help"], ["submit", "--help"], ["serve", "--help"],
                                  ["simulate", "--help"], ["bench", "packing", "--help"]])
def test_help_of_a_command_loads_nothing_heavy(args: list[str]) -> None:
    run = ("from typer.testing import CliRunner\nfrom trimtab.cli import app\n"
           f"result = CliRunner().invoke(app, {args!r})\nassert result.exit_code == 0, result.output")
    assert _loaded_after(run) == []


def test_a_client_command_loads_only_the_http_client() -> None:
    """`trimtab jobs` against a server that is not there: a clear error, and still no server or scheduler code."""
    run = ("from typer.testing import CliRunner\nfrom trimtab.cli import app\n"
           "result = CliRunner().invoke(app, ['jobs', '--server', 'http://127.0.0.1:9'])\n"
           "assert result.exit_code == 1 and 'cannot reach' in result.output, result.output")
    assert _loaded_after(run) == []


def test_public_names_resolve_on_first_use() -> None:
    from trimtab import Profile, Scheduler, simulate
    from trimtab.profile import Profile as ProfileHome
    from trimtab.scheduler import Scheduler as SchedulerHome
    from trimtab.sim.run import simulate as simulate_home

    assert (Profile, Scheduler, simulate) == (ProfileHome, SchedulerHome, simulate_home)
    assert trimtab.simulate is simulate_home
    for name in trimtab.__all__:
        assert getattr(trimtab, name) is not None, name
    assert set(trimtab.__all__) <= set(dir(trimtab))
    with pytest.raises(AttributeError):
        trimtab.no_such_name  # noqa: B018
