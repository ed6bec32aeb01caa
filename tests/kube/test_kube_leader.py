"""Leader election on a Lease: one holder at a time, renewals keep it, a silent holder is replaced after the lease
duration."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the kube extra (lightkube) is not installed")

from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from trimtab.kube.leader import LeaderElector


class LeaseStore:
    """One Lease with the API server's optimistic concurrency."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None if self.lease is None else {"metadata": {"resourceVersion": str(self.version)},
                                                 "spec": dict(self.lease)}

    def write_lease(self, namespace: str, name: str, spec: dict[str, Any], resource_version: str | None) -> None:
        if (self.lease is None) != (resource_version is None) or (
                resource_version is not None and resource_version != str(self.version)):
            raise ApiError(status=Status(code=409, message="the object has been modified"))
        self.lease, self.version = dict(spec), self.version + 1


FAST = {"lease_s": 0.3, "renew_deadline_s": 0.2, "renew_s": 0.1, "retry_s": 0.05}


def test_one_leader_and_a_takeover_after_the_lease_expires() -> None:
    store = LeaseStore()
    a = LeaderElector(store, "a", **FAST)  # type: ignore[arg-type]
    b = LeaderElector(store, "b", **FAST)  # type: ignore[arg-type]
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    for _ in range(3):  # a renews faster than the lease runs out: b never gets it
        time.sleep(0.15)
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    time.sleep(0.35)  # a is silent (killed) for longer than the lease
    assert b.try_acquire_or_renew()
    assert store.lease is not None and store.lease["holderIdentity"] == "b"
    assert store.lease["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()  # a back from a pause sees b's fresh record



class HangingStore(LeaseStore):
    """A LeaseStore whose server goes silent while `hang` is set: every call blocks until it is cleared."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = threading.Event()
        self.answer = threading.Event()
        self.answer.set()

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.answer.wait()
        return super().get_lease(namespace, name)


def test_a_leader_on_a_silent_server_stops_leading_before_the_lease_could_expire() -> None:
    """The leader's renewal hangs (a silent server, no answer for longer than the lease): it stops leading at its
    renew deadline, while the attempt still hangs, before a standby could see the lease run out."""
    store = HangingStore()
    leader = LeaderElector(store, "a", lease_s=1.0, renew_deadline_s=0.5, renew_s=0.1, retry_s=0.05).start()
    try:
        assert leader.leading.wait(2.0)
        store.answer.clear()
        silent_at = time.monotonic()
        deadline = silent_at + 2.0
        while leader.leading.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        stopped_after_s = time.monotonic() - silent_at
        assert not leader.leading.is_set()
        assert stopped_after_s < 1.0  # the lease: no standby can have taken over yet
    finally:
        leader.stop()
        store.answer.set()


def test_the_election_timings_must_nest() -> None:
    with pytest.raises(ValueError, match="renew_s < renew_deadline_s < lease_s"):
        LeaderElector(LeaseStore(), "a", lease_s=10.0, renew_deadline_s=12.0)  # type: ignore[arg-type]


def test_the_client_side_rate_limit_lets_a_burst_through_then_paces_requests() -> None:
    import time

    from trimtab.kube.api import RateLimit

    limit = RateLimit(qps=50, burst=5)
    started = time.monotonic()
    for _ in range(5):
        limit.take()
    assert time.monotonic() - started < 0.05  # the burst
    for _ in range(5):
        limit.take()
    assert time.monotonic() - started >= 5 / 50 * 0.9  # then 50 a second


class RecordingWire:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, method: str, path: str, body: Any, content_type: str = "application/json") -> None:
        self.sent.append(path)


def test_a_leader_paused_past_its_deadline_writes_nothing_before_any_of_its_threads_runs() -> None:
    """Right after a pause (SIGSTOP, a stalled VM) the `leading` flag is still set: the deadline watchdog has not
    run yet. The fence reads the clock instead, so the first write after the pause is refused, the wire never
    sees it, and writes go out again once a renewal succeeds."""
    from trimtab.kube.api import KubeApi, NotLeading

    elector = LeaderElector(LeaseStore(), "a", **FAST)  # type: ignore[arg-type]
    assert elector.try_acquire_or_renew()
    elector._renewed_at = time.monotonic()
    elector.leading.set()
    wire = RecordingWire()
    api = KubeApi(None, wire, "trimtab")  # type: ignore[arg-type]
    api.fence = elector.holds
    api.bind("default", "p0", "uid-0", "n1")
    assert wire.sent == ["/api/v1/namespaces/default/pods/p0/binding?fieldManager=trimtab"]
    elector._renewed_at -= FAST["renew_deadline_s"] + 1.0  # what a pause past the deadline leaves behind
    assert elector.leading.is_set() and not elector.holds()
    for write in (lambda: api.bind("default", "p1", "uid-1", "n1"), lambda: api.evict("default", "p0"),
                  lambda: api.mark_unschedulable("default", "p1", "why"),
                  lambda: api.record_event({"metadata": {"name": "p1", "namespace": "default"}}, "R", "m")):
        with pytest.raises(NotLeading):
            write()
    assert len(wire.sent) == 1
    elector._renewed_at = time.monotonic()  # renewed again
    api.bind("default", "p1", "uid-1", "n1")
    assert len(wire.sent) == 2
