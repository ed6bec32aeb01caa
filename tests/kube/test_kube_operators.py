"""Gangs of the operators' workloads (PyTorchJob, RayCluster/RayJob, LeaderWorkerSet), with no PodGroup written:
in manifests (the simulator) and live against a fake API, from the pods as their controllers create them
(ownerReferences, LWS labels). Two workloads that fit one at a time are never both partly bound."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the kube extra (lightkube) is not installed")

from kube_objects import gpu_node, gpu_pod
from test_kube_cycle import FakeApi

from trimtab.formats.k8s import read_documents
from trimtab.kube.live import KubeScheduler
from trimtab.profile import Profile


def template(gpus: int) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "main", "image": "i",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def pytorch_job(name: str, workers: int, gpus: int = 4, min_available: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template(gpus)},
                                                    "Worker": {"replicas": workers, "template": template(gpus)}}}
    if min_available is not None:
        spec["runPolicy"] = {"schedulingPolicy": {"minAvailable": min_available}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": spec,
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"}}


def ray_cluster(name: str, workers: int, gpus: int = 4) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"headGroupSpec": {"template": template(gpus)},
                     "workerGroupSpecs": [{"groupName": "gpu", "replicas": workers, "minReplicas": 0,
                                           "template": template(gpus)}]}}


def lws(name: str, replicas: int, size: int, gpus: int = 4) -> dict[str, Any]:
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size, "workerTemplate": template(gpus)}}}


def owned_pod(name: str, owner: dict[str, Any], gpus: int = 4, labels: dict[str, str] | None = None,
              second: int = 0) -> dict[str, Any]:
    """A pod as its controller creates it: owned by `owner` (LWS pods: by a StatefulSet, labelled)."""
    pod = gpu_pod(name, gpus, created=f"2026-12-01T10:00:{second:02d}Z")
    if owner["kind"] == "LeaderWorkerSet":
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
                                               "uid": "sts", "controller": True}]
        pod["metadata"]["labels"].update(labels or {})
    else:
        pod["metadata"]["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                               "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                               "controller": True}]
    return pod


def cycle(pods: list[dict[str, Any]], owners: list[dict[str, Any]], nodes: int = 2) -> FakeApi:
    api = FakeApi()
    sched = KubeScheduler(api, Profile.load("fifo"))  # type: ignore[arg-type]
    sched.informers["nodes"].load([gpu_node(f"n{i}") for i in range(nodes)])
    sched.informers["pods"].load(pods)
    for kind in ("pytorchjobs", "rayclusters", "leaderworkersets"):
        sched.informers[kind].load([o for o in owners if o["kind"].lower() + "s" == kind])
    sched.cycle(1e9)
    return api


def interleaved(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for pair in zip(a, b, strict=True) for p in pair]


def test_two_pytorch_jobs_that_fit_one_at_a_time_bind_one_whole() -> None:
    jobs = [pytorch_job("pt-a", 2), pytorch_job("pt-b", 2)]  # 3 pods x 4 GPUs each on 2 x 8
    pods = [[owned_pod(f"{j['metadata']['name']}-{k}", j, second=2 * i + n) for i, k in
             enumerate(("master-0", "worker-0", "worker-1"))] for n, j in enumerate(jobs)]
    api = cycle(interleaved(*pods), jobs)
    assert sorted(api.bound) == ["default/pt-a-master-0", "default/pt-a-worker-0", "default/pt-a-worker-1"]
    assert api.unschedulable["default/pt-b-master-0"].startswith("waiting for room for the gang's 3 members")


def test_min_available_makes_the_gang_smaller_and_the_rest_follow() -> None:
    job = pytorch_job("pt", 3, min_available=2)
    pods = [owned_pod(f"pt-{k}", job, 8) for k in ("master-0", "worker-0", "worker-1", "worker-2")]
    api = cycle(pods, [job])
    assert len(api.bound) == 2


def test_a_ray_cluster_is_one_gang_of_its_head_and_workers() -> None:
    clusters = [ray_cluster("rc-a", 2), ray_cluster("rc-b", 2)]
    pods = [[owned_pod(f"{c['metadata']['name']}-{k}", c, second=2 * i + n)
             for i, k in enumerate(("head", "gpu-worker-0", "gpu-worker-1"))] for n, c in enumerate(clusters)]
    api = cycle(interleaved(*pods), clusters)
    assert sorted(api.bound) == ["default/rc-a-gpu-worker-0", "default/rc-a-gpu-worker-1", "default/rc-a-head"]


def test_each_leader_worker_set_group_is_a_gang() -> None:
    """Two groups of 3 x 4 GPUs on 2 x 8: one group binds whole, the other waits."""
    ws = lws("serve", 2, 3)
    pods = []
    for g in range(2):
        for i in range(3):
            name = f"serve-{g}" if i == 0 else f"serve-{g}-{i}"
            pods.append(owned_pod(name, ws, labels={"leaderworkerset.sigs.k8s.io/name": "serve",
                                                    "leaderworkerset.sigs.k8s.io/group-index": str(g)},
                                  second=2 * i + g))
    api = cycle(pods, [ws])
    groups = {k.split("/")[1].split("-")[1] for k in api.bound}
    assert len(api.bound) == 3 and len(groups) == 1


def test_pods_of_an_operator_not_read_yet_wait_and_an_opted_out_one_binds_pod_by_pod() -> None:
    job = pytorch_job("pt", 2)
    pods = [owned_pod(f"pt-{k}", job) for k in ("master-0", "worker-0", "worker-1")]
    assert cycle(pods, []).bound == {}
    job["metadata"]["annotations"] = {"trimtab.io/gang": "false"}
    assert len(cycle(pods, [job], nodes=1).bound) == 2  # 2 of the 3 fit, one by one


def test_manifests_read_the_same_gangs() -> None:
    docs = [pytorch_job("pt", 3, min_available=2), ray_cluster("rc", 2), lws("serve", 2, 3)]
    jobs = read_documents([(d["metadata"]["name"], d) for d in docs]).jobs
    gangs = {j.id: j.tasks for j in jobs if not j.after}
    assert gangs == {"default/pt": 2, "default/rc": 3, "default/serve-0": 3, "default/serve-1": 3}
    assert sorted(j.id for j in jobs if j.after == "default/pt") == ["default/pt-worker-1", "default/pt-worker-2"]
