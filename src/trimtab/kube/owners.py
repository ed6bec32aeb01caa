"""Gangs from the workloads users submit: the pods of a batch/v1 Job, found through their `ownerReferences`, are
one gang, with no PodGroup written by hand.

Owns `owner_group` (the Job a pod's controller reference names) and `job_groups` (each Job as the PodGroup its
pods form). A PodGroup the pod names (label or annotation) takes precedence; the annotation `trimtab.io/gang:
"false"` on the pod (its Job's pod template) or on the Job opts a workload out, each pod then a job of its own.
The rule and what each kind gives a gang: docs/kubernetes.md."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trimtab.formats.k8s.workloads import GANG as OPT_OUT
from trimtab.formats.k8s.workloads import job_gang_size

Obj = dict[str, Any]

JOB_API = "batch/v1"


def _opted_out(obj: Obj) -> bool:
    return str((obj["metadata"].get("annotations") or {}).get(OPT_OUT, "")).lower() == "false"


def owner_group(pod: Obj) -> str | None:
    """The name of the batch/v1 Job that controls `pod` (its ownerReference with `controller: true`, as the Job
    controller sets it), unless the pod opts out; None otherwise."""
    if _opted_out(pod):
        return None
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Job" and ref.get("apiVersion") == JOB_API:
            return str(ref["name"])
    return None


def job_groups(jobs: Iterable[Obj]) -> list[Obj]:
    """Each Job that has not opted out as the coscheduling PodGroup its pods form: named after the Job, of
    `minMember` its gang size, carrying the Job's uid and resourceVersion (what the snapshot's cache keys on)."""
    out: list[Obj] = []
    for job in jobs:
        meta = job["metadata"]
        size = job_gang_size(job.get("spec") or {}, int((job.get("status") or {}).get("succeeded") or 0),
                             bool((job.get("spec") or {}).get("suspend")))
        if size < 1 or _opted_out(job):
            continue
        out.append({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                    "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid", ""),
                                 "resourceVersion": meta.get("resourceVersion", ""),
                                 "annotations": {k: v for k, v in (meta.get("annotations") or {}).items()
                                                 if k.startswith("trimtab.io/")}},
                    "spec": {"minMember": size}})
    return out
