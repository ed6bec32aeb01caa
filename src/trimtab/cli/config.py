"""Where the client commands find their server: `trimtab login SERVER [--token T]` and `trimtab config set | unset
| show`, which write and read the user's config file (serve/http/client.py owns where it is and what it holds).

Light like every client command: only the HTTP client is loaded, inside the commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trimtab.cli.common import console, errors, fail, print_json

commands = typer.Typer()
config_app = typer.Typer(no_args_is_help=True, help="The client's settings: the server and token that `trimtab "
                                                    "submit`, `jobs` and the other client commands use.")
commands.add_typer(config_app, name="config")

KeyArg = Annotated[str, typer.Argument(help="server (a URL, or HOST:PORT) or token.")]


@commands.command("login")
def login_cmd(server: Annotated[str, typer.Argument(help="The server's URL, e.g. http://10.0.0.5:8470, or HOST:PORT.")],
              token: Annotated[str | None, typer.Option(help="Your bearer token (from `trimtab token create`, or the "
                                                             "server's DATA_DIR/admin.token).")] = None,
              check: Annotated[bool, typer.Option("--check/--no-check",
                                                  help="Ask the server first (and try the token).")] = True) -> None:
    """Save the server (and a token) in your config file, for the client commands to use.

    Example: trimtab login http://gpu-box:8470 --token tt_...  The server is asked first, and the token tried, so
    nothing is saved that does not work (--no-check saves without asking). A token saved for another server is
    dropped unless --token gives one."""
    from trimtab.serve.errors import ServeError
    from trimtab.serve.http.client import Client, Target, config_file, read_config, server_url, write_config

    path = config_file()
    try:
        url = server_url(server)
        saved = read_config(path)
    except ValueError as exc:
        fail(str(exc), 2, errors)
    if check:
        client = Client(Target(url, token, "the command line", "--token" if token else "", path), timeout_s=10.0)
        try:
            health = client.health()
            if token:
                client.jobs(limit=1)
        except ServeError as exc:
            fail(f"{exc.detail} (HTTP {exc.status}); nothing saved" if exc.status else f"{exc.detail}; nothing saved",
                 1, errors)
        finally:
            client.close()
        console.print(f"{url} answers: policy {health.get('policy')}, executor {health.get('executor')}",
                      highlight=False)
    keep_token = token or (saved.get("token") if saved.get("server") == url else None)
    write_config(path, {"server": url, "token": keep_token})
    console.print(f"saved in {path}: server {url}" + (", token" if keep_token else ", no token")
                  + (" (a token saved for another server was dropped)" if saved.get("token") and not keep_token
                     else ""), highlight=False)


@config_app.command("set")
def set_cmd(key: KeyArg, value: Annotated[str, typer.Argument(help="The value.")]) -> None:
    """Save a setting in your config file.

    Examples: trimtab config set server http://gpu-box:8470   trimtab config set token tt_..."""
    console.print(f"{key} saved in {_save(key, value)}", highlight=False)


@config_app.command("unset")
def unset_cmd(key: KeyArg) -> None:
    """Remove a setting from your config file (the client then falls back to the environment or the default)."""
    console.print(f"{key} removed from {_save(key, None)}", highlight=False)


def _save(key: str, value: str | None) -> Path:
    """Write `key` (None: remove it) into the user's config file, a server as a URL; returns the file's path."""
    from trimtab.serve.http.client import CONFIG_KEYS, config_file, server_url, write_config

    if key not in CONFIG_KEYS:
        fail(f"unknown setting {key!r}; settings: {', '.join(CONFIG_KEYS)}", 2, errors)
    path = config_file()
    try:
        write_config(path, {key: server_url(value) if key == "server" and value is not None else value})
    except ValueError as exc:
        fail(str(exc), 2, errors)
    return path


@config_app.command("show")
def show_cmd(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """The server and token the client commands would use now, and where each comes from (the token shown by its
    last four characters only)."""
    from trimtab.serve.http.client import resolve

    try:
        target = resolve(None, None)
    except ValueError as exc:
        fail(str(exc), 2, errors)
    shown = f"...{target.token[-4:]}" if target.token else None
    if as_json:
        print_json({"server": target.server, "server_from": target.server_from, "token": shown,
                    "token_from": target.token_from or None, "config_file": str(target.config)})
        return
    console.print(f"server {target.server} (from {target.server_from})", highlight=False)
    console.print(f"token {shown} (from {target.token_from})" if shown else "no token", highlight=False)
    console.print(f"config file {target.config}" + ("" if target.config and target.config.exists()
                                                    else " (none yet)"), highlight=False)
