"""Command-line commands of the serve room, registered on the main `trimtab` app by cli.py.

Kept apart from cli.py so that each room's commands live next to nothing else."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this room's commands to `app`."""
    return None
