"""The manifest reader: sorts documents by kind, reads them in dependency order, and checks the result whole.

Owns Manifests (everything a manifest set describes) and read_documents, the one entry every caller goes through
(`simulate --manifests`, `trimtab submit` and the API)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trimtab.formats import FormatError
from trimtab.formats.k8s.documents import GPU, Doc, str_map
from trimtab.formats.k8s.dra import DRA_API, DRA_KINDS, Inventory, read_inventory
from trimtab.formats.k8s.nodes import read_node
from trimtab.formats.k8s.operators import OPERATORS
from trimtab.formats.k8s.pod_claims import with_devices
from trimtab.formats.k8s.policy_objects import (
    PriorityClass,
    QueueSpec,
    Quota,
    ReservationSpec,
    read_priority_class,
    read_queue,
    read_quota,
    read_reservation,
)
from trimtab.formats.k8s.workloads import Launch, WorkloadReader
from trimtab.model import Job, Node

NAMESPACE_NAME = "kubernetes.io/metadata.name"  # the label every namespace carries (its own name)
_READ_KINDS = ("PriorityClass", "Namespace", "Node", "ResourceQuota", "Queue", "Reservation", "Pod", "PodGroup",
               "WorkloadPodGroup", "VolcanoJob", "BatchJob", "Operator", *DRA_KINDS)
_READ_KINDS_TEXT = ("trimtab reads Node, Namespace, Pod, ResourceQuota (v1), Job (batch/v1 or batch.volcano.sh), "
                    "PodGroup (coscheduling, Volcano, scheduling.k8s.io/v1beta1), Queue, PriorityClass, Reservation "
                    "(trimtab.io/v1), JobSet (jobset.x-k8s.io/v1alpha2), PyTorchJob (kubeflow.org/v1), RayCluster "
                    "and RayJob (ray.io/v1), LeaderWorkerSet (leaderworkerset.x-k8s.io/v1), and DeviceClass, "
                    f"ResourceSlice, ResourceClaim and ResourceClaimTemplate ({DRA_API})")


@dataclass(slots=True)
class Manifests:
    """Everything a set of manifests describes. `profile_args()` gives the arguments of the tenancy plugins.

    `launches[job.id]` is what the live service needs to run each job; `warnings` are printable lines;
    `unknown` holds, as FormatErrors, the unknown fields and kinds and the resources no reader models that were
    ignored (also among the warnings), for a caller that refuses them instead."""

    nodes: list[Node] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    quotas: list[Quota] = field(default_factory=list)
    queues: list[QueueSpec] = field(default_factory=list)
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    reservations: list[ReservationSpec] = field(default_factory=list)
    launches: dict[str, Launch] = field(default_factory=dict)
    inventory: Inventory = field(default_factory=Inventory)  # the DRA objects (dra.py)
    warnings: list[str] = field(default_factory=list)
    unknown: list[FormatError] = field(default_factory=list)

    def profile_args(self) -> dict[str, dict[str, Any]]:
        """Plugin arguments by plugin name, to merge into a Profile's `args`."""
        quotas = [q.as_args() for q in self.quotas]
        queues = [q.as_args() for q in self.queues]
        deserved = {q.name: max(q.deserved_gpus or 0, q.guarantee_gpus) for q in self.queues
                    if q.deserved_gpus or q.guarantee_gpus}
        return {"quota": {"quotas": quotas, "queues": queues},
                "drf": {"weights": {q.name: q.weight for q in self.queues}, **({"deserved": deserved} if deserved
                                                                                 else {})},
                "reservation": {"reservations": [r.as_args() for r in self.reservations]}}


