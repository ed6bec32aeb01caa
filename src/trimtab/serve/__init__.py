"""The serve room: the live scheduler on this machine's GPUs (daemon, store, executors, API, dashboard).

Public entry points are `ServeConfig`, `Daemon` and `run_server`; imported lazily so that the store or an executor
can be used without loading the web stack."""

from __future__ import annotations

from typing import Any

__all__ = ["Daemon", "ServeConfig", "run_server"]


def __getattr__(name: str) -> Any:
    if name in ("Daemon", "ServeConfig"):
        from trimtab.serve import daemon

        return getattr(daemon, name)
    if name == "run_server":
        from trimtab.serve.http.server import run_server

        return run_server
    raise AttributeError(name)
