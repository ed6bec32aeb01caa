"""The Volcano Queues' status on a live cluster: `status.allocated` (the `nvidia.com/gpu` of the pods bound in each
queue), as Volcano's controller keeps it, so `kubectl get queue -o yaml` shows what each queue holds.

Owns QueueStatus. A write goes out only when the count changed, on the reporting threads (a cycle never waits for
it); a failed one is tried again at the next change. The PodGroup counts (`pending`, `running`, ...) of Volcano's
status are not written."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trimtab.formats.k8s.documents import GPU
from trimtab.kube.api import KubeApi
from trimtab.model import Job

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class QueueStatus:
    """`update(queues, holding)` once a cycle, with the Queue objects and the snapshot's bound pods."""

    def __init__(self, api: KubeApi, pool: ThreadPoolExecutor) -> None:
        self.api, self.pool = api, pool
        self._sent: dict[str, str] = {}  # queue -> the allocated GPUs last written

    def update(self, queues: list[Obj], holding: list[tuple[Job, str, float]]) -> None:
        if not queues:
            return
        used: dict[str, int] = {}
        for job, _, _ in holding:
            used[job.queue or job.tenant] = used.get(job.queue or job.tenant, 0) + job.gpus
        for obj in queues:
            name = obj["metadata"]["name"]
            want = str(used.get(name, 0))
            have = ((obj.get("status") or {}).get("allocated") or {}).get(GPU)
            if have != want and self._sent.get(name) != want:
                self._sent[name] = want
                self.pool.submit(self._write, name, want)

    def _write(self, name: str, gpus: str) -> None:
        try:
            self.api.set_queue_allocated(name, {GPU: gpus})
        except Exception as exc:  # tried again at the next change
            log.info("writing Queue %s status failed: %r", name, exc)
            self._sent.pop(name, None)
