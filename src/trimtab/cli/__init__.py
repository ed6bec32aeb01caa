"""The `trimtab` command line (Typer + Rich): the app that gathers every group of commands.

Each group lives in its own module and imports what it runs inside its commands, so that `trimtab --help` or a
client command loads neither numpy, the plotting stack, the scheduler, the simulator nor the server."""

from __future__ import annotations

import typer

from trimtab.cli import bench, kube, serve, sim

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="trimtab: a GPU-cluster scheduler that keeps throughput steady, and its simulator.")
app.add_typer(sim.commands)
app.add_typer(serve.commands)
app.add_typer(bench.commands, name="bench")
app.add_typer(kube.commands)
