"""Workloads for benchmarks/fidelity.py: a seeded mix of jobs on 2 nodes x 8 GPUs, written as the manifests a user
submits. Two namespaces; two priority classes; bare Pods of 1-8 GPUs and PodGroup gangs (of the high class, so
never a victim: an evicted bare Pod is gone), and batch/v1 Jobs of 2-3 pods as gangs (of either class: the Job
controller recreates an evicted pod); 15-50 s each by default, submitted over `--span-s`. With `--dra`, the GPUs
are DRA devices (a DeviceClass, one ResourceSlice of 8 per node, no nvidia.com/gpu) and each pod takes its GPUs
through a claim from a ResourceClaimTemplate of its count. With `--queues`, two Volcano Queues deserve 8 GPUs each
and the jobs are batch/v1 Jobs of one class (queue_workload).

Usage: .venv/bin/python benchmarks/fidelity_workloads.py --seed 1 --jobs 30 > benchmarks/fidelity/mixed-1.yaml
       .venv/bin/python benchmarks/fidelity_workloads.py --seed 3 --jobs 30 --dra > benchmarks/fidelity/dra-1.yaml
       .venv/bin/python benchmarks/fidelity_workloads.py --seed 8 --jobs 30 --queues \
           > benchmarks/fidelity/queues-1.yaml"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import yaml

DURATION, SUBMIT, GROUP = "trimtab.io/duration", "trimtab.io/submit-time", "scheduling.x-k8s.io/pod-group"
DRA_API, DRIVER = "resource.k8s.io/v1", "gpu.example.com"
COUNTS = (1, 2, 4, 8)


def dra_objects(nodes: int, gpus: int) -> list[dict[str, Any]]:
    """The DeviceClass, one ResourceSlice per node (`gpus` devices, an NVLink domain per half) and in each
    namespace a ResourceClaimTemplate `gpus-<n>` per count."""
    docs: list[dict[str, Any]] = [{"apiVersion": DRA_API, "kind": "DeviceClass", "metadata": {"name": DRIVER},
                                   "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}]
    for i in range(nodes):
        devices = [{"name": f"gpu-{k}", "attributes": {"nvlink": {"int": k * 2 // gpus}}} for k in range(gpus)]
        docs.append({"apiVersion": DRA_API, "kind": "ResourceSlice", "metadata": {"name": f"node-{i}-gpus"},
                     "spec": {"driver": DRIVER, "nodeName": f"node-{i}", "devices": devices,
                              "pool": {"name": f"node-{i}", "generation": 1, "resourceSliceCount": 1}}})
    docs += [{"apiVersion": DRA_API, "kind": "ResourceClaimTemplate",
              "metadata": {"name": f"gpus-{n}", "namespace": ns},
              "spec": {"spec": {"devices": {"requests": [
                  {"name": "gpus", "exactly": {"deviceClassName": DRIVER, "count": n}}]}}}}
             for ns in ("team-a", "team-b") for n in COUNTS]
    return docs


def cluster(nodes: int, gpus: int, dra: bool = False) -> list[dict[str, Any]]:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", **({} if dra else {"nvidia.com/gpu": str(gpus)})}
    docs: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                                  for ns in ("team-a", "team-b")]
    docs += [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
              "value": value} for name, value in (("low", 100), ("high", 1000))]
    docs += [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i}", "labels": {
        "kubernetes.io/hostname": f"node-{i}"}}, "status": {"capacity": capacity, "allocatable": capacity}}
        for i in range(nodes)]
    return docs + (dra_objects(nodes, gpus) if dra else [])


def _pod_spec(gpus: int, priority: str, dra: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "trimtab", "priorityClassName": priority, "restartPolicy": "Never"}
    if dra:
        return {**spec, "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": f"gpus-{gpus}"}],
                "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpus"}]}}]}
    return {**spec, "containers": [{"name": "main", "image": "busybox", "resources": {
        "requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}]}


def workload(rng: np.random.Generator, jobs: int, span_s: float, durations_s: tuple[int, int] = (15, 50),
             dra: bool = False) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    submits = np.sort(rng.uniform(0, span_s, jobs))
    for i, submit in enumerate(submits):
        ns = "team-a" if rng.random() < 0.5 else "team-b"
        duration = f"{int(rng.integers(durations_s[0], durations_s[1] + 1))}s"
        kind = rng.choice(["pod", "job", "group"], p=[0.5, 0.35, 0.15])
        meta = {"namespace": ns, "annotations": {SUBMIT: f"{submit:.1f}s"}}
        if kind == "pod":
            gpus = int(rng.choice([1, 2, 4, 8], p=[0.4, 0.3, 0.2, 0.1]))
            docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
                **meta, "name": f"pod-{i}", "annotations": {**meta["annotations"], DURATION: duration}},
                "spec": _pod_spec(gpus, "high", dra)})
        elif kind == "job":
            size, gpus = int(rng.integers(2, 4)), int(rng.choice([1, 2, 4]))
            docs.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": {**meta, "name": f"job-{i}"},
                         "spec": {"parallelism": size, "completions": size, "backoffLimit": 6,
                                  "template": {"metadata": {"annotations": {DURATION: duration}},
                                               "spec": _pod_spec(gpus, str(rng.choice(["low", "high"])), dra)}}})
        else:
            docs.append({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                         "metadata": {**meta, "name": f"group-{i}"}, "spec": {"minMember": 2}})
            docs += [{"apiVersion": "v1", "kind": "Pod", "metadata": {
                **meta, "name": f"group-{i}-{k}", "labels": {GROUP: f"group-{i}"},
                "annotations": {**meta["annotations"], DURATION: duration}}, "spec": _pod_spec(4, "high", dra)}
                for k in range(2)]
    return docs


def queues() -> list[dict[str, Any]]:
    """Volcano Queues team-a and team-b, each deserving 8 GPUs (the namespaces are the queues)."""
    return [{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": team},
             "spec": {"weight": 1, "deserved": {"nvidia.com/gpu": "8"}}} for team in ("team-a", "team-b")]


def queue_workload(rng: np.random.Generator, jobs: int, span_s: float, durations_s: tuple[int, int] = (15, 50)
                   ) -> list[dict[str, Any]]:
    """batch/v1 Jobs only (an evicted pod comes back), of one priority class, so that only a queue's reclaim
    preempts: team-b's mostly in the first half of the span (it borrows), team-a's mostly in the second (it
    reclaims)."""
    docs: list[dict[str, Any]] = []
    for i, submit in enumerate(np.sort(rng.uniform(0, span_s, jobs))):
        early = submit < span_s / 2
        ns = ("team-b" if early else "team-a") if rng.random() < 0.8 else ("team-a" if early else "team-b")
        duration = f"{int(rng.integers(durations_s[0], durations_s[1] + 1))}s"
        size, gpus = int(rng.integers(1, 4)), int(rng.choice([1, 2, 4]))
        docs.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "namespace": ns, "name": f"job-{i}", "annotations": {SUBMIT: f"{submit:.1f}s"}},
            "spec": {"parallelism": size, "completions": size, "backoffLimit": 6,
                     "template": {"metadata": {"annotations": {DURATION: duration}},
                                  "spec": _pod_spec(gpus, "low")}}})
    return docs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--span-s", type=float, default=120.0)
    parser.add_argument("--min-duration-s", type=int, default=15)
    parser.add_argument("--max-duration-s", type=int, default=50)
    parser.add_argument("--dra", action="store_true", help="GPUs as DRA devices, claimed from templates")
    parser.add_argument("--queues", action="store_true", help="two Volcano Queues deserving 8 GPUs each; Jobs only")
    args = parser.parse_args()
    rng, durations = np.random.default_rng(args.seed), (args.min_duration_s, args.max_duration_s)
    if args.queues:
        docs = cluster(2, 8) + queues() + queue_workload(rng, args.jobs, args.span_s, durations)
    else:
        docs = cluster(2, 8, args.dra) + workload(rng, args.jobs, args.span_s, durations, args.dra)
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
