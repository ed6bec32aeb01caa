"""Events about pods, best effort, as Kubernetes components record them: queued, written on a thread of their own,
dropped when the queue is full.

Owns EventRecorder. client-go's event broadcaster (the one kube-scheduler records its `Scheduled` and
`FailedScheduling` Events through) queues at most 1,000 Events (`maxQueuedEvents`) and drops what arrives while
the queue is full (`watch.DropIfChannelFull`): an Event must never hold up the work it reports. trimtab keeps the
same rule, so that a burst of bindings is never paced by the Events recording them."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

QUEUED_EVENTS = 1000  # client-go's maxQueuedEvents

Obj = dict[str, Any]
WriteEvent = Callable[[Obj, str, str, bool], None]  # (pod, reason, message, warning): KubeApi.record_event


class EventRecorder:
    """`record(...)` from any thread never waits: the Event is queued for the writer thread, or dropped (and
    counted in `dropped`) when `capacity` Events already wait. A write that fails is logged and not retried.
    `flush()` waits until every Event queued so far is written or has failed."""

    def __init__(self, write: WriteEvent, capacity: int = QUEUED_EVENTS) -> None:
        self.dropped = 0
        self._dropping = threading.Lock()
        self._write = write
        self._queue: queue.Queue[tuple[Obj, str, str, bool]] = queue.Queue(capacity)
        threading.Thread(target=self._run, name="trimtab-kube-events", daemon=True).start()

    def record(self, pod: Obj, reason: str, message: str, warning: bool = False) -> bool:
        """Queue an Event about `pod`; False when it was dropped."""
        try:
            self._queue.put_nowait((pod, reason, message, warning))
            return True
        except queue.Full:
            with self._dropping:
                self.dropped += 1
                dropped = self.dropped
            if dropped == 1 or dropped % QUEUED_EVENTS == 0:
                log.warning("event queue full: %d Events dropped so far (the latest: %s on %s/%s)", dropped,
                            reason, pod["metadata"]["namespace"], pod["metadata"]["name"])
            return False

    def flush(self) -> None:
        self._queue.join()

    def _run(self) -> None:
        while True:
            pod, reason, message, warning = self._queue.get()
            try:
                self._write(pod, reason, message, warning)
            except Exception as exc:
                log.warning("recording the Event %s on %s/%s failed: %s", reason, pod["metadata"]["namespace"],
                            pod["metadata"]["name"], exc)
            finally:
                self._queue.task_done()