def read_documents(docs: Iterable[tuple[str, dict[str, Any]]], *, classes: Iterable[PriorityClass] = (),
                   inventory: Inventory | None = None) -> Manifests:
    """The Manifests of (source, data) documents. `classes` are PriorityClasses the cluster already has (a
    document may not define one of them again); `inventory`, the cluster's DRA objects (instead of the documents'
    own).

    Unknown fields and kinds become warnings (and `unknown`); invalid values, a missing PriorityClass, a gang
    that is never defined or can never start, and a pod no quota can ever admit raise FormatError naming the
    document and field, as the API server or scheduler would refuse them."""
    return _Reader(docs, classes, inventory).read()


class _Reader:
    def __init__(self, docs: Iterable[tuple[str, dict[str, Any]]], classes: Iterable[PriorityClass],
                 inventory: Inventory | None) -> None:
        self.out = Manifests(priority_classes={pc.name: pc for pc in classes})
        self.inventory = inventory
        self.by_kind: dict[str, list[Doc]] = {}
        # namespace -> labels, for namespaceSelector: Namespace documents plus every namespace a document names
        self.namespaces: dict[str, dict[str, str]] = {}
        for source, data in docs:
            kind, api = data.get("kind"), data.get("apiVersion")
            meta = data.get("metadata") or {}
            if not isinstance(kind, str) or not isinstance(api, str):
                raise FormatError(source, "a manifest needs string fields apiVersion and kind")
            key = _kind_key(kind, api)
            name = meta.get("name") if isinstance(meta, dict) else None
            if key in _READ_KINDS and (not isinstance(name, str) or not name):
                raise FormatError(source, "metadata.name is required", field="metadata.name")
            ns = str(meta.get("namespace") or "default") if isinstance(meta, dict) else "default"
            label = f"{source} {kind} {name}" if name else f"{source} {kind}"
            doc = Doc(label, data, kind, api, str(name or ""), ns, self.out.warnings, self.out.unknown)
            self.by_kind.setdefault(key, []).append(doc)
            if key != "Namespace":
                self.namespaces.setdefault(ns, {NAMESPACE_NAME: ns})

    def read(self) -> Manifests:
        out, by_kind = self.out, self.by_kind
        default_class = self._read_classes(by_kind.pop("PriorityClass", []))
        for doc in by_kind.pop("Namespace", []):
            labels = str_map(doc, (doc.data.get("metadata") or {}).get("labels"), "metadata.labels")
            self.namespaces[doc.name] = {**labels, NAMESPACE_NAME: doc.name}
        dra = [doc for kind in DRA_KINDS for doc in by_kind.pop(kind, [])]
        inv = out.inventory = self.inventory if self.inventory is not None else read_inventory(dra)
        out.warnings += inv.warnings
        out.nodes += [with_devices(read_node(doc), inv) for doc in by_kind.pop("Node", [])]
        out.quotas += [q for q in (read_quota(doc) for doc in by_kind.pop("ResourceQuota", [])) if q is not None]
        out.queues += [read_queue(doc) for doc in by_kind.pop("Queue", [])]
        out.reservations += [read_reservation(doc) for doc in by_kind.pop("Reservation", [])]
        workloads = WorkloadReader(out.priority_classes, default_class, self.namespaces, inv)
        workloads.read_pods_and_groups(by_kind.pop("Pod", []), by_kind.pop("PodGroup", []),
                                       by_kind.pop("WorkloadPodGroup", []))
        for doc in by_kind.pop("VolcanoJob", []):
            workloads.read_volcano_job(doc)
        for doc in by_kind.pop("BatchJob", []):
            workloads.read_batch_job(doc)
        for doc in by_kind.pop("Operator", []):
            workloads.read_operator(doc)
        for rest in by_kind.values():
            for doc in rest:
                doc.ignore("kind", f"unsupported kind {doc.kind!r} with apiVersion {doc.api!r}; {_READ_KINDS_TEXT}")
        _check_quotas(out.quotas, workloads)
        names = [j.id for j in workloads.jobs]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise FormatError("manifests", f"workloads defined twice: {', '.join(dup[:3])}")
        out.jobs = sorted(workloads.jobs, key=lambda j: (j.submit_s, j.id))
        out.launches = workloads.launches
        return out

    def _read_classes(self, docs: list[Doc]) -> PriorityClass | None:
        """Reads the PriorityClass documents; returns the global default class, if one is marked."""
        classes = self.out.priority_classes
        for doc in docs:
            pc = read_priority_class(doc)
            if pc.name in classes:
                raise doc.error("metadata.name", f"PriorityClass {pc.name} is defined twice")
            classes[pc.name] = pc
        defaults = [pc for pc in classes.values() if pc.global_default]
        if len(defaults) > 1:
            raise FormatError("manifests", "more than one PriorityClass has globalDefault: true: "
                              + ", ".join(pc.name for pc in defaults))
        return defaults[0] if defaults else None


