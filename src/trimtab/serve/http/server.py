"""Putting `trimtab serve` together: data dir (the server's alone), store (migrated), admin token, GPU inventory,
tenants' identities, local executor, daemon (recovered from the store), and the API served by uvicorn until SIGINT /
SIGTERM.

The data dir's modes are enforced at every start, whatever they were: the dir 0700 (0711 when tenants have their
own Unix users, who pass through it to `tenants/<tenant>/`), every other entry in it 0700 (folders) or 0600 (files:
the admin token, the SQLite database and its WAL and shared-memory files), the `tenants/` folder 0711 likewise.

A SIGKILL at any moment is safe: the next start recovers from the store and re-adopts the running tasks."""

from __future__ import annotations

import logging
import os
import secrets
import stat
import time
from collections.abc import Callable
from pathlib import Path

from trimtab.profile import Profile
from trimtab.serve.daemon import Daemon, ServeConfig
from trimtab.serve.executors.base import Executor
from trimtab.serve.executors.local import LocalExecutor
from trimtab.serve.run.gpus import discover
from trimtab.serve.run.identity import TENANTS_DIR, Identities
from trimtab.serve.store import Store

ADMIN_TOKEN_FILE = "admin.token"
SCRAPE_TOKEN_FILE = "metrics.token"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def prepare(config: ServeConfig, say: Callable[[str], None] = print,
            executor: Executor | None = None) -> Daemon:
    """Everything but the HTTP server: returns a recovered daemon whose loop is not started yet."""
    data_dir = config.data_dir.expanduser().absolute()
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    identities = _identities(config, data_dir)
    secure_data_dir(data_dir, identities.isolated)
    profile = Profile.load(config.policy)
    if executor is None and config.backend == "ray":
        from trimtab.serve.executors.ray import RayExecutor

        executor = RayExecutor(config.ray_address or "auto", node_ip=config.ray_node_ip)
    found = executor.inventory if executor is not None else None
    inventory = found or discover(config.gpus, config.cluster)
    store = Store(config.store_url)
    store.upgrade()
    if store.is_sqlite and store.engine.url.database:
        _private_files(Path(store.engine.url.database))
    token = store.ensure_admin_token(time.time())
    token_file = data_dir / ADMIN_TOKEN_FILE
    if token is not None:
        _write_secret(token_file, token)
        say(f"admin token (shown once, kept in {token_file}): {token}")
    elif not token_file.exists():
        say(f"note: the database has an admin token but {token_file} is missing")
    daemon = Daemon(store, inventory, executor or LocalExecutor(), profile, data_dir, grace_s=config.grace_s,
                    tick_s=config.tick_s, sample_every_s=config.sample_every_s, tenant_limits=config.tenant_limits,
                    identities=identities)
    counts = daemon.recover()
    say(f"GPUs: {inventory.describe()}")
    say(("identity: " if identities.isolated else "note: ") + str(identities.describe()["detail"]))
    say(f"store: {_safe_url(config.store_url)}; policy: {profile.name}; data: {data_dir}")
    if counts:
        say("recovered: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return daemon


class ServerLost(RuntimeError):
    """The daemon stopped for good while serving (see `Daemon.fatal`); the message says why."""


def run_server(config: ServeConfig, say: Callable[[str], None] = print) -> None:
    """Serve until interrupted. Raises ServerLost if the daemon stops for good (its executor lost its tasks)."""
    import uvicorn

    from trimtab.serve.http.api import create_app
    from trimtab.serve.http.guards import BoundedH11

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


def _identities(config: ServeConfig, data_dir: Path) -> Identities:
    """One Unix user per tenant when the server runs as root with the local executor, unless told to share its
    identity. ValueError when a tenant's task could not reach its folder (a data dir under /root, say)."""
    if config.backend == "ray":
        return Identities(data_dir, shared_as="the Ray workers' user (whoever started each raylet)")
    isolated = os.geteuid() == 0 and not config.shared_identity
    identities = Identities(data_dir, isolated=isolated, users=config.tenant_users)
    if isolated:
        for folder in data_dir.parents:
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                raise ValueError(f"--data-dir {data_dir}: tenants' tasks run as their own users and could not reach "
                                 f"their folders in it, because {folder} is not searchable by other users; choose a "
                                 "data dir such as /var/lib/trimtab, or give --shared-identity")
    return identities


def secure_data_dir(data_dir: Path, isolated: bool) -> None:
    """Give the data dir and what it holds the modes of the module docstring, whatever they were. Links are left
    alone (they are not followed); what lies deeper is unreachable through these folders."""
    passable = 0o711 if isolated else 0o700
    os.chmod(data_dir, passable)
    for name in ("logs", "runs", TENANTS_DIR):
        (data_dir / name).mkdir(mode=0o700, exist_ok=True)
    for entry in os.scandir(data_dir):
        if entry.is_symlink():
            continue
        if entry.name == TENANTS_DIR:
            os.chmod(entry.path, passable)
        else:
            os.chmod(entry.path, 0o700 if entry.is_dir() else 0o600)


def _private_files(database: Path) -> None:
    """The SQLite database and its companions 0600 (SQLite gives a new WAL file the database's mode)."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        path = database.with_name(database.name + suffix)
        if path.exists() and not path.is_symlink():
            os.chmod(path, 0o600)


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
