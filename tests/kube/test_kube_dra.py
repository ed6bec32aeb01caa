"""DRA on a stock control plane (resource.k8s.io/v1, GA; the claim controller of kube-controller-manager makes
the template claims), with ResourceSlices published by hand as a driver would. The rules checked are
kube-scheduler's DynamicResources plugin's: a pod's claims are allocated with devices of its own node and reserved
for it before it is bound (the finalizer first); no device is in two claims; matchAttribute holds; a claim shared
by name is reserved for every pod using it; partitions of one GPU share its counters."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kube_env import KubeEnv, bin_dir, missing_binaries, run_trimtab_kube, stop_process
from test_kube_live import get_pod, wait_for

from dra_docs import DRIVER, claim, claim_spec, device_class, gpu, request, resource_slice, template

pytestmark = pytest.mark.kube
SCHEDULER = "trimtab-dra"
FINALIZER = "resource.kubernetes.io/delete-protection"


@pytest.fixture(scope="module")
def dra_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeEnv]:
    """A stock control plane: 3 nodes of 4 DRA GPUs each (two NVLink domains of two), no nvidia.com/gpu, and
    trimtab kube scheduling SCHEDULER."""
    missing = missing_binaries()
    if missing:
        pytest.skip(f"no {', '.join(missing)} in {bin_dir()}: build the control plane with `make kube-env`")
    env = KubeEnv(tmp_path_factory.mktemp("kube-env-dra"), crds=False)
    env.start()
    try:
        nodes = env.add_gpu_nodes(3, gpus=0, prefix="dra")
        env.wait_nodes_ready(nodes)
        env.wait_service_account()
        env.apply(device_class())
        for node in nodes:
            env.apply(resource_slice(node, [gpu(f"gpu-{i}", nvlink=i // 2, model="a100") for i in range(4)]))
        proc = run_trimtab_kube(env, "--scheduler-name", SCHEDULER, "--policy", "fifo", log_name="trimtab-dra")
        try:
            yield env
        finally:
            stop_process(proc)
    finally:
        env.stop()


def dra_pod(name: str, *, template_name: str | None = None, claim_name: str | None = None,
            node_name: str | None = None) -> dict[str, Any]:
    entry = {"name": "gpus", **({"resourceClaimTemplateName": template_name} if template_name else {}),
             **({"resourceClaimName": claim_name} if claim_name else {})}
    spec: dict[str, Any] = {"schedulerName": SCHEDULER, "resourceClaims": [entry],
                            "containers": [{"name": "main", "image": "busybox",
                                            "resources": {"claims": [{"name": "gpus"}]}}]}
    if node_name:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node_name}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def claims(env: KubeEnv) -> list[dict[str, Any]]:
    return env.request("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims")["items"]


def pod_claim(env: KubeEnv, pod: dict[str, Any], all_claims: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The claim of a pod's one pod claim ("gpus"), from its status for a template's."""
    entry = pod["spec"]["resourceClaims"][0]
    name = entry.get("resourceClaimName") or next(
        (s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []), None)
    return next((c for c in all_claims if c["metadata"]["name"] == name), None)


