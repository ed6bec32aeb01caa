"""The `dra` scenario of kube_side_by_side.py: --dra-nodes KWOK nodes, each publishing a ResourceSlice of 8 GPUs by
hand (two NVLink domains of four, no nvidia.com/gpu), and --dra-pods pods whose claims come from templates of 8, 2
and 1 devices (a tenth, a quarter and the rest of the pods, created in that order; about 90% of the devices),
plus one pod whose template asks a pair on one NVLink domain (matchAttribute).

Measured for each scheduler in its turn on a fresh control plane: seconds from the first pod created to the last
bound, and checked from the API once all are bound (or the timeout passed): every bound pod's claim is allocated
with devices of its own node and reserved for it, and no device is in two claims."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

DRIVER = "gpu.example.com"
API = "resource.k8s.io/v1"


def _template(name: str, count: int, match: bool = False) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER,
                                                                          "count": count}}]}
    if match:
        devices["constraints"] = [{"matchAttribute": f"{DRIVER}/nvlink"}]
    return {"apiVersion": API, "kind": "ResourceClaimTemplate", "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": {"devices": devices}}}


def _slice(node: str) -> dict[str, Any]:
    devices = [{"name": f"gpu-{i}", "attributes": {"nvlink": {"int": i // 4}}} for i in range(8)]
    return {"apiVersion": API, "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpus"},
            "spec": {"driver": DRIVER, "nodeName": node, "devices": devices,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}}


def _pod(name: str, scheduler: str, template: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": scheduler, "restartPolicy": "Never",
                     "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"claims": [{"name": "gpus"}]}}]}}


def publish(env: Any, nodes: int) -> None:
    """The DeviceClass, one slice per node (gpu-<i>-0) and the templates."""
    env.apply({"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": DRIVER},
               "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
    for i in range(nodes):
        env.apply(_slice(f"gpu-{i}-0"))
    for name, count, match in (("gpus-8", 8, False), ("gpus-2", 2, False), ("gpus-1", 1, False),
                               ("linked-2", 2, True)):
        env.apply(_template(name, count, match))


def dra(args: argparse.Namespace, scheduler: str, workdir: Path, side: Any) -> dict[str, Any]:
    """One run (`side` is the kube_side_by_side module: its cluster, watch and client)."""
    env, proc = side.start_cluster(workdir, scheduler, args.dra_nodes, 0, args.policy, before_probe=publish)
    try:
        watch = side.PodWatch(env)
        name = side.SCHEDULER_NAME[scheduler]
        eights, twos = args.dra_pods // 10, args.dra_pods // 4
        kinds = ["gpus-8"] * eights + ["gpus-2"] * twos + ["gpus-1"] * (args.dra_pods - eights - twos - 1)
        kinds.append("linked-2")
        pods = [_pod(f"d-{i}", name, t) for i, t in enumerate(kinds)]
        first = time.monotonic()
        watch.create(pods)
        deadline = time.monotonic() + args.timeout_s
        while len([p for p in pods if p["metadata"]["name"] in watch.bound]) < len(pods) \
                and time.monotonic() < deadline:
            time.sleep(0.5)
        with watch.lock:
            bound = {n: t for n, t in watch.bound.items() if n.startswith("d-")}
        checks = check(env)
        return {"bench": "kube_dra", "scheduler": scheduler, "nodes": args.dra_nodes, "pods": len(pods),
                "devices_asked": 8 * eights + 2 * twos + len(kinds) - eights - twos + 1,
                "devices": 8 * args.dra_nodes, "pods_bound": len(bound),
                "bind_all_s": round(max(bound.values()) - first, 2) if bound else None, **checks}
    finally:
        if proc is not None:
            side.stop_process(proc)
        env.stop()


def check(env: Any) -> dict[str, Any]:
    """From the API: bound pods whose claim is not allocated on their node or not reserved for them; devices in
    more than one claim; whether the linked pair shares its NVLink domain."""
    pods = {p["metadata"]["name"]: p for p in env.request("GET", "/api/v1/namespaces/default/pods")["items"]}
    claims = {c["metadata"]["name"]: c for c in
              env.request("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims")["items"]}
    wrong, taken, linked = 0, [], None
    for pod in pods.values():
        if not pod["spec"].get("resourceClaims"):
            continue  # the probe
        node = pod["spec"].get("nodeName")
        statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
        claim = claims.get(statuses[0].get("resourceClaimName")) if statuses else None
        results = (((claim or {}).get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") \
            or []
        taken += [(r["pool"], r["device"]) for r in results]
        if node and (not results or any(r["pool"] != node for r in results) or pod["metadata"]["uid"] not in
                     [r["uid"] for r in (claim or {}).get("status", {}).get("reservedFor") or []]):
            wrong += 1
        if pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == "linked-2" and results:
            linked = len({int(r["device"].split("-")[1]) // 4 for r in results}) == 1
    return {"bound_without_own_reserved_devices": wrong, "devices_in_two_claims": len(taken) - len(set(taken)),
            "linked_pair_one_domain": linked}
