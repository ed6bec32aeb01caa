"""The twin (`simulate --from-cluster`) on cluster objects as the API server returns them (no cluster): running pods
kept on their nodes for what is left of their run, pending pods and gangs replayed after them under the policy.
Against a real cluster, the replay compared with what trimtab kube did live: test_kube_live.py."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the kube extra (lightkube) is not installed")

from kube_objects import gpu_node, gpu_pod, pod_group
from typer.testing import CliRunner

from trimtab.cli import app
from trimtab.kube.twin import PENDING_AT_S, cluster_twin
from trimtab.sim.run import SimConfig, simulate

SNAPSHOT_S = 1_796_119_230.0  # 2026-12-01T10:00:30Z: 30 s after kube_objects' pods were created


def objects(nodes: list[dict[str, Any]], pods: list[dict[str, Any]],
            groups: list[dict[str, Any]] = ()) -> dict[str, list[dict[str, Any]]]:
    return {"nodes": nodes, "pods": pods, "podgroups": list(groups), "volcanopodgroups": [], "priorityclasses": [],
            "namespaces": [], "resourcequotas": [], "jobs": [], "workloadpodgroups": []}


def test_running_pods_stay_on_their_nodes_and_the_pending_work_follows_in_order() -> None:
    pods = [gpu_pod("run", 8, node="n1", annotations={"trimtab.io/duration": "60s"}),
            gpu_pod("small", 4, annotations={"trimtab.io/duration": "100s"}),
            *[gpu_pod(f"g{i}", 4, group="g", created="2026-12-01T10:00:05Z") for i in range(2)],
            gpu_pod("other", 1, scheduler="default-scheduler", created="2026-12-01T10:00:10Z")]
    twin = cluster_twin(objects([gpu_node("n1"), gpu_node("n2")], pods, [pod_group("g", 2)]), SNAPSHOT_S, 500.0)
    assert [(j.id, j.submit_s, j.duration_s) for j in twin.jobs] == [
        ("default/run", 0.0, 30.0), ("default/small", PENDING_AT_S, 100.0), ("default/g", PENDING_AT_S + 0.001, 500.0),
        ("default/other", PENDING_AT_S + 0.002, 500.0)]  # every scheduler's pending pods are replayed
    assert twin.pods_of["default/g"] == ["default/g0", "default/g1"]
    runs = {j["id"]: j["runs"][0] for j in simulate(twin.nodes, twin.jobs, "fifo", SimConfig(timing=False))["jobs"]}
    assert runs["default/run"]["nodes"] == ["n1"] and runs["default/run"]["start"] == 0.0
    assert (runs["default/small"]["start"], runs["default/small"]["nodes"]) == (PENDING_AT_S, ["n2"])
    assert runs["default/g"]["start"] == 30.0  # the gang of 2 x 4 GPUs waits for the running pod's end


def test_a_running_pod_on_a_node_tainted_since_stays_and_a_job_too_large_is_not_replayed() -> None:
    node = gpu_node("n1")
    node["spec"]["taints"] = [{"key": "maintenance", "value": "soon", "effect": "NoSchedule"}]
    pods = [gpu_pod("run", 8, node="n1"), *[gpu_pod(f"big{i}", 8, group="big") for i in range(2)]]
    twin = cluster_twin(objects([node], pods, [pod_group("big", 2)]), SNAPSHOT_S, 60.0)
    assert [j.id for j in twin.jobs] == ["default/run"]
    assert twin.not_replayed == [("default/big0", "asks for 16 GPUs; the Ready nodes have 8"),
                                 ("default/big1", "asks for 16 GPUs; the Ready nodes have 8")]
    run = simulate(twin.nodes, twin.jobs, "fifo", SimConfig(timing=False))["jobs"][0]
    assert run["runs"][0]["nodes"] == ["n1"] and run["state"] == "completed"


def test_from_cluster_says_when_the_cluster_cannot_be_read(tmp_path: Any) -> None:
    result = CliRunner().invoke(app, ["simulate", "--from-cluster", "--kubeconfig", str(tmp_path / "absent")])
    assert result.exit_code != 0
    assert f"cannot read the cluster of {tmp_path / 'absent'}" in result.output
