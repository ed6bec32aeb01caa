"""The `trimtab` command line (Typer + Rich): the app that gathers every group of commands.

Each group lives in its own module and imports what it runs inside its commands, so that `trimtab --help` or a
client command loads neither numpy, the plotting stack, the scheduler, the simulator nor the server."""

from __future__ import annotations

import os
import shutil

import typer
from typer import rich_utils

from trimtab.cli import advise, bench, config, daemon, kube, serve, sim

HELP_MIN_WIDTH = 120
"""Help is laid out at least this wide: Typer takes the terminal's width, 80 columns when output goes to a pipe or a
file, and cuts option texts and examples longer than their column there ("..."). A wider terminal gets its width;
TERMINAL_WIDTH, Typer's own setting, still wins."""

if not os.environ.get("TERMINAL_WIDTH"):
    rich_utils.MAX_WIDTH = max(shutil.get_terminal_size().columns, HELP_MIN_WIDTH)

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="trimtab: a GPU-cluster scheduler that keeps throughput steady, and its simulator.")
app.add_typer(sim.commands)
app.add_typer(advise.commands)
app.add_typer(daemon.commands)
app.add_typer(serve.commands)
app.add_typer(config.commands)
app.add_typer(bench.commands, name="bench")
app.add_typer(kube.commands)
