"""Leader election on a coordination.k8s.io Lease, so that of several `trimtab kube` replicas only one binds.

Owns LeaderElector. The leader renews the Lease every `renew_s`; a candidate takes it over once the record it sees
(holder and renewTime) has not changed for `lease_s` by its own clock, so clocks need not agree. Writes carry the
resourceVersion read, so two candidates cannot both win: the loser gets 409 and tries again later. A leader whose
renewals fail retries every `retry_s`, and stops leading once it has not renewed for `renew_deadline_s` (shorter
than `lease_s`, as client-go's RenewDeadline) counted from the start of its last successful attempt, even while an
attempt hangs on a silent server: it has stopped before any other replica can see the lease expire."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from typing import Any

from trimtab.kube.api import KubeApi

log = logging.getLogger(__name__)


def _micro_time() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """`leading` is set while this replica holds the Lease `namespace/name`. Call `start()`; `stop()` ends the
    attempts (the Lease is left to expire)."""

    def __init__(self, api: KubeApi, identity: str, *, namespace: str = "kube-system", name: str = "trimtab",
                 lease_s: float = 15.0, renew_deadline_s: float = 10.0, renew_s: float = 5.0,
                 retry_s: float = 2.0) -> None:
        if not renew_s < renew_deadline_s < lease_s:
            raise ValueError(f"leader election needs renew_s < renew_deadline_s < lease_s, got {renew_s}, "
                             f"{renew_deadline_s}, {lease_s}")
        self.api = api
        self.identity = identity
        self.namespace, self.name = namespace, name
        self.lease_s, self.renew_deadline_s, self.renew_s, self.retry_s = lease_s, renew_deadline_s, renew_s, retry_s
        self.leading = threading.Event()
        self._stop = threading.Event()
        self._seen: tuple[Any, ...] | None = None  # the other holder's record as last read
        self._seen_at = 0.0  # monotonic time it was first read so
        self._renewed_at = 0.0  # monotonic start of this replica's last successful attempt
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._watchdog = threading.Thread(target=self._watch_deadline, name="leader-deadline", daemon=True)

    def holds(self) -> bool:
        """Whether this replica may write now: it leads, and its last successful attempt started less than
        `renew_deadline_s` ago by the monotonic clock. Asked before each write (KubeApi.fence), it answers False
        at once after a pause (SIGSTOP, a stalled VM) past the deadline, before any thread has run to notice."""
        return self.leading.is_set() and time.monotonic() - self._renewed_at < self.renew_deadline_s

    def start(self) -> LeaderElector:
        self._thread.start()
        self._watchdog.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.leading.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                won = self.try_acquire_or_renew()
            except Exception as exc:  # unreachable server, a lost race (409): try again
                log.info("lease %s/%s: %s", self.namespace, self.name, exc)
                won = False
            if won and time.monotonic() - started < self.renew_deadline_s:
                self._renewed_at = started  # the server's renewTime is no earlier than this
                if not self.leading.is_set():
                    log.warning("leading as %s", self.identity)
                self.leading.set()
            self._stop.wait(self.renew_s if won else self.retry_s)

    def _watch_deadline(self) -> None:
        """Clear `leading` once the last successful attempt started `renew_deadline_s` ago, whatever the
        election thread is doing (an attempt may hang on a silent server for longer than that)."""
        while not self._stop.wait(min(0.25, self.retry_s)):
            if self.leading.is_set() and time.monotonic() - self._renewed_at >= self.renew_deadline_s:
                log.warning("lost the lease %s/%s: not renewed for %.0f s", self.namespace, self.name,
                            self.renew_deadline_s)
                self.leading.clear()

    def try_acquire_or_renew(self) -> bool:
        """One attempt: True when this replica holds the Lease afterwards."""
        lease = self.api.get_lease(self.namespace, self.name)
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_s),
                "renewTime": _micro_time()}
        if lease is None:
            self.api.write_lease(self.namespace, self.name, {**spec, "acquireTime": spec["renewTime"],
                                                             "leaseTransitions": 0}, None)
            return True
        current = lease.get("spec") or {}
        version = lease["metadata"]["resourceVersion"]
        holder = current.get("holderIdentity")
        if holder == self.identity:
            self.api.write_lease(self.namespace, self.name, {**current, **spec}, version)
            return True
        record = (holder, current.get("renewTime"), current.get("leaseDurationSeconds"))
        now = time.monotonic()
        if record != self._seen:
            self._seen, self._seen_at = record, now
        duration_s = float(current.get("leaseDurationSeconds") or self.lease_s)
        if holder and now - self._seen_at < duration_s:
            return False
        transitions = int(current.get("leaseTransitions") or 0) + 1
        self.api.write_lease(self.namespace, self.name, {**spec, "acquireTime": spec["renewTime"],
                                                         "leaseTransitions": transitions}, version)
        return True
