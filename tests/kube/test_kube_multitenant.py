"""The multi-tenant example (tests/scenarios/examples/issue_examples.yaml: a ResourceQuota of 2 GPUs in
my-namespace, the `high-priority` PriorityClass, a Volcano PodGroup of 4 with that class, a pod with required node
affinity to v100 nodes, a pod with nodeSelector gpu-present: "true") applied to a real API server with KWOK
nodes behaves live under `trimtab kube` as `trimtab simulate --manifests` says: the same pods placed at once on the
same nodes, the same ones waiting, for the same reason. The comparison is printed as a table."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_env import ROOT, KubeEnv, needs_crds, run_trimtab_kube, stop_process
from test_kube_live import get_pod, scheduled_condition, wait_for

pytestmark = pytest.mark.kube

EXAMPLE = ROOT / "tests/scenarios/examples/issue_examples.yaml"
TEAM = "my-namespace"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # Volcano's: the example's PodGroup is Volcano's
POLICY = "priority"  # honours the PriorityClass of the PodGroup


def team_pod(name: str, gpus: int, **extra: Any) -> dict[str, Any]:
    """A pod of my-namespace: its quota limits CPU and memory too, so the pod states both (the API server refuses
    a pod without them in a namespace whose quota limits them)."""
    limits = {"cpu": "500m", "memory": "512Mi", **({"nvidia.com/gpu": gpus} if gpus else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": TEAM, **extra.pop("meta", {})},
            "spec": {"containers": [{"name": "main", "image": "trainer", "resources": {"limits": limits}}], **extra}}


def scenario() -> list[dict[str, Any]]:
    """The example's documents as written, and what a live cluster needs besides: the PodGroup in the namespace of
    the pods that name it, served as the v1beta1 the Volcano CRD serves; the gang's 4 members (CPU only, so the
    gang fits the 2-GPU quota); two training pods of the team, 2 GPUs then 1, the second beyond the quota; every
    pod with this test's scheduler name and a run time for the simulation."""
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    (group,) = [d for d in docs if d["kind"] == "PodGroup"]
    group["apiVersion"] = "scheduling.volcano.sh/v1beta1"
    group["metadata"]["namespace"] = TEAM
    name = group["metadata"]["name"]
    docs += [team_pod(f"{name}-{i}", 0, priorityClassName="high-priority",
                      meta={"annotations": {GROUP_ANNOTATION: name}}) for i in range(4)]
    docs += [team_pod("train-a", 2), team_pod("train-b", 1)]
    for doc in docs:
        if doc["kind"] == "Pod":
            doc["spec"]["schedulerName"] = "trimtab"
            doc["metadata"].setdefault("annotations", {})["trimtab.io/duration"] = "1h"
    return docs


def simulated(env: KubeEnv, docs: list[dict[str, Any]], tmp_path: Path) -> dict[str, Any]:
    """`trimtab simulate --manifests` of the live cluster's nodes and `docs`: its run's jobs by id."""
    nodes = [{"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": n["metadata"]["name"], "labels": n["metadata"].get("labels") or {}},
              "spec": {"taints": n["spec"].get("taints") or []},
              "status": {k: n["status"][k] for k in ("capacity", "allocatable")}}
             for n in env.request("GET", "/api/v1/nodes")["items"]]
    manifests = tmp_path / "multitenant.yaml"
    manifests.write_text(yaml.safe_dump_all([*nodes, *docs]))
    sim = subprocess.run([sys.executable, "-m", "trimtab.cli", "simulate", "--manifests", str(manifests), "--policy",
                          POLICY, "--no-timing", "--out", str(tmp_path / "run.json")], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert sim.returncode == 0, sim.stderr
    return {job["id"]: job for job in json.loads((tmp_path / "run.json").read_text())["jobs"]}


def test_the_multi_tenant_example_runs_live_as_simulate_says(kube_env: KubeEnv, tmp_path: Path) -> None:
    needs_crds(kube_env)  # the example's gang is a Volcano PodGroup
    docs = scenario()
    kube_env.request("PATCH", "/api/v1/nodes/gpu-0", {"metadata": {"labels": {"gpu-type": "nvidia-tesla-v100"}}},
                     content_type="application/merge-patch+json")  # the label value the example's affinity names
    kube_env.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM}})
    kube_env.wait_service_account(TEAM)
    # everything before the quota (the API server would refuse train-b beyond it) and before trimtab starts, so
    # that trimtab's first cycle sees what the simulation sees at time 0
    for doc in sorted(docs, key=lambda d: d["kind"] == "ResourceQuota"):
        kube_env.apply(copy.deepcopy(doc))
    jobs = simulated(kube_env, docs, tmp_path)
    pods_of = {job_id: [job_id] for job_id in jobs}
    gang = next(f"{TEAM}/{d['metadata']['name']}" for d in docs if d["kind"] == "PodGroup")
    pods_of[gang] = [f"{gang}-{i}" for i in range(4)]
    at_once = {job_id for job_id, job in jobs.items() if job["runs"] and job["runs"][0]["start"] == 0}
    proc = run_trimtab_kube(kube_env, "--policy", POLICY, log_name="trimtab-mt")

    def live(pod_id: str) -> tuple[str | None, str]:
        ns, name = pod_id.split("/")
        condition = scheduled_condition(kube_env, name, ns) or {}
        return get_pod(kube_env, name, ns)["spec"].get("nodeName"), condition.get("message", "")

    try:
        for job_id, pods in pods_of.items():
            for pod in pods:
                wait_for(f"{pod} {'bound' if job_id in at_once else 'waiting'}", lambda pod=pod, job_id=job_id: (
                    bool(live(pod)[0]) if job_id in at_once else bool(live(pod)[1])), timeout_s=60)
        rows, sim_node_of = [], {}
        for job_id, pods in sorted(pods_of.items()):
            run = jobs[job_id]["runs"][0]
            sim_nodes = [n for n, k in zip(run["nodes"], run["node_tasks"], strict=True) for _ in range(k)]
            causes = sorted(jobs[job_id]["wait_by_cause_s"])
            for pod, sim_node in zip(pods, sim_nodes, strict=True):
                sim_node_of[pod] = sim_node
                node, message = live(pod)
                rows.append((pod, sim_node if job_id in at_once else f"waits ({', '.join(causes)})",
                             node or "waits", "" if node else message))
        print(f"\n{'pod':<26} {'simulate --manifests':<22} {'trimtab kube':<13} live reason")
        for row in rows:
            print(f"{row[0]:<26} {row[1]:<22} {row[2]:<13} {row[3]}")
        for job_id, pods in pods_of.items():
            for pod in pods:
                node, message = live(pod)
                if job_id in at_once:
                    assert node == sim_node_of[pod], f"{pod}: simulate starts it on {sim_node_of[pod]} at " \
                                                     f"once, live it is on {node or '-'} ({message})"
                else:
                    assert not node, f"{pod}: simulate holds it back, live it is bound to {node}"
                    causes = sorted(jobs[job_id]["wait_by_cause_s"])
                    assert any(message.startswith(f"{cause}: ") for cause in causes), (message, causes)
        assert at_once == {"default/my-pod", "default/gpu-pod", gang, f"{TEAM}/train-a"}
        assert live(f"{TEAM}/train-b")[1] == f"quota: ResourceQuota {TEAM}/compute-resources: gpus would be 3 > 2"
        assert live("default/my-pod")[0] == "gpu-0"
        assert live("default/gpu-pod")[0].startswith("a100-")
    finally:
        stop_process(proc)
