"""A pod's ResourceClaims as the model sees them: the devices it still needs (its claims not yet allocated) and the
nodes that could give them, and the devices a node adds to its GPUs.

Owns PodClaims, pod_claims (resolving `spec.resourceClaims`: a claim by name, or a template's claim, generated
by the claim controller and named in `status.resourceClaimStatuses`) and with_devices. The model counts every DRA
device as one GPU of its node (a partitioned GPU as many of its partitions as fit at once); the live allocator
(dra_alloc.py) decides which devices.
docs/kubernetes.md (DRA) says what this leaves out."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trimtab.formats.k8s.affinity import NodeTerm
from trimtab.formats.k8s.documents import Doc, list_field, mapping
from trimtab.formats.k8s.dra import Claim, ClaimSpec, Inventory
from trimtab.formats.k8s.dra_alloc import allocate, devices_for, model_gpus
from trimtab.model import Node

_CAPABLE_CACHE: dict[tuple[object, str], tuple[str, ...] | None] = {}
_CAPABLE_CACHE_MAX = 4096


@dataclass(frozen=True, slots=True)
class PodClaims:
    """`gpus`: devices its unallocated claims ask for; `nodes`: the nodes that can hold them all and where its
    allocated claims are (None: any node); `claims`: (pod claim name, claim or None when a template's claim is
    still to be made in simulation, its spec)."""

    gpus: int = 0
    nodes: tuple[str, ...] | None = None
    claims: tuple[tuple[str, Claim | None, ClaimSpec], ...] = ()


def pod_claims(doc: Doc, spec: Mapping[str, Any], status: Mapping[str, Any] | None, path: str,
               inv: Inventory) -> PodClaims:
    """The claims of a pod (spec at `path`). `status` None reads a pod of a manifest, whose template claims are
    still to be made; a live pod's template claim must be named in its status, or it waits (FormatError saying
    so, as kube-scheduler keeps such a pod out of its queue)."""
    entries = list_field(doc, spec.get("resourceClaims"), f"{path}.resourceClaims")
    generated = {str(s.get("name")): s.get("resourceClaimName")
                 for s in list_field(doc, (status or {}).get("resourceClaimStatuses"), "status.resourceClaimStatuses")
                 if isinstance(s, dict)}
    resolved: list[tuple[str, Claim | None, ClaimSpec]] = []
    for i, entry in enumerate(entries):
        epath = f"{path}.resourceClaims[{i}]"
        entry = mapping(doc, entry, epath)
        name = entry.get("name")
        by_name, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        if not isinstance(name, str) or not name or (by_name is None) == (template is None):
            raise doc.error(epath, "a pod claim needs a name and exactly one of resourceClaimName and "
                            "resourceClaimTemplateName")
        if template is not None and status is None:
            tspec = inv.templates.get((doc.namespace, str(template)))
            if tspec is None:
                raise doc.error(f"{epath}.resourceClaimTemplateName",
                                f"ResourceClaimTemplate {doc.namespace}/{template} does not exist")
            resolved.append((name, None, tspec))
            continue
        claim_name = by_name if by_name is not None else generated.get(name)
        if claim_name is None:
            raise doc.error(f"{epath}.resourceClaimTemplateName", f"waiting for the ResourceClaim of template "
                            f"{template} to be created (pod status.resourceClaimStatuses)")
        claim = inv.claims.get((doc.namespace, str(claim_name)))
        if claim is None:
            raise doc.error(epath, f"waiting for ResourceClaim {doc.namespace}/{claim_name} to be created")
        if claim.deleting:
            raise doc.error(epath, f"ResourceClaim {doc.namespace}/{claim_name} is being deleted")
        resolved.append((name, claim, claim.spec))
    return _demand(doc, inv, tuple(resolved))


def _demand(doc: Doc, inv: Inventory, resolved: tuple[tuple[str, Claim | None, ClaimSpec], ...]) -> PodClaims:
    pinned = {c.node for _, c, _ in resolved if c is not None and c.allocated is not None and c.node}
    if len(pinned) > 1:
        raise doc.error("spec.resourceClaims", f"its claims are allocated on different nodes: {sorted(pinned)}")
    specs = [s for _, c, s in resolved if c is None or c.allocated is None]
    nodes: tuple[str, ...] | None = tuple(pinned) if pinned else None
    if specs:
        capable = capable_nodes(inv, specs)
        nodes = capable if nodes is None else (tuple(n for n in nodes if capable is None or n in capable))
    return PodClaims(sum(devices_for(s) for s in specs), nodes, resolved)


def capable_nodes(inv: Inventory, specs: list[ClaimSpec]) -> tuple[str, ...] | None:
    """The nodes whose devices could hold every claim of `specs` if none were in use (None: every node, through
    devices of all nodes). Cached by the inventory's `devices_key` and the specs."""
    key = (inv.devices_key, repr(specs))
    if key in _CAPABLE_CACHE:
        return _CAPABLE_CACHE[key]
    if "" in inv.devices and not isinstance(allocate(inv, specs, "\0none", set()), str):
        result: tuple[str, ...] | None = None
    else:
        result = tuple(n for n in sorted(inv.devices) if n and not isinstance(allocate(inv, specs, n, set()), str))
    if len(_CAPABLE_CACHE) >= _CAPABLE_CACHE_MAX:
        _CAPABLE_CACHE.clear()
    _CAPABLE_CACHE[key] = result
    return result


def restrict(terms: tuple[NodeTerm, ...], nodes: tuple[str, ...] | None) -> tuple[NodeTerm, ...]:
    """Required node affinity `terms` (ORed) ANDed with "the node is one of `nodes`" (None: no restriction)."""
    if nodes is None:
        return terms
    only = ("field:metadata.name", "In", nodes)
    return tuple((*term, only) for term in terms) if terms else ((only,),)


def with_devices(node: Node, inv: Inventory) -> Node:
    """The node with its DRA devices counted among its GPUs; records its own GPUs in `inv.own_gpus`."""
    inv.own_gpus[node.name] = node.capacity.gpus
    extra = model_gpus(inv, inv.devices[node.name]) if node.name in inv.devices else 0
    if not extra:
        return node
    return dataclasses.replace(node, capacity=dataclasses.replace(node.capacity, gpus=node.capacity.gpus + extra))


def held_devices(pod_uid: str, claims: list[Claim]) -> int:
    """Devices a bound pod holds: those of its allocated claims that it is the first reservation of (a shared
    claim counts once), or that are reserved for no one."""
    return sum(len(c.allocated or ()) for c in claims
               if c.allocated and (not c.reserved_for or c.reserved_for[0] == pod_uid))
