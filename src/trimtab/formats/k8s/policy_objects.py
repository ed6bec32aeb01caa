"""The policy kinds of a manifest set: PriorityClass, ResourceQuota, Volcano Queue and trimtab Reservation.

Owns their model (PriorityClass, Quota, QueueSpec, ReservationSpec) and the readers that build them from Docs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trimtab.formats.k8s.documents import GPU, Doc, gpus, int_field, quantity, seconds

SYSTEM_CLASSES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}
MAX_USER_PRIORITY = 1_000_000_000
QUOTA_KEYS = {  # ResourceQuota hard key -> (dimension, meaning of the request it counts)
    "pods": "pods", "cpu": "requests.cpu", "requests.cpu": "requests.cpu", "memory": "requests.memory",
    "requests.memory": "requests.memory", "limits.cpu": "limits.cpu", "limits.memory": "limits.memory",
    f"requests.{GPU}": f"requests.{GPU}",
}


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    global_default: bool = False
    preemption_policy: str = "PreemptLowerPriority"


@dataclass(frozen=True, slots=True)
class Quota:
    """One ResourceQuota's hard limits in a namespace (None: not limited). CPU in millicores, memory in MiB."""

    namespace: str
    name: str
    pods: int | None = None
    gpus: int | None = None
    cpu_milli: int | None = None
    mem_mib: int | None = None
    limit_cpu_milli: int | None = None
    limit_mem_mib: int | None = None

    def as_args(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A Volcano Queue (scheduling.volcano.sh/v1beta1): its share weight, a hard cap (`capability_gpus`, None:
    none), the GPUs it deserves (`deserved_gpus`, lent while idle and reclaimed; None: its share by weight), the
    GPUs reserved for it (`guarantee_gpus`, never lent) and whether jobs it runs on borrowed capacity may be
    reclaimed."""

    name: str
    weight: int = 1
    capability_gpus: int | None = None
    reclaimable: bool = True
    deserved_gpus: int | None = None
    guarantee_gpus: int = 0

    def as_args(self) -> dict[str, Any]:
        return {"name": self.name, "weight": self.weight, "capability_gpus": self.capability_gpus,
                "reclaimable": self.reclaimable, "deserved_gpus": self.deserved_gpus,
                "guarantee_gpus": self.guarantee_gpus}


@dataclass(frozen=True, slots=True)
class ReservationSpec:
    """An operator's reservation: `gpus` GPUs (of `gpu_model`, or on `nodes`) for `tenant` (or one `job`) from
    `start_s` to `end_s`."""

    name: str
    gpus: int
    start_s: float
    end_s: float
    tenant: str = ""
    job: str = ""
    gpu_model: str = ""
    nodes: tuple[str, ...] = ()

    def as_args(self) -> dict[str, Any]:
        return {"name": self.name, "gpus": self.gpus, "start_s": self.start_s, "end_s": self.end_s,
                "tenant": self.tenant, "job": self.job, "gpu_model": self.gpu_model, "nodes": list(self.nodes)}


def read_priority_class(doc: Doc) -> PriorityClass:
    data = doc.data
    doc.check_keys(data, "", ("apiVersion", "kind", "metadata", "value", "globalDefault", "description",
                              "preemptionPolicy"))
    value = data.get("value")
    if isinstance(value, bool) or not isinstance(value, int):
        raise doc.error("value", f"expected an integer, got {value!r}")
    if value > MAX_USER_PRIORITY and doc.name not in SYSTEM_CLASSES:
        raise doc.error("value", f"must be no greater than {MAX_USER_PRIORITY} (larger values are reserved "
                        "for system classes)")
    policy = data.get("preemptionPolicy", "PreemptLowerPriority")
    if policy not in ("PreemptLowerPriority", "Never"):
        raise doc.error("preemptionPolicy", f"must be PreemptLowerPriority or Never, got {policy!r}")
    default = data.get("globalDefault", False)
    if not isinstance(default, bool):
        raise doc.error("globalDefault", f"expected true or false, got {default!r}")
    return PriorityClass(doc.name, value, default, policy)


def read_quota(doc: Doc) -> Quota | None:
    """The quota of a ResourceQuota; None for a scoped one (not modelled, a warning)."""
    spec = doc.data.get("spec") or {}
    doc.check_keys(spec, "spec", ("hard", "scopes", "scopeSelector"))
    if spec.get("scopes") or spec.get("scopeSelector"):
        doc.warn("spec.scopes", "scoped quotas are not modelled; this ResourceQuota is ignored")
        return None
    hard = spec.get("hard") or {}
    if not isinstance(hard, dict):
        raise doc.error("spec.hard", "must be a mapping")
    values: dict[str, int] = {}
    for key, value in hard.items():
        fpath = f"spec.hard.{key}"
        meaning = QUOTA_KEYS.get(key)
        q = quantity(doc, value, fpath)
        if meaning is None:
            doc.warn(fpath, f"quota on {key} is not modelled, ignored")
            continue
        if meaning in ("pods", f"requests.{GPU}"):
            if q.denominator != 1:
                raise doc.error(fpath, f"must be a whole number, got {value!r}")
            number = int(q)
        elif meaning.endswith(".cpu"):
            number = math.floor(q * 1000)
        else:
            number = math.floor(q / 2**20)
        values[meaning] = min(values.get(meaning, number), number)
    return Quota(doc.namespace, doc.name, pods=values.get("pods"), gpus=values.get(f"requests.{GPU}"),
                 cpu_milli=values.get("requests.cpu"), mem_mib=values.get("requests.memory"),
                 limit_cpu_milli=values.get("limits.cpu"), limit_mem_mib=values.get("limits.memory"))


def read_queue(doc: Doc) -> QueueSpec:
    """A Volcano Queue's GPU fields (`nvidia.com/gpu` of `capability`, `deserved` and `guarantee.resource`).
    A `parent` is warned about and ignored: hierarchical queues are not modelled."""
    spec = doc.data.get("spec") or {}
    doc.check_keys(spec, "spec", ("weight", "capability", "reclaimable", "deserved", "guarantee", "parent",
                                  "priority", "type", "affinity", "extendClusters"))
    weight = int_field(doc, spec.get("weight", 1), "spec.weight", 1)
    guarantee = spec.get("guarantee") or {}
    if not isinstance(guarantee, dict):
        raise doc.error("spec.guarantee", "must be a mapping with a resource list under `resource`")
    capability, deserved, reserved = (_queue_gpus(doc, value, path) for value, path in (
        (spec.get("capability"), "spec.capability"), (spec.get("deserved"), "spec.deserved"),
        (guarantee.get("resource"), "spec.guarantee.resource")))
    reclaimable = spec.get("reclaimable", True)
    if not isinstance(reclaimable, bool):
        raise doc.error("spec.reclaimable", f"expected true or false, got {reclaimable!r}")
    if spec.get("parent") not in (None, "", "root"):
        doc.warn("spec.parent", "ignored: trimtab does not model hierarchical queues; this queue shares the "
                 "cluster with every other queue")
    return QueueSpec(doc.name, weight, capability, reclaimable, deserved, reserved or 0)


def _queue_gpus(doc: Doc, value: Any, path: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise doc.error(path, "must be a mapping of resource names to quantities")
    return gpus(doc, value[GPU], f"{path}.{GPU}") if GPU in value else None


def read_reservation(doc: Doc) -> ReservationSpec:
    spec = doc.data.get("spec")
    if not isinstance(spec, dict):
        raise doc.error("spec", "a Reservation needs a spec mapping")
    doc.check_keys(spec, "spec", ("gpus", "gpuModel", "nodes", "owner", "start", "end"))
    owner = spec.get("owner") or {}
    if not isinstance(owner, dict) or not (owner.get("namespace") or owner.get("job")):
        raise doc.error("spec.owner", "a Reservation needs an owner: {namespace: ...} or {job: ns/name}")
    nodes = tuple(str(n) for n in spec.get("nodes") or ())
    gpu_count = int_field(doc, spec.get("gpus", 0), "spec.gpus", 0)
    if gpu_count == 0 and not nodes:
        raise doc.error("spec.gpus", "reserve at least one GPU or name nodes")
    start = seconds(doc, spec.get("start", 0), "spec.start")
    end = seconds(doc, spec["end"], "spec.end") if "end" in spec else math.inf
    if end <= start:
        raise doc.error("spec.end", "the window must end after it starts")
    return ReservationSpec(doc.name, gpu_count, start, end, str(owner.get("namespace") or ""),
                           str(owner.get("job") or ""), str(spec.get("gpuModel") or ""), nodes)
