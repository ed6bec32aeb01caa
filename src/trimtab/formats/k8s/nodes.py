"""Node documents: capacity (`nvidia.com/gpu`, cpu, memory), labels, taints and cordoning.

Owns read_node, which turns one Node document into a model Node."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from trimtab.formats.k8s.documents import GPU, Doc, gpus, quantity, str_map
from trimtab.model import Node, Resources, Taint


def read_node(doc: Doc) -> Node:
    """A Node from its status (allocatable, else capacity), labels and spec taints; `unschedulable` is the
    taint Kubernetes gives a cordoned node."""
    data = doc.data
    status = data.get("status") or {}
    spec = data.get("spec") or {}
    doc.check_keys(spec, "spec", ("taints", "unschedulable", "podCIDR", "podCIDRs", "providerID"))
    source = status.get("allocatable") or status.get("capacity")
    where = "status.allocatable" if status.get("allocatable") else "status.capacity"
    if not isinstance(source, dict):
        raise doc.error("status", "a Node needs status.capacity or status.allocatable")
    gpu_count, cpu, mem = 0, Fraction(0), Fraction(0)
    for name, value in source.items():
        fpath = f"{where}.{name}"
        if name == GPU:
            gpu_count = gpus(doc, value, fpath)
        elif name == "cpu":
            cpu = quantity(doc, value, fpath)
        elif name == "memory":
            mem = quantity(doc, value, fpath)
        elif name.startswith("nvidia.com/mig-"):
            doc.warn(fpath, "MIG slices are not modelled, ignored")
        else:
            quantity(doc, value, fpath)
    meta = data.get("metadata") or {}
    labels = str_map(doc, meta.get("labels"), "metadata.labels")
    model = labels.get("nvidia.com/gpu.product") or labels.get("gpu-type") or ""
    rack = labels.get("trimtab.io/rack") or labels.get("topology.kubernetes.io/zone") or "rack-0"
    return Node(doc.name, Resources(gpu_count, int(cpu * 1000), int(mem / 2**20)), gpu_model=model, rack=rack,
                labels=labels, taints=_taints(doc, spec))


def _taints(doc: Doc, spec: dict[str, Any]) -> tuple[Taint, ...]:
    taints = []
    for i, t in enumerate(spec.get("taints") or []):
        tpath = f"spec.taints[{i}]"
        if not isinstance(t, dict) or not t.get("key"):
            raise doc.error(tpath, "a taint needs a key")
        effect = t.get("effect", "")
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise doc.error(f"{tpath}.effect", f"must be NoSchedule, PreferNoSchedule or NoExecute, got {effect!r}")
        taints.append(Taint(str(t["key"]), str(t.get("value") or ""), effect))
    if spec.get("unschedulable"):
        taints.append(Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"))
    return tuple(taints)
