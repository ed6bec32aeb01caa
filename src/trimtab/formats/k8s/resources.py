"""A pod's requests and limits as the API server defaults them and the ResourceQuota admission plugin counts them:
GPUs, CPU cores and memory bytes, summed over its containers and at least its largest init container's."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from trimtab.formats.k8s.documents import GPU, Doc, gpus, quantity


def pod_resources(doc: Doc, spec: dict[str, Any], path: str) -> tuple[list[Fraction], list[Fraction], dict[str, bool]]:
    """Requests and limits [gpus, cpu cores, memory bytes] of a pod: the sum over its containers, at least the
    largest init container's; and which requests and limits every container states."""
    req: list[Fraction] | None = None
    lim: list[Fraction] = []
    specified = {"requests.cpu": True, "requests.memory": True, "limits.cpu": True, "limits.memory": True}
    for i, c in enumerate(spec["containers"]):
        r, lm, has = container_resources(doc, c.get("resources") or {}, f"{path}.containers[{i}].resources")
        req, lim = (r, lm) if req is None else ([a + b for a, b in zip(req, r, strict=True)],
                                                [a + b for a, b in zip(lim, lm, strict=True)])
        for k in specified:
            specified[k] = specified[k] and has[k]
    if req is None:
        req, lim = [Fraction(0)] * 3, [Fraction(0)] * 3
    for i, c in enumerate(spec.get("initContainers") or []):
        r, lm, _ = container_resources(doc, (c or {}).get("resources") or {}, f"{path}.initContainers[{i}].resources")
        req = [max(a, b) for a, b in zip(req, r, strict=True)]
        lim = [max(a, b) for a, b in zip(lim, lm, strict=True)]
    return req, lim, specified


def container_resources(doc: Doc, res: Any, path: str) -> tuple[list[Fraction], list[Fraction], dict[str, bool]]:
    """Requests and limits [gpus, cpu cores, memory bytes] of one container. As the API server defaults them, a
    request left out equals the limit; an extended resource's request must equal its limit."""
    if not isinstance(res, dict):
        raise doc.error(path, "must be a mapping")
    doc.check_keys(res, path, ("requests", "limits", "claims"))
    out: dict[str, dict[str, Fraction]] = {}
    for part in ("requests", "limits"):
        values = res.get(part) or {}
        if not isinstance(values, dict):
            raise doc.error(f"{path}.{part}", "must be a mapping of resource names to quantities")
        parsed: dict[str, Fraction] = {}
        for name, value in values.items():
            fpath = f"{path}.{part}.{name}"
            if name == GPU:
                parsed[name] = Fraction(gpus(doc, value, fpath))
            elif name in ("cpu", "memory"):
                parsed[name] = quantity(doc, value, fpath)
            else:
                quantity(doc, value, fpath)
                doc.ignore(fpath, f"resource {name} is not modelled")
        out[part] = parsed
    req, lim = out["requests"], out["limits"]
    for name in ("cpu", "memory", GPU):
        if name in lim and name not in req:
            req[name] = lim[name]
        if name in req and name in lim and req[name] > lim[name]:
            raise doc.error(f"{path}.requests.{name}", f"request {req[name]} must be less than or equal to the "
                            f"limit {lim[name]}")
    if GPU in req and req[GPU] != lim.get(GPU, req[GPU]):
        raise doc.error(f"{path}.requests.{GPU}", "an extended resource's request must equal its limit")
    if GPU in req and GPU not in lim:
        raise doc.error(f"{path}.limits.{GPU}", "an extended resource needs a limit (requests alone are refused)")
    has = {"requests.cpu": "cpu" in req, "requests.memory": "memory" in req,
           "limits.cpu": "cpu" in lim, "limits.memory": "memory" in lim}
    requests = [req.get(GPU, Fraction(0)), req.get("cpu", Fraction(0)), req.get("memory", Fraction(0))]
    # a limit left out is unbounded for quota purposes; count it as the request
    limits = [lim.get(GPU, requests[0]), lim.get("cpu", requests[1]), lim.get("memory", requests[2])]
    return requests, limits, has
