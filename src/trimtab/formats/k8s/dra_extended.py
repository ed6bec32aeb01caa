"""Extended resources backed by DRA (KEP-5004, GA in 1.37): a container's request of an extended resource that a
DeviceClass names in `spec.extendedResourceName` (or `deviceclass.resource.kubernetes.io/<class>`, every class's
implicit name) is met, on a node that does not advertise the resource itself, by devices of that class, through
a ResourceClaim the scheduler creates for the pod.

Owns ExtendedClaim, extended_claim (the claim's requests and the pod's request mappings, named as kube-scheduler
names them: `container-<index>-request-<index of the resource among the container's sorted requests>`, a
container's index counting the init containers first), gpu_nodes and pod_devices (where the model may put a pod
asking for GPUs once the cluster has DRA devices, and what it asks of them) and claim_manifest (the
ResourceClaim to create). Init containers that are not sidecars are left out (a limit said in
docs/kubernetes.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trimtab.formats.k8s.documents import GPU, Doc, gpus, list_field, mapping
from trimtab.formats.k8s.dra import ClaimSpec, Inventory, Request
from trimtab.formats.k8s.pod_claims import PodClaims, capable_nodes

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"  # marks the claim the scheduler made for a pod


@dataclass(frozen=True, slots=True)
class ExtendedClaim:
    """The devices a pod's DRA-backed extended resources take: the claim's `spec`, (container, resource, request)
    mappings for the pod's `status.extendedResourceClaimStatus`, and the devices asked for resources other than
    nvidia.com/gpu (the model counts those among the pod's GPUs too)."""

    spec: ClaimSpec
    mappings: tuple[tuple[str, str, str], ...]
    other_devices: int


def _classes(inv: Inventory) -> dict[str, str]:
    """Extended resource name -> the DeviceClass backing it (an explicit name before an implicit one)."""
    out = {IMPLICIT_PREFIX + name: name for name in inv.classes}
    out.update({c.extended_resource: c.name for c in inv.classes.values() if c.extended_resource})
    return out


def extended_claim(doc: Doc, spec: Mapping[str, Any], path: str, inv: Inventory,
                   skip: tuple[str, ...] = ()) -> ExtendedClaim | None:
    """The claim for the extended resources of a pod spec (at `path`) that DeviceClasses back, but those of
    `skip` (the node advertises them itself); None when there are none. A container's requests are its
    `requests`, else its `limits` (as the API server defaults them)."""
    classes = {r: c for r, c in _classes(inv).items() if r not in skip} if inv.classes else {}
    if not classes:
        return None
    init = list_field(doc, spec.get("initContainers"), f"{path}.initContainers")
    containers = [(i, c, f"{path}.initContainers[{i}]") for i, c in enumerate(init)
                  if isinstance(c, dict) and c.get("restartPolicy") == "Always"]
    containers += [(len(init) + i, c, f"{path}.containers[{i}]")
                   for i, c in enumerate(list_field(doc, spec.get("containers"), f"{path}.containers"))]
    requests: list[Request] = []
    mappings: list[tuple[str, str, str]] = []
    other = 0
    for index, container, cpath in containers:
        res = mapping(doc, mapping(doc, container, cpath).get("resources"), f"{cpath}.resources")
        asked = {**mapping(doc, res.get("limits"), f"{cpath}.resources.limits"),
                 **mapping(doc, res.get("requests"), f"{cpath}.resources.requests")}
        names = sorted(asked)
        for rname in sorted(r for r in asked if r in classes):
            count = gpus(doc, asked[rname], f"{cpath}.resources.{rname}")
            if count == 0:
                continue
            request = f"container-{index}-request-{names.index(rname)}"
            requests.append(Request(request, classes[rname], count=count))
            mappings.append((str(container.get("name", "")), rname, request))
            other += count if rname != GPU else 0
    if not requests:
        return None
    return ExtendedClaim(ClaimSpec(tuple(sorted(requests, key=lambda r: r.name))), tuple(mappings), other)


def gpu_nodes(inv: Inventory, ext: ExtendedClaim | None) -> tuple[str, ...] | None:
    """The nodes a pod asking for GPUs may go to once the cluster has DRA devices: those that advertise
    nvidia.com/gpu themselves (a device plugin), and those whose devices could hold its extended claim (None: any
    node, through devices of every node)."""
    own = [n for n, count in inv.own_gpus.items() if count > 0]
    if ext is None:
        return tuple(sorted(own))
    capable = capable_nodes(inv, [ext.spec])
    return None if capable is None else tuple(sorted({*own, *capable}))


def pod_devices(doc: Doc, spec: Mapping[str, Any], path: str, inv: Inventory, claims: PodClaims | None,
                gpu_request: int) -> tuple[int, tuple[str, ...] | None]:
    """The devices the model adds to a pod's GPUs (its claims', and its DRA-backed extended resources' other than
    nvidia.com/gpu) and the nodes it may go to (None: any), given its claims and its nvidia.com/gpu request."""
    devices, nodes = (claims.gpus, claims.nodes) if claims else (0, None)
    if not inv.devices:
        return devices, nodes
    ext = extended_claim(doc, spec, path, inv)
    if not gpu_request and ext is None:
        return devices, nodes
    allowed = gpu_nodes(inv, ext)
    if allowed is not None:
        nodes = allowed if nodes is None else tuple(n for n in nodes if n in allowed)
    return devices + (ext.other_devices if ext else 0), nodes


def claim_manifest(pod: Mapping[str, Any], ext: ExtendedClaim) -> dict[str, Any]:
    """The ResourceClaim the scheduler creates for `pod`: named `<pod>-extended-resources-<suffix>` by the API
    server, controlled by the pod (so it goes with it), annotated as the pod's extended-resource claim."""
    meta = pod["metadata"]
    requests = [{"name": r.name, "exactly": {"deviceClassName": r.class_name, "allocationMode": "ExactCount",
                                             "count": r.count}} for r in ext.spec.requests]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"generateName": f"{meta['name']}-extended-resources-", "namespace": meta["namespace"],
                         "annotations": {ANNOTATION: "true"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                              "uid": meta["uid"], "controller": True}]},
            "spec": {"devices": {"requests": requests}}}
