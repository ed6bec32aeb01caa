"""`python -m trimtab.serve ...`: the serve room's commands without the rest of the CLI (no report or plotting
imports), for service units and anything that starts the server often. `python -m trimtab.serve serve --gpus 4`
is `trimtab serve --gpus 4`."""

from __future__ import annotations

import typer

from trimtab import cli_serve

app = typer.Typer(add_completion=False, no_args_is_help=True, help="trimtab serve and its client commands.")
cli_serve.register(app)

if __name__ == "__main__":
    app()
