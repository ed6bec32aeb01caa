"""DRA in the kube scheduler's cycle against a fake API (no cluster): a pod's claims are written (finalizer, then
allocation and reservation) before its binding; a gang's claims all or none, rolled back when a binding fails; a
conflict on a claim sends the gang back without binding. The same against a real API server: test_kube_dra.py."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the kube extra (lightkube) is not installed")

from kube_objects import gpu_node, gpu_pod, pod_group
from lightkube import ApiError
from lightkube.models.meta_v1 import Status
from test_kube_cycle import FakeApi, scheduler

from dra_docs import DRIVER, claim, claim_spec, device_class, gpu, request, resource_slice

FINALIZER = "resource.kubernetes.io/delete-protection"


class ClaimApi(FakeApi):
    """FakeApi that also keeps ResourceClaim writes, in order with the bindings (`log`); `conflict` names claims
    whose status update answers 409."""

    def __init__(self, refuse: tuple[str, ...] = (), conflict: tuple[str, ...] = ()) -> None:
        super().__init__(refuse)
        self.conflict = conflict
        self.claims: dict[str, dict[str, Any]] = {}
        self.log: list[str] = []

    def update_claim(self, obj: dict[str, Any], status: bool = False) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if status and name in self.conflict:
            raise ApiError(status=Status(code=409, message="the object has been modified"))
        version = int(obj["metadata"].get("resourceVersion") or 0) + 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(version)}}
        self.claims[name] = obj
        self.log.append(f"{'status' if status else 'claim'} {name}")
        return obj

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        super().bind(namespace, name, uid, node)
        self.log.append(f"bind {name}")


def claimed_pod(name: str, claim_name: str, group: str | None = None) -> dict[str, Any]:
    pod = gpu_pod(name, 0, group=group)
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "t"}]
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": claim_name}]
    return pod


def cluster(api: ClaimApi, pods: list[dict[str, Any]], claims: list[dict[str, Any]], groups=()):
    sched = scheduler(api, [gpu_node("n1", 0)], pods, list(groups))
    for i, c in enumerate(claims):
        c["metadata"].update(uid=f"claim-{i}", resourceVersion="1")
    sched.informers["deviceclasses"].load([device_class()])
    sched.informers["resourceslices"].load([resource_slice("n1", [gpu(f"gpu-{i}") for i in range(4)])])
    sched.informers["resourceclaims"].load(claims)
    return sched


def test_claims_are_allocated_on_the_node_and_reserved_before_the_binding() -> None:
    api = ClaimApi()
    pods = [claimed_pod("a", "a-gpus"), claimed_pod("b", "b-gpus")]
    claims = [claim("a-gpus", claim_spec(request(count=2))), claim("b-gpus", claim_spec(request(count=2)))]
    cluster(api, pods, claims).cycle(1e9)
    assert api.bound == {"default/a": "n1", "default/b": "n1"}
    for pod in ("a", "b"):
        i = api.log.index(f"bind {pod}")
        assert api.log[i - 2:i] == [f"claim {pod}-gpus", f"status {pod}-gpus"]
        written = api.claims[f"{pod}-gpus"]
        assert FINALIZER in written["metadata"]["finalizers"]
        assert written["status"]["reservedFor"] == [{"resource": "pods", "name": pod,
                                                     "uid": next(p for p in pods if p["metadata"]["name"] == pod)
                                                     ["metadata"]["uid"]}]
        assert written["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0][
            "values"] == ["n1"]
    devices = [r["device"] for c in api.claims.values() for r in c["status"]["allocation"]["devices"]["results"]]
    assert sorted(devices) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert all(r["driver"] == DRIVER for c in api.claims.values()
               for r in c["status"]["allocation"]["devices"]["results"])


def test_a_gang_whose_binding_fails_rolls_its_claims_back() -> None:
    api = ClaimApi(refuse=("w1",))
    pods = [claimed_pod("w0", "w0-gpus", group="train"), claimed_pod("w1", "w1-gpus", group="train")]
    claims = [claim("w0-gpus", claim_spec()), claim("w1-gpus", claim_spec())]
    cluster(api, pods, claims, [pod_group("train", 2)]).cycle(1e9)
    assert api.evicted == ["default/w0"]
    assert api.log.index("status w1-gpus") < api.log.index("bind w0")  # all claims before any binding
    for name in ("w0-gpus", "w1-gpus"):
        assert api.claims[name]["status"]["reservedFor"] is None
        assert api.claims[name]["status"]["allocation"] is None


def test_a_conflict_on_a_claim_binds_nothing() -> None:
    api = ClaimApi(conflict=("w1-gpus",))
    pods = [claimed_pod("w0", "w0-gpus", group="train"), claimed_pod("w1", "w1-gpus", group="train")]
    claims = [claim("w0-gpus", claim_spec()), claim("w1-gpus", claim_spec())]
    cluster(api, pods, claims, [pod_group("train", 2)]).cycle(1e9)
    assert api.bound == {}
    assert api.claims["w0-gpus"]["status"]["allocation"] is None  # the one written is rolled back


def test_a_pod_waits_for_its_template_claim_and_the_model_counts_devices() -> None:
    api = ClaimApi()
    pod = claimed_pod("early", "x")
    del pod["status"]["resourceClaimStatuses"]
    sched = cluster(api, [pod], [])
    report = sched.cycle(1e9)
    assert api.bound == {}
    assert "waiting for the ResourceClaim of template t" in api.unschedulable["default/early"]
    assert report.gpus_total == {"n1": 4}
