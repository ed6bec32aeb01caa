"""Kubernetes objects as the API server returns them, for the kube tests: GPU nodes, pods, PodGroups, Jobs."""

from __future__ import annotations

import itertools
from typing import Any

_uids = itertools.count(1)


def gpu_node(name: str, gpus: int = 8, *, ready: bool = True, labels: dict[str, str] | None = None,
             taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"node-{name}", "labels": {"kubernetes.io/hostname": name,
                                                                         **(labels or {})}},
            "spec": {"podCIDR": "10.0.0.0/24", **({"taints": taints} if taints else {})},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "Unknown"}]}}


def gpu_pod(name: str, gpus: int = 1, *, namespace: str = "default", scheduler: str = "trimtab",
            node: str | None = None, group: str | None = None, created: str = "2026-12-01T10:00:00Z",
            annotations: dict[str, str] | None = None, job: str | None = None, **spec: Any) -> dict[str, Any]:
    """A pod asking `gpus` nvidia.com/gpu; `group` names a coscheduling PodGroup (scheduling.x-k8s.io label);
    `job` names the batch/v1 Job that controls it (its ownerReference, as the Job controller writes it)."""
    labels = {"scheduling.x-k8s.io/pod-group": group} if group else {}
    owners = [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"job-{job}", "controller": True,
               "blockOwnerDeletion": True}] if job else []
    container = {"name": "main", "image": "busybox", "terminationMessagePath": "/dev/termination-log",
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{next(_uids)}", "labels": labels,
                         "annotations": annotations or {}, "creationTimestamp": created, "resourceVersion": "1",
                         **({"ownerReferences": owners} if owners else {})},
            "spec": {"containers": [container], "schedulerName": scheduler, "restartPolicy": "Never",
                     "dnsPolicy": "ClusterFirst", "priority": 0, "enableServiceLinks": True,
                     "tolerations": [{"key": f"node.kubernetes.io/{key}", "operator": "Exists",  # as admitted
                                      "effect": "NoExecute", "tolerationSeconds": 300}  # with DefaultTolerationSeconds
                                     for key in ("not-ready", "unreachable")],
                     **({"nodeName": node} if node else {}), **spec},
            "status": {"phase": "Running" if node else "Pending", "startTime": created if node else None}}


def pod_group(name: str, min_member: int, *, namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "uid": f"pg-{name}"},
            "spec": {"minMember": min_member}, "status": {}}


def batch_job(name: str, parallelism: int, *, completions: int | None = None, succeeded: int = 0,
              namespace: str = "default", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A batch/v1 Job as the informer holds it (its pods come separately, `gpu_pod(job=name)`)."""
    spec: dict[str, Any] = {"parallelism": parallelism, "template": {"spec": {"containers": []}}}
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "uid": f"job-{name}", "resourceVersion": "1",
                         "annotations": annotations or {}},
            "spec": spec, "status": {"succeeded": succeeded}}
