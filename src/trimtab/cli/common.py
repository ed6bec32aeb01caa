"""What every group of `trimtab` commands shares: the Rich consoles, the error exit and JSON output.

Light on purpose: importing it (and so any command module) loads no numpy, plotting, scheduler or server code."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

# wide enough for the tables when the output is a file or a pipe, where Rich would otherwise assume 80 columns
console = Console(width=None if sys.stdout.isatty() else 200)
errors = Console(stderr=True)


def fail(message: str, code: int = 2, to: Console = console) -> NoReturn:
    """Print `error: message` on `to` (stdout unless the caller says otherwise) and exit with `code`: 2 for bad
    input, 1 for a refusal of the server, 3 for a server that lost its backend. The message is printed as text,
    never as Rich markup, so brackets in a path or a value come through; and never wrapped by Rich, so that a long
    path or URL in it stays whole for copying (the terminal wraps it)."""
    to.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def json_text(data: Any, readable: bool) -> str:
    """`data` as one JSON document and a newline: indented when a person reads it, else compact (and strict: no
    NaN) for run files, where the compact form is also several times faster to encode."""
    if readable:
        return json.dumps(data, indent=1) + "\n"
    return json.dumps(data, separators=(",", ":"), allow_nan=False) + "\n"


def write_json(data: Any, path: Path, readable: bool = False) -> None:
    """Write `data` to `path` (its folder made if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json_text(data, readable))


def print_json(data: Any) -> None:
    """`data` on stdout as indented JSON (the `--json` output of the client commands)."""
    sys.stdout.write(json_text(data, readable=True))
