"""Informers: a local copy of one kind of the cluster, kept by list + watch with resourceVersions.

Owns Informer (one thread per kind). It lists, then watches from the list's resourceVersion; a watch the server
ends is resumed from the last version seen; 410 Gone (the version is too old) lists again; any other failure is
retried after a bounded, doubling backoff. A kind the cluster does not serve (a CRD not installed) is looked for
again every `absent_retry_s` and reads as empty meanwhile."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from trimtab.kube.api import Kind, KubeApi, status_code

log = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 300  # the server ends each watch after this; it is resumed from the last resourceVersion


def object_key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace') or ''}/{meta['name']}"


class Informer:
    """The objects of one kind by `namespace/name` (cluster-scoped: `/name`). `items()` is a consistent copy;
    `synced` is set once the first list has arrived (or the kind proved absent). `on_change()` is called after
    every change, from the informer's thread: it must be quick (the scheduler only raises a flag)."""

    def __init__(self, api: KubeApi, kind: Kind, on_change: Callable[[], None], *, backoff_max_s: float = 10.0,
                 absent_retry_s: float = 30.0) -> None:
        self.api = api
        self.kind = kind
        self.on_change = on_change
        self.backoff_max_s = backoff_max_s
        self.absent_retry_s = absent_retry_s
        self.synced = threading.Event()
        self.lists = 0  # full lists made: the first, then one per 410 Gone (tests read it)
        self._objects: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._version: str | None = None  # the last resourceVersion seen; None: list first
        self._thread = threading.Thread(target=self._run, name=f"informer-{kind.name}", daemon=True)

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the current watch event (the thread is a daemon: an open watch does not hold the exit)."""
        self._stop.set()

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._objects.values())

    def get(self, key: str) -> dict[str, Any] | None:
        """The object of `key` (`object_key`), or None."""
        with self._lock:
            return self._objects.get(key)

    def _run(self) -> None:
        backoff_s = 0.0
        while not self._stop.is_set():
            try:
                if self._version is None:
                    self._version = self._relist()
                self._watch()
                backoff_s = 0.0
            except Exception as exc:  # also the server unreachable, a connection cut: resume from the last version
                code = status_code(exc)
                if code == 410:
                    self._version = None  # too old: list again, now
                elif code == 404:
                    self._version = None
                    self._absent()
                else:
                    backoff_s = self._back_off(backoff_s, exc)

    def load(self, items: list[dict[str, Any]]) -> None:
        """Replace every object with `items` (what a list returned) and tell the scheduler."""
        with self._lock:
            self._objects = {object_key(obj): obj for obj in items}
        self.synced.set()
        self.on_change()

    def _relist(self) -> str:
        items, version = self.api.list(self.kind)
        self.lists += 1
        self.load(items)
        return version

    def _watch(self) -> None:
        """Apply watch events from the last resourceVersion seen until the server ends the watch."""
        assert self._version is not None
        for event, obj in self.api.watch(self.kind, self._version, WATCH_TIMEOUT_S):
            if self._stop.is_set():
                return
            key = object_key(obj)
            with self._lock:
                if event == "DELETED":
                    self._objects.pop(key, None)
                elif event in ("ADDED", "MODIFIED"):
                    self._objects[key] = obj
            self._version = obj["metadata"].get("resourceVersion") or self._version
            self.on_change()

    def _absent(self) -> None:
        self.load([])
        self._stop.wait(self.absent_retry_s)

    def _back_off(self, backoff_s: float, exc: Exception) -> float:
        backoff_s = min(self.backoff_max_s, max(0.2, backoff_s * 2))
        log.warning("watch of %s failed (%s); retrying in %.1f s", self.kind.name, exc, backoff_s)
        self._stop.wait(backoff_s)
        return backoff_s