def _kind_key(kind: str, api: str) -> str:
    """The kind as the reader dispatches on it; a kind of an API group trimtab does not read gets its own key."""
    group = api.split("/")[0] if "/" in api else ""
    if (api, kind) in OPERATORS:
        return "Operator"
    if kind == "Job" and group == "batch.volcano.sh":
        return "VolcanoJob"
    if kind == "Job":
        return "BatchJob" if api == "batch/v1" else f"Job of {api}"
    if kind == "PodGroup" and api == "scheduling.k8s.io/v1beta1":
        return "WorkloadPodGroup"
    if kind == "PodGroup" and group not in ("scheduling.volcano.sh", "scheduling.x-k8s.io",
                                            "scheduling.sigs.k8s.io"):
        return f"PodGroup of {api}"
    if kind == "Queue" and group != "scheduling.volcano.sh":
        return f"Queue of {api}"
    if kind == "Reservation" and api != "trimtab.io/v1":
        return f"Reservation of {api}"
    if kind in DRA_KINDS and api != DRA_API:
        return f"{kind} of {api}"
    if kind in ("Node", "Pod", "ResourceQuota", "Namespace") and api != "v1":
        return f"{kind} of {api}"
    if kind == "PriorityClass" and group != "scheduling.k8s.io":
        return f"PriorityClass of {api}"
    return kind


def _check_quotas(quotas: list[Quota], workloads: WorkloadReader) -> None:
    """What the ResourceQuota admission plugin refuses: a pod in a namespace whose quota tracks cpu or memory
    that does not say that request or limit, and a workload that exceeds a hard limit on its own."""
    by_ns: dict[str, list[Quota]] = {}
    for q in quotas:
        by_ns.setdefault(q.namespace, []).append(q)
    for job in workloads.jobs:
        source = workloads.sources[job.id]
        specified = workloads.specified[job.id]
        for q in by_ns.get(job.tenant, []):
            tracked = {"requests.cpu": q.cpu_milli, "requests.memory": q.mem_mib,
                       "limits.cpu": q.limit_cpu_milli, "limits.memory": q.limit_mem_mib}
            for key, hard in tracked.items():
                if hard is not None and not specified.get(key, True):
                    raise FormatError(source, f"forbidden by ResourceQuota {q.namespace}/{q.name}: must "
                                      f"specify {key} for every container", field=key)
            limits = job.task_limits or job.task
            need = {"pods": (q.pods, job.tasks), f"requests.{GPU}": (q.gpus, job.gpus),
                    "requests.cpu": (q.cpu_milli, job.tasks * job.task.cpu_milli),
                    "requests.memory": (q.mem_mib, job.tasks * job.task.mem_mib),
                    "limits.cpu": (q.limit_cpu_milli, job.tasks * limits.cpu_milli),
                    "limits.memory": (q.limit_mem_mib, job.tasks * limits.mem_mib)}
            for key, (hard, asked) in need.items():
                if hard is not None and asked > hard:
                    raise FormatError(source, f"exceeds ResourceQuota {q.namespace}/{q.name} on its own: "
                                      f"{key} asked {asked}, hard limit {hard}; it could never be admitted",
                                      field=key)
