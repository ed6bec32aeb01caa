"""Gangs from the workloads users submit, with no PodGroup written by hand: the pods of a batch/v1 Job, a
PyTorchJob or a RayCluster (a RayJob's), found through their `ownerReferences`; those of a JobSet and each group
of a LeaderWorkerSet, through the labels their controllers give the pods; and the pods of an upstream PodGroup
(`scheduling.k8s.io/v1beta1`, the Workload API's runtime group, which the Job controller makes with the
WorkloadWithJob feature), named by their `spec.schedulingGroup.podGroupName`.

Owns `owner_names` (the gangs a pod may belong to through its owners or its scheduling group), `owner_groups`
(those owners as the coscheduling PodGroups their pods form, sized as operators.py sizes them in manifests) and
OWNER_INFORMERS (the informers whose objects are owners).
Precedence: a PodGroup the pod names by label or annotation, then its scheduling group, then its owners (a
JobSet before the Job it made). The
annotation `trimtab.io/gang: "false"` on the pod (its template) or on the owner opts it out, each pod then a job
of its own; an upstream PodGroup of the `basic` policy is no gang either. docs/kubernetes.md says what each kind
gives a gang."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trimtab.formats import FormatError
from trimtab.formats.k8s.documents import Doc
from trimtab.formats.k8s.operators import (
    JOBSET_NAME,
    JOBSET_RJOB,
    LWS_GROUP,
    LWS_NAME,
    OPERATORS,
    job_gang_size,
    operator_gangs,
)
from trimtab.formats.k8s.workloads import GANG as OPT_OUT

Obj = dict[str, Any]

JOB_API = "batch/v1"
_OWNER_KINDS = {("Job", JOB_API), ("PyTorchJob", "kubeflow.org/v1"), ("RayCluster", "ray.io/v1")}
WORKLOAD_GROUP_API = "scheduling.k8s.io/v1beta1"  # PodGroup of the Workload API (GenericWorkload, beta in 1.37)
OWNER_INFORMERS = ("jobs", "workloadpodgroups", "jobsets", "pytorchjobs", "rayclusters", "leaderworkersets")


def _opted_out(obj: Obj) -> bool:
    return str((obj["metadata"].get("annotations") or {}).get(OPT_OUT, "")).lower() == "false"


def owner_names(pod: Obj) -> tuple[str, ...]:
    """The gangs `pod` may belong to through its owners, in precedence (the first one the snapshot has as a gang
    is its): the upstream PodGroup it names in `spec.schedulingGroup.podGroupName`; else, unless the pod opts
    out, its JobSet's gangs (whole, then its replicated job's; from the labels the JobSet controller writes), the
    workload that controls it (its ownerReference with `controller: true`: a batch/v1 Job, PyTorchJob or
    RayCluster), and its LeaderWorkerSet group (by labels)."""
    named = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    if named:
        return (str(named),)
    if _opted_out(pod):
        return ()
    labels = pod["metadata"].get("labels") or {}
    names: list[str] = []
    if labels.get(JOBSET_NAME):
        names.append(labels[JOBSET_NAME])
        if labels.get(JOBSET_RJOB):
            names.append(f"{labels[JOBSET_NAME]}-{labels[JOBSET_RJOB]}")
    names += [str(ref["name"]) for ref in pod["metadata"].get("ownerReferences") or []
              if ref.get("controller") and (ref.get("kind"), ref.get("apiVersion")) in _OWNER_KINDS]
    if LWS_NAME in labels and LWS_GROUP in labels:
        names.append(f"{labels[LWS_NAME]}-{labels[LWS_GROUP]}")
    return tuple(names)


def owner_sizes(owner: Obj) -> list[tuple[str, int]]:
    """The gangs `owner` stands for: (name, how many of its pods form it; 0: none, its pods are on their own)."""
    spec, name = owner.get("spec") or {}, owner["metadata"]["name"]
    if owner.get("kind") == "PodGroup":
        gang = (spec.get("schedulingPolicy") or {}).get("gang")
        return [(name, int(gang.get("minCount") or 0) if isinstance(gang, dict) else 0)]
    if (owner.get("apiVersion"), owner.get("kind")) in OPERATORS:
        meta = owner["metadata"]
        doc = Doc(f"{owner['kind']} {meta['namespace']}/{name}", owner, owner["kind"], owner["apiVersion"], name,
                  meta["namespace"], [], [])
        try:
            gangs = [(g.name, g.size) for g in operator_gangs(doc)]
        except FormatError:  # the API server took it; a field trimtab cannot read: its pods go on their own
            return [(name, 0)]
        return [(n, 0) for n, _ in gangs] if _opted_out(owner) else gangs
    if _opted_out(owner):
        return [(name, 0)]
    return [(name, job_gang_size(spec, int((owner.get("status") or {}).get("succeeded") or 0),
                                 bool(spec.get("suspend"))))]


def owner_groups(owners: Iterable[Obj]) -> list[Obj]:
    """Each gang of the owners (a batch/v1 Job, an upstream PodGroup or an operator's workload, by `kind`) as the
    coscheduling PodGroup the reader reads: named after the gang, of `minMember` its size (a Job: what its
    controller runs at once; an upstream PodGroup: its gang policy's `minCount`; an operator's: operators.py),
    carrying the owner's uid and resourceVersion (what the snapshot's cache keys on)."""
    out: list[Obj] = []
    for owner in owners:
        meta = owner["metadata"]
        for name, size in owner_sizes(owner):
            if size >= 1:
                out.append(_group_doc(meta, name, size))
    return out


def _group_doc(meta: Obj, name: str, size: int) -> Obj:
    """The coscheduling PodGroup of one gang of an owner (its uid, resourceVersion and trimtab annotations)."""
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith("trimtab.io/")}
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": meta["namespace"], "uid": meta.get("uid", ""),
                         "resourceVersion": meta.get("resourceVersion", ""), "annotations": annotations},
            "spec": {"minMember": size}}
