"""Extended resources backed by DRA (KEP-5004, GA in 1.37) against a fake API: a pod asking `nvidia.com/gpu` on a
node that does not advertise it, where a DeviceClass names it in `extendedResourceName`, gets a ResourceClaim the
scheduler creates (`<pod>-extended-resources-`, owned by the pod, annotated), allocated with the node's devices
and reserved for the pod, and the mapping in its status, all before the binding; a binding that fails deletes
the claim. With no such class, the pod never goes to a node without GPUs of its own."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the kube extra (lightkube) is not installed")

from kube_objects import gpu_node, gpu_pod
from test_kube_claims import ClaimApi
from test_kube_cycle import scheduler

from dra_docs import DRIVER, device_class, gpu, resource_slice
from trimtab.formats.k8s.documents import Doc
from trimtab.formats.k8s.dra import read_inventory
from trimtab.formats.k8s.dra_extended import extended_claim

ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


class ExtendedApi(ClaimApi):
    """ClaimApi that also creates and deletes claims and patches a pod's extendedResourceClaimStatus."""

    def __init__(self, refuse: tuple[str, ...] = ()) -> None:
        super().__init__(refuse)
        self.deleted: list[str] = []
        self.pod_status: dict[str, dict[str, Any]] = {}
        self._suffix = itertools.count()

    def create_claim(self, obj: dict[str, Any]) -> dict[str, Any]:
        name = obj["metadata"]["generateName"] + f"x{next(self._suffix)}"
        obj = {**obj, "metadata": {**obj["metadata"], "name": name, "uid": f"uid-{name}", "resourceVersion": "1"}}
        self.claims[name] = obj
        self.log.append(f"create {name}")
        return obj

    def delete_claim(self, obj: dict[str, Any]) -> None:
        self.deleted.append(obj["metadata"]["name"])
        self.log.append(f"delete {obj['metadata']['name']}")

    def set_extended_claim(self, namespace: str, name: str, claim_name: str,
                           mappings: tuple[tuple[str, str, str], ...]) -> None:
        self.pod_status[name] = {"resourceClaimName": claim_name, "requestMappings": [
            {"containerName": c, "resourceName": r, "requestName": q} for c, r, q in mappings]}
        self.log.append(f"podstatus {name}")


def mapped_class(extended: str | None = "nvidia.com/gpu") -> dict[str, Any]:
    doc = device_class()
    if extended:
        doc["spec"]["extendedResourceName"] = extended
    return doc


def run(api: ExtendedApi, pods: list[dict[str, Any]], nodes: list[dict[str, Any]], classes: list[dict[str, Any]],
        devices: int = 4) -> None:
    """One cycle; node `dra` (if among `nodes`) has `devices` DRA GPUs."""
    sched = scheduler(api, nodes, pods)
    sched.informers["deviceclasses"].load(classes)
    sched.informers["resourceslices"].load([resource_slice("dra", [gpu(f"gpu-{i}") for i in range(devices)])])
    sched.cycle(1e9)


