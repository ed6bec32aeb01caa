"""DRA documents (resource.k8s.io/v1) for the tests: device classes, slices of node-local GPUs, claim templates,
claims and pods naming them."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.example.com"
API = "resource.k8s.io/v1"


def device_class(name: str = DRIVER, expression: str = f'device.driver == "{DRIVER}"') -> dict[str, Any]:
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def gpu(name: str, **attributes: Any) -> dict[str, Any]:
    """A device; attributes as `nvlink=0`, `model="a100"`, `memory="80Gi"` (a capacity)."""
    attrs: dict[str, Any] = {}
    caps: dict[str, Any] = {}
    for key, value in attributes.items():
        if key == "memory":
            caps["memory"] = {"value": value}
        elif isinstance(value, bool):
            attrs[key] = {"bool": value}
        elif isinstance(value, int):
            attrs[key] = {"int": value}
        else:
            attrs[key] = {"string": value}
    return {"name": name, "attributes": attrs, "capacity": caps}


def resource_slice(node: str, devices: list[dict[str, Any]], *, generation: int = 1, count: int = 1,
                   name: str | None = None, pool: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceSlice", "metadata": {"name": name or f"{node}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node, **({"devices": devices} if devices else {}),
                     "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count}, **extra}}


def request(name: str = "gpus", count: int = 1, *, selectors: tuple[str, ...] = (), all_devices: bool = False,
            cls: str = DRIVER) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls}
    if all_devices:
        exactly["allocationMode"] = "All"
    else:
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": exactly}


def claim_spec(*requests: dict[str, Any], match: str | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests) or [request()]}
    if match:
        devices["constraints"] = [{"matchAttribute": match}]
    return {"devices": devices}


def template(name: str, spec: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceClaimTemplate", "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": spec}}


def claim(name: str, spec: dict[str, Any], namespace: str = "default", **status: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": spec, **({"status": status} if status else {})}


def node(name: str, gpus: int = 0) -> dict[str, Any]:
    capacity = {"cpu": "32", "memory": "256Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"allocatable": capacity}}


def pod(name: str, *, template_name: str | None = None, claim_name: str | None = None,
        namespace: str = "default", duration: str = "60s") -> dict[str, Any]:
    entry: dict[str, Any] = {"name": "gpus"}
    if template_name:
        entry["resourceClaimTemplateName"] = template_name
    if claim_name:
        entry["resourceClaimName"] = claim_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": {"trimtab.io/duration": duration}},
            "spec": {"resourceClaims": [entry],
                     "containers": [{"name": "c", "image": "i", "resources": {"claims": [{"name": "gpus"}]}}]}}
