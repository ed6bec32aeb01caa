"""The operators' workloads on a real control plane, their CRDs installed (schemas left open, as only their
objects matter here), pods created as their controllers create them (ownerReferences with the owner's uid; LWS
labels; a JobSet's Jobs as its controller makes them, and their pods by the Job controller): two PyTorchJobs, two
RayClusters, two LeaderWorkerSet groups and two JobSets that fit one at a time each bind one whole, never one pod
of each."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kube_env import KubeEnv, bin_dir, missing_binaries, run_trimtab_kube, stop_process
from test_kube_live import get_pod

pytestmark = pytest.mark.kube
SCHEDULER = "trimtab-operators"
CRDS = (("kubeflow.org", "PyTorchJob", "pytorchjobs", "v1"), ("ray.io", "RayCluster", "rayclusters", "v1"),
        ("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets", "v1"),
        ("jobset.x-k8s.io", "JobSet", "jobsets", "v1alpha2"))


def crd(group: str, kind: str, plural: str, version: str) -> dict[str, Any]:
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                     "versions": [{"name": version, "served": True, "storage": True, "schema": schema}]}}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeEnv]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"no {', '.join(missing)} in {bin_dir()}: build the control plane with `make kube-env`")
    kube = KubeEnv(tmp_path_factory.mktemp("kube-env-operators"), crds=False)
    kube.start()
    try:
        for group, kind, plural, version in CRDS:
            kube.apply(crd(group, kind, plural, version))
            kube.wait_served(f"/apis/{group}/{version}/{plural}")
        kube.wait_service_account()
        proc = run_trimtab_kube(kube, "--scheduler-name", SCHEDULER, "--policy", "fifo", log_name="trimtab-ops")
        try:
            yield kube
        finally:
            stop_process(proc)
    finally:
        kube.stop()


def template() -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "main", "image": "busybox",
                                     "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}


def pod(name: str, owner: dict[str, Any] | None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                    "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                    "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": SCHEDULER, "nodeSelector": {"pool": meta["name"].split("-")[0]},
                     "tolerations": [{"key": "pool", "operator": "Exists", "effect": "NoSchedule"}],
                     **template()["spec"]}}


def run_two(env: KubeEnv, pool: str, groups: dict[str, list[dict[str, Any]]]) -> None:
    """Create the two groups' pods interleaved on two 8-GPU nodes of `pool`, check `assert_one_whole`, then
    delete them."""
    nodes = env.add_gpu_nodes(2, prefix=pool, labels={"pool": pool},
                              taints=[{"key": "pool", "value": pool, "effect": "NoSchedule"}])
    env.wait_nodes_ready(nodes)
    for pair in zip(*groups.values(), strict=True):
        for p in pair:
            env.apply(p)
    try:
        assert_one_whole(env, groups)
    finally:  # under fifo the group left waiting would block the next test's pods (head-of-line)
        for pods in groups.values():
            for p in pods:
                env.request("DELETE", f"/api/v1/namespaces/default/pods/{p['metadata']['name']}?gracePeriodSeconds=0")


def assert_one_whole(env: KubeEnv, groups: dict[str, list[dict[str, Any]]]) -> None:
    """Within 30 s exactly one group is bound, whole, the other not at all, and 3 s later still so."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        bound = {g: sum(1 for p in pods if get_pod(env, p["metadata"]["name"])["spec"].get("nodeName"))
                 for g, pods in groups.items()}
        if sorted(bound.values()) == [0, 3]:
            break
        time.sleep(0.5)
    time.sleep(3)  # and it stays so
    bound = {g: sum(1 for p in pods if get_pod(env, p["metadata"]["name"])["spec"].get("nodeName"))
             for g, pods in groups.items()}
    assert sorted(bound.values()) == [0, 3], bound


def test_pytorch_jobs_bind_whole(env: KubeEnv) -> None:
    groups = {}
    for name in ("ptj-a", "ptj-b"):
        job = env.apply({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
                         "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template()},
                                                          "Worker": {"replicas": 2, "template": template()}}}})
        groups[name] = [pod(f"{name}-{k}", job) for k in ("master-0", "worker-0", "worker-1")]
    run_two(env, "ptj", groups)


def test_ray_clusters_bind_whole(env: KubeEnv) -> None:
    groups = {}
    for name in ("ray-a", "ray-b"):
        cluster = env.apply({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name},
                             "spec": {"headGroupSpec": {"template": template()},
                                      "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2,
                                                            "template": template()}]}})
        groups[name] = [pod(f"{name}-{k}", cluster) for k in ("head", "gpu-worker-0", "gpu-worker-1")]
    run_two(env, "ray", groups)


def test_leader_worker_set_groups_bind_whole(env: KubeEnv) -> None:
    env.apply({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "lws"},
               "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 3, "workerTemplate": template()}}})
    groups = {}
    for g in range(2):
        labels = {"leaderworkerset.sigs.k8s.io/name": "lws", "leaderworkerset.sigs.k8s.io/group-index": str(g)}
        groups[str(g)] = [pod(f"lws-{g}" + (f"-{i}" if i else ""), None, labels) for i in range(3)]
    run_two(env, "lws", groups)


def test_jobsets_bind_whole(env: KubeEnv) -> None:
    """Each JobSet a driver Job (1 x 4 GPUs) and a worker Job (2 x 4 GPUs): Job by Job, both drivers would bind and
    b's would hold 4 GPUs for nothing; as JobSets one binds whole (its 3 pods), the other not at all."""
    nodes = env.add_gpu_nodes(2, prefix="js", labels={"pool": "js"},
                              taints=[{"key": "pool", "value": "js", "effect": "NoSchedule"}])
    env.wait_nodes_ready(nodes)
    def job_spec(name: str, rjob: str, parallelism: int) -> dict[str, Any]:
        labels = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": rjob}
        return {"parallelism": parallelism, "completions": parallelism, "template": {
            "metadata": {"labels": labels}, "spec": {**pod(f"js-{rjob}", None)["spec"], "restartPolicy": "Never"}}}

    rjobs = (("driver", 1), ("workers", 2))
    sets = {name: env.apply({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
                             "spec": {"replicatedJobs": [{"name": r, "replicas": 1, "template": {
                                 "spec": job_spec(name, r, n)}} for r, n in rjobs]}})
            for name in ("jsa", "jsb")}
    for rjob, parallelism in rjobs:
        for name, js in sets.items():  # interleaved, as two JobSet controllers' writes would be
            owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": name,
                     "uid": js["metadata"]["uid"], "controller": True}
            env.apply({"apiVersion": "batch/v1", "kind": "Job", "spec": job_spec(name, rjob, parallelism),
                       "metadata": {"name": f"{name}-{rjob}-0", "ownerReferences": [owner]}})

    def bound() -> dict[str, int]:
        pods = env.request("GET", "/api/v1/namespaces/default/pods?labelSelector=jobset.sigs.k8s.io/jobset-name")
        counts = dict.fromkeys(sets, 0)
        for p in pods["items"]:
            counts[p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"]] += bool(p["spec"].get("nodeName"))
        return counts

    deadline = time.monotonic() + 30
    while sorted(bound().values()) != [0, 3] and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3)  # and it stays so
    assert sorted(bound().values()) == [0, 3], bound()
