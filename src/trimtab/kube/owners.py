"""Gangs from the workloads users submit, with no PodGroup written by hand: the pods of a batch/v1 Job, found
through their `ownerReferences`, and the pods of an upstream PodGroup (`scheduling.k8s.io/v1beta1`, the Workload
API's runtime group, which the Job controller makes with the WorkloadWithJob feature), named by their
`spec.schedulingGroup.podGroupName`.

Owns `owner_group` (the group a pod belongs to through its owner or its scheduling group) and `owner_groups` (those
owners as the coscheduling PodGroups their pods form). Precedence: a PodGroup the pod names by label or
annotation, then its scheduling group, then its Job. The annotation `trimtab.io/gang: "false"` on the pod (its
Job's pod template) or on the Job opts a Job out, each pod then a job of its own; an upstream PodGroup of the
`basic` policy is no gang either. docs/kubernetes.md says what each kind gives a gang."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trimtab.formats.k8s.workloads import GANG as OPT_OUT
from trimtab.formats.k8s.workloads import job_gang_size

Obj = dict[str, Any]

JOB_API = "batch/v1"
WORKLOAD_GROUP_API = "scheduling.k8s.io/v1beta1"  # PodGroup of the Workload API (GenericWorkload, beta in 1.37)


def _opted_out(obj: Obj) -> bool:
    return str((obj["metadata"].get("annotations") or {}).get(OPT_OUT, "")).lower() == "false"


def owner_group(pod: Obj) -> str | None:
    """The name of the upstream PodGroup `pod` names in `spec.schedulingGroup.podGroupName`, else of the
    batch/v1 Job that controls it (its ownerReference with `controller: true`, as the Job controller sets it)
    unless the pod opts out; None otherwise."""
    named = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    if named:
        return str(named)
    if _opted_out(pod):
        return None
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Job" and ref.get("apiVersion") == JOB_API:
            return str(ref["name"])
    return None


def _size(owner: Obj) -> int:
    """How many pods of `owner` form its gang (0: none, its pods are on their own)."""
    spec = owner.get("spec") or {}
    if owner.get("kind") == "PodGroup":
        gang = (spec.get("schedulingPolicy") or {}).get("gang")
        return int(gang.get("minCount") or 0) if isinstance(gang, dict) else 0
    if _opted_out(owner):
        return 0
    return job_gang_size(spec, int((owner.get("status") or {}).get("succeeded") or 0), bool(spec.get("suspend")))


def owner_groups(owners: Iterable[Obj]) -> list[Obj]:
    """Each owner (a batch/v1 Job, or an upstream PodGroup, by `kind`) whose pods form a gang, as the coscheduling
    PodGroup the reader reads: named after the owner, of `minMember` its gang size (a Job: what its controller
    runs at once; an upstream PodGroup: its gang policy's `minCount`), carrying the owner's uid and
    resourceVersion (what the snapshot's cache keys on)."""
    out: list[Obj] = []
    for owner in owners:
        meta = owner["metadata"]
        size = _size(owner)
        if size < 1:
            continue
        out.append({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                    "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid", ""),
                                 "resourceVersion": meta.get("resourceVersion", ""),
                                 "annotations": {k: v for k, v in (meta.get("annotations") or {}).items()
                                                 if k.startswith("trimtab.io/")}},
                    "spec": {"minMember": size}})
    return out
