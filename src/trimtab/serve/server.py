"""Putting `trimtab serve` together: data dir, store (migrated), admin token, GPU inventory, local executor, daemon
(recovered from the store), and the API served by uvicorn until SIGINT / SIGTERM.

A SIGKILL at any moment is safe: the next start recovers from the store and re-adopts the running tasks."""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from trimtab.profile import Profile
from trimtab.serve.daemon import Daemon, ServeConfig
from trimtab.serve.executors.base import Executor
from trimtab.serve.executors.local import LocalExecutor
from trimtab.serve.gpus import discover
from trimtab.serve.store import Store

ADMIN_TOKEN_FILE = "admin.token"
SCRAPE_TOKEN_FILE = "metrics.token"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def prepare(config: ServeConfig, say: Callable[[str], None] = print,
            executor: Executor | None = None) -> Daemon:
    """Everything but the HTTP server: returns a recovered daemon whose loop is not started yet."""
    data_dir = config.data_dir.expanduser()
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    profile = Profile.load(config.policy)
    if executor is None and config.backend == "ray":
        from trimtab.serve.executors.ray import RayExecutor

        executor = RayExecutor(config.ray_address or "auto", node_ip=config.ray_node_ip)
    found = executor.inventory if executor is not None else None
    inventory = found or discover(config.gpus, config.cluster)
    store = Store(config.store_url)
    store.upgrade()
    token = store.ensure_admin_token(time.time())
    token_file = data_dir / ADMIN_TOKEN_FILE
    if token is not None:
        _write_secret(token_file, token)
        say(f"admin token (shown once, kept in {token_file}): {token}")
    elif not token_file.exists():
        say(f"note: the database has an admin token but {token_file} is missing")
    daemon = Daemon(store, inventory, executor or LocalExecutor(), profile, data_dir, grace_s=config.grace_s,
                    tick_s=config.tick_s, sample_every_s=config.sample_every_s, tenant_limits=config.tenant_limits)
    counts = daemon.recover()
    say(f"GPUs: {inventory.describe()}")
    say(f"store: {_safe_url(config.store_url)}; policy: {profile.name}; data: {data_dir}")
    if counts:
        say("recovered: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return daemon


class ServerLost(RuntimeError):
    """The daemon stopped for good while serving (see `Daemon.fatal`); the message says why."""


def run_server(config: ServeConfig, say: Callable[[str], None] = print) -> None:
    """Serve until interrupted. Raises ServerLost if the daemon stops for good (its executor lost its tasks)."""
    import uvicorn

    from trimtab.serve.api import create_app
    from trimtab.serve.guards import BoundedH11

    if config.metrics_public and config.host not in LOOPBACK:
        raise ValueError(f"--metrics-public opens /metrics (tenant names and usage) to anyone who can connect: "
                         f"it needs a loopback --host, not {config.host}; a remote scraper uses the scrape token")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    daemon = prepare(config, say)
    app = create_app(daemon, config, _scrape_token(config.data_dir.expanduser() / SCRAPE_TOKEN_FILE))
    daemon.start()
    if config.host not in LOOPBACK:
        say(f"note: listening on {config.host}: the API is reachable from the network and speaks plain HTTP; put "
            "a TLS proxy in front of it so tokens do not travel in clear text")
    say(f"serving on http://{config.host}:{config.port}/ (API docs at /docs)")
    protocol = BoundedH11.configured(config.header_timeout_s, config.max_header_bytes)
    server = uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port, log_level="warning",
                                           access_log=False, http=protocol, h11_max_incomplete_event_size=
                                           config.max_header_bytes, timeout_keep_alive=config.keepalive_timeout_s))

    def lost() -> None:
        server.should_exit = True

    daemon.on_fatal = lost
    try:
        server.run()
    finally:
        daemon.shutdown()
        daemon.store.close()
    if daemon.fatal:
        raise ServerLost(daemon.fatal)


def _scrape_token(path: Path) -> str:
    """The token that reads /metrics and nothing else: kept in `path` (0600), made at the first start."""
    if path.exists():
        return path.read_text().strip()
    token = secrets.token_urlsafe(32)
    _write_secret(path, token)
    return token


def _write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    os.chmod(path, 0o600)


def _safe_url(url: str) -> str:
    """The store URL without its password."""
    head, sep, tail = url.partition("://")
    if "@" in tail:
        creds, _, host = tail.rpartition("@")
        user = creds.split(":")[0]
        return f"{head}{sep}{user}:***@{host}"
    return url