def devices_of(claim_obj: dict[str, Any]) -> list[tuple[str, str]]:
    results = (((claim_obj.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return [(r["pool"], r["device"]) for r in results]


def watch_bindings(env: KubeEnv, names: list[str], timeout_s: float = 60.0) -> dict[str, dict[str, Any]]:
    """Sample pods then claims until every pod is bound. Each sample: a pod seen bound has, in the claims read
    after it, its claim allocated with devices of its node, its finalizer, and a reservation for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        pods = {n: get_pod(env, n) for n in names}
        all_claims = claims(env)
        for name, pod in pods.items():
            node = pod["spec"].get("nodeName")
            if not node:
                continue
            c = pod_claim(env, pod, all_claims)
            assert c is not None, f"{name} bound to {node} with no claim"
            assert devices_of(c) and all(p == node for p, _ in devices_of(c)), (name, node, devices_of(c))
            assert FINALIZER in c["metadata"].get("finalizers", []), c["metadata"]
            assert pod["metadata"]["uid"] in [r["uid"] for r in c["status"].get("reservedFor") or []], c["status"]
        if all(p["spec"].get("nodeName") for p in pods.values()):
            return pods
        assert time.monotonic() < deadline, {n: p["spec"].get("nodeName") for n, p in pods.items()}
        time.sleep(0.05)


def assert_no_device_twice(env: KubeEnv) -> None:
    taken = [d for c in claims(env) for d in devices_of(c)]
    assert len(taken) == len(set(taken)), sorted(taken)


def test_template_claims_of_1_2_and_4_devices_are_allocated_on_the_pods_node_and_reserved_before_binding(
        dra_env: KubeEnv) -> None:
    for count in (1, 2, 4):
        dra_env.apply(template(f"gpus-{count}", claim_spec(request(count=count))))
    names = []
    for i, count in enumerate((1, 1, 2, 2, 4, 1)):
        names.append(f"tmpl-{i}")
        dra_env.apply(dra_pod(names[-1], template_name=f"gpus-{count}"))
    watch_bindings(dra_env, names)
    assert_no_device_twice(dra_env)


def test_a_match_attribute_claim_gets_devices_of_one_nvlink_domain(dra_env: KubeEnv) -> None:
    """On a node of two NVLink domains (gpu-0, gpu-1; gpu-2, gpu-3) whose gpu-0 is taken, three GPUs are free;
    a pair on one domain is only gpu-2 and gpu-3."""
    node = dra_env.add_gpu_nodes(1, gpus=0, prefix="link")[0]
    dra_env.wait_nodes_ready([node])
    dra_env.apply(resource_slice(node, [gpu(f"gpu-{i}", nvlink=i // 2) for i in range(4)]))
    dra_env.apply(template("linked", claim_spec(request(count=2), match=f"{DRIVER}/nvlink")))
    dra_env.apply(template("one", claim_spec(request())))
    dra_env.apply(dra_pod("link-one", template_name="one", node_name=node))
    first = watch_bindings(dra_env, ["link-one"])
    assert devices_of(pod_claim(dra_env, first["link-one"], claims(dra_env)) or {}) == [(node, "gpu-0")]
    dra_env.apply(dra_pod("link-pair", template_name="linked", node_name=node))
    pods = watch_bindings(dra_env, ["link-pair"])
    assert devices_of(pod_claim(dra_env, pods["link-pair"], claims(dra_env)) or {}) == [(node, "gpu-2"),
                                                                                         (node, "gpu-3")]
    assert_no_device_twice(dra_env)


def test_a_claim_shared_by_name_is_reserved_for_every_pod_on_one_node(dra_env: KubeEnv) -> None:
    dra_env.apply(claim("shared", claim_spec(request())))
    wait_for("the shared claim listed", lambda: any(c["metadata"]["name"] == "shared" for c in claims(dra_env)))
    for name in ("share-0", "share-1"):
        dra_env.apply(dra_pod(name, claim_name="shared"))
    pods = watch_bindings(dra_env, ["share-0", "share-1"])
    assert pods["share-0"]["spec"]["nodeName"] == pods["share-1"]["spec"]["nodeName"]
    shared = next(c for c in claims(dra_env) if c["metadata"]["name"] == "shared")
    assert sorted(r["name"] for r in shared["status"]["reservedFor"]) == ["share-0", "share-1"]
    assert len(devices_of(shared)) == 1
    assert_no_device_twice(dra_env)


def test_partitions_of_one_gpu_share_its_counters(dra_env: KubeEnv) -> None:
    """A node with one partitionable GPU (MIG-like): the whole device and two halves draw on one counter set.
    Two half claims bind there; a whole-GPU claim then cannot, and waits with a reason."""
    node = dra_env.add_gpu_nodes(1, gpus=0, prefix="mig", labels={"pool": "mig"})[0]
    dra_env.wait_nodes_ready([node])
    counters = [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}]
    devices = []
    for name, size, amount in (("whole", "whole", "80Gi"), ("half-0", "half", "40Gi"), ("half-1", "half", "40Gi")):
        device = gpu(name, size=size)
        device["consumesCounters"] = [{"counterSet": "gpu-0", "counters": {"memory": {"value": amount}}}]
        devices.append(device)
    # a pool of two slices, as the API server wants them: the counter sets, and the devices drawing on them
    dra_env.apply(resource_slice(node, [], count=2, sharedCounters=counters, name=f"{node}-counters"))
    dra_env.apply(resource_slice(node, devices, count=2, name=f"{node}-devices"))
    for size in ("half", "whole"):
        dra_env.apply(template(f"mig-{size}", claim_spec(request(
            selectors=(f'device.attributes["{DRIVER}"].size == "{size}"',)))))
    for name in ("mig-a", "mig-b"):
        dra_env.apply(dra_pod(name, template_name="mig-half", node_name=node))
    pods = watch_bindings(dra_env, ["mig-a", "mig-b"])
    got = sorted(d for p in pods.values() for _, d in devices_of(pod_claim(dra_env, p, claims(dra_env)) or {}))
    assert got == ["half-0", "half-1"]
    dra_env.apply(dra_pod("mig-whole", template_name="mig-whole", node_name=node))
    time.sleep(5)
    assert not get_pod(dra_env, "mig-whole")["spec"].get("nodeName")
    assert_no_device_twice(dra_env)
    # under fifo a pod left waiting would hold back the pods of the tests after this one (head-of-line)
    dra_env.request("DELETE", "/api/v1/namespaces/default/pods/mig-whole?gracePeriodSeconds=0")


def test_an_extended_resource_a_class_backs_gets_a_claim_made_for_the_pod(dra_env: KubeEnv) -> None:
    """A DeviceClass naming nvidia.com/gpu in extendedResourceName (GA in 1.37); a pod asking nvidia.com/gpu: 2
    on a node that advertises none gets a claim made for it (owned by it, annotated), allocated with two devices
    of its node and reserved for it before the binding, and named in its extendedResourceClaimStatus."""
    node = dra_env.add_gpu_nodes(1, gpus=0, prefix="ext")[0]
    dra_env.wait_nodes_ready([node])
    dra_env.apply(resource_slice(node, [gpu(f"gpu-{i}") for i in range(4)]))
    ext_class = device_class("gpu-ext")
    ext_class["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    dra_env.apply(ext_class)
    spec = {"schedulerName": SCHEDULER, "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "main", "image": "busybox",
                            "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
    dra_env.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ext-pod", "namespace": "default"},
                   "spec": spec})
    deadline = time.monotonic() + 60
    while not (pod := get_pod(dra_env, "ext-pod"))["spec"].get("nodeName"):
        assert time.monotonic() < deadline, pod["status"]
        time.sleep(0.2)
    assert pod["spec"]["nodeName"] == node
    status = pod["status"]["extendedResourceClaimStatus"]
    made = next(c for c in claims(dra_env) if c["metadata"]["name"] == status["resourceClaimName"])
    assert made["metadata"]["name"].startswith("ext-pod-extended-resources-")
    assert made["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    assert made["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    assert sorted(devices_of(made)) == [(node, "gpu-0"), (node, "gpu-1")]
    assert [r["uid"] for r in made["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
    assert status["requestMappings"] == [{"containerName": "main", "resourceName": "nvidia.com/gpu",
                                          "requestName": "container-0-request-0"}]
    assert_no_device_twice(dra_env)
