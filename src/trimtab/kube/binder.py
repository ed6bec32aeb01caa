"""Binding one gang on a live cluster: its ResourceClaims first, then its members all at once (each on a thread of
its own, as kube-scheduler binds each pod in a goroutine, so a gang is partly bound only for the time of one
binding write), all or none.

Owns GangBinder. A member whose binding fails (refused, or unanswered: it may have landed) rolls the gang back:
the members bound are evicted (their controller makes them again, and the gang is tried whole), and the claims
written for it are rolled back (kube/claims.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lightkube import ApiError

from trimtab.kube.api import KubeApi, Unanswered
from trimtab.kube.claims import ClaimKeeper, ClaimWrite
from trimtab.model import Job

log = logging.getLogger(__name__)
Obj = dict[str, Any]
MEMBER_BINDERS = 32  # members bound at once, across the gangs being bound


def _key(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


class GangBinder:
    """`bind(pods, job, nodes, writes)` on a writer thread: True when every member is bound. `unanswered` gets
    the pods whose failed binding could not be read back; `record(pod, reason, message, warning)` queues Events."""

    def __init__(self, api: KubeApi, claims: ClaimKeeper, record: Callable[[Obj, str, str, bool], None],
                 unanswered: set[str]) -> None:
        self.api, self.claims, self.record, self.unanswered = api, claims, record, unanswered
        self._members = ThreadPoolExecutor(MEMBER_BINDERS, thread_name_prefix="trimtab-kube-bind")

    def bind(self, pods: list[Obj], job: Job, nodes: list[str], writes: list[ClaimWrite]) -> bool:
        """Write the gang's claims, then bind its members in parallel; if one fails, roll the gang back."""
        try:
            written = self.claims.write(writes)
        except Exception as exc:  # a conflict (409) or a refusal: the gang goes back to the queue
            log.info("job %s: writing its ResourceClaims failed (%r); back to the queue", job.id, exc)
            return False
        if len(pods) == 1:
            outcomes = [self._bind_one(pods[0], nodes[0])]
        else:
            outcomes = list(self._members.map(self._bind_one, pods, nodes))
        failed = [(pod, exc) for pod, exc in zip(pods, outcomes, strict=True) if exc is not None]
        if failed:
            self._roll_back(job, [p for p, exc in zip(pods, outcomes, strict=True) if exc is None], *failed[0])
            self.claims.roll_back(writes, written)
            return False
        for pod, node in zip(pods, nodes, strict=True):
            self.record(pod, "Scheduled", f"Successfully assigned {_key(pod)} to {node}", False)
        return True

    def _bind_one(self, pod: Obj, node: str) -> Exception | None:
        meta = pod["metadata"]
        try:
            self.api.bind(meta["namespace"], meta["name"], meta["uid"], node)
            return None
        except Exception as exc:  # refused (ApiError), or Unanswered: it may have landed
            if isinstance(exc, Unanswered):
                self.unanswered.add(_key(pod))
            return exc

    def _roll_back(self, job: Job, done: list[Obj], failed: Obj, exc: Exception) -> None:
        cause = f"{exc.status.code}: {exc.status.message}" if isinstance(exc, ApiError) else repr(exc)
        why = f"binding {_key(failed)} failed ({cause})"
        log.warning("gang %s: %s; evicting the %d members bound", job.id, why, len(done))
        for pod in done:
            try:
                self.api.evict(pod["metadata"]["namespace"], pod["metadata"]["name"])
            except Exception as evict_exc:  # the next cycle sees the cluster as it is
                log.warning("evict failed: %s", evict_exc)
            self.record(pod, "FailedScheduling", f"trimtab: gang {job.id} rolled back: {why}", True)