def test_a_class_naming_the_resource_backs_it_with_a_claim_made_before_the_binding() -> None:
    api = ExtendedApi()
    run(api, [gpu_pod("p", 2)], [gpu_node("dra", 0)], [mapped_class()])
    assert api.bound == {"default/p": "dra"}
    name = "p-extended-resources-x0"
    assert api.log == [f"create {name}", f"claim {name}", f"status {name}", "podstatus p", "bind p"]
    made = api.claims[name]
    assert made["metadata"]["annotations"] == {ANNOTATION: "true"}
    assert made["metadata"]["ownerReferences"][0] | {"uid": ""} == {"apiVersion": "v1", "kind": "Pod", "name": "p",
                                                                     "uid": "", "controller": True}
    assert made["spec"]["devices"]["requests"] == [{"name": "container-0-request-0", "exactly": {
        "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 2}}]
    results = made["status"]["allocation"]["devices"]["results"]
    assert [(r["request"], r["pool"]) for r in results] == [("container-0-request-0", "dra")] * 2
    assert [r["name"] for r in made["status"]["reservedFor"]] == ["p"]
    assert api.pod_status["p"] == {"resourceClaimName": name, "requestMappings": [
        {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-0"}]}


def test_without_a_class_naming_it_a_gpu_pod_never_goes_to_a_node_of_dra_devices_only() -> None:
    api = ExtendedApi()
    run(api, [gpu_pod("p", 2)], [gpu_node("dra", 0)], [mapped_class(None)])
    assert api.bound == {} and api.log == []
    run(api, [gpu_pod("q", 2)], [gpu_node("dra", 0), gpu_node("plugin", 8)], [mapped_class(None)])
    assert api.bound == {"default/q": "plugin"} and api.log == ["bind q"]


def test_a_node_advertising_the_resource_serves_it_itself() -> None:
    api = ExtendedApi()
    run(api, [gpu_pod("p", 8)], [gpu_node("dra", 0), gpu_node("plugin", 8)], [mapped_class()])
    assert api.bound == {"default/p": "plugin"} and api.log == ["bind p"]  # 8 GPUs: the DRA node has 4


def test_a_binding_that_fails_deletes_the_claim_it_made() -> None:
    api = ExtendedApi(refuse=("p",))
    run(api, [gpu_pod("p", 1)], [gpu_node("dra", 0)], [mapped_class()])
    assert api.bound == {} and api.deleted == ["p-extended-resources-x0"]


def test_the_implicit_name_of_every_class_and_the_request_names() -> None:
    inv = read_inventory([Doc("c", mapped_class(), "DeviceClass", "resource.k8s.io/v1", DRIVER, "", [], [])])
    implicit = f"deviceclass.resource.kubernetes.io/{DRIVER}"
    spec = {"initContainers": [{"name": "side", "restartPolicy": "Always",
                                "resources": {"limits": {implicit: "1"}}},
                               {"name": "once", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "2"},
                                                       "limits": {"nvidia.com/gpu": "2"}}},
                           {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1", implicit: "3"}}}]}
    doc = Doc("p", {}, "Pod", "v1", "p", "default", [], [])
    ext = extended_claim(doc, spec, "spec", inv)
    assert ext is not None
    assert [(r.name, r.count) for r in ext.spec.requests] == [
        ("container-0-request-0", 1), ("container-2-request-1", 2), ("container-3-request-0", 3),
        ("container-3-request-1", 1)]
    assert ext.other_devices == 4  # the implicit name's; nvidia.com/gpu is already the model's GPUs
    assert extended_claim(doc, spec, "spec", inv, skip=("nvidia.com/gpu",)).mappings == (
        ("side", implicit, "container-0-request-0"), ("b", implicit, "container-3-request-0"))


def test_a_claim_left_by_an_attempt_that_did_not_bind_is_deleted_and_its_devices_not_reused() -> None:
    """The pod's claim from an earlier attempt (made, allocated gpu-0 and gpu-1, then the scheduler stopped): it is
    deleted, and the new claim gets the two devices no claim holds."""
    api = ExtendedApi()
    pod = gpu_pod("p", 2)
    stale = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "p-extended-resources-old", "namespace": "default", "uid": "old",
                          "resourceVersion": "1", "annotations": {ANNOTATION: "true"},
                          "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                               "uid": pod["metadata"]["uid"], "controller": True}]},
             "spec": {"devices": {"requests": [{"name": "container-0-request-0", "exactly": {
                 "deviceClassName": DRIVER, "count": 2}}]}},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "container-0-request-0", "driver": DRIVER, "pool": "dra", "device": f"gpu-{i}"}
                 for i in range(2)]}, "nodeSelector": {"nodeSelectorTerms": [
                     {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["dra"]}]}]}}}}
    sched = scheduler(api, [gpu_node("dra", 0)], [pod])
    sched.informers["deviceclasses"].load([mapped_class()])
    sched.informers["resourceslices"].load([resource_slice("dra", [gpu(f"gpu-{i}") for i in range(4)])])
    sched.informers["resourceclaims"].load([stale])
    sched.cycle(1e9)
    assert api.log[0] == "delete p-extended-resources-old" and api.bound == {"default/p": "dra"}
    made = api.claims["p-extended-resources-x0"]
    assert sorted(r["device"] for r in made["status"]["allocation"]["devices"]["results"]) == ["gpu-2", "gpu-3"]
