"""Volcano Queues on a real control plane (the Queue CRD installed, no Volcano): two queues that deserve 8 of the
16 GPUs each, under `drf`. team-a is idle: team-b borrows all 16. team-a's pods come: within a cycle plus the
evictions, team-b's borrowed pods (only those, 8 of them) are evicted through the Eviction API and team-a's bind.
Both then want more: each holds its 8, and nothing more is evicted; each Queue's status.allocated says 8."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml
from kube_env import ROOT, KubeEnv, bin_dir, missing_binaries, run_trimtab_kube, stop_process

pytestmark = pytest.mark.kube
SCHEDULER = "trimtab-queues"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeEnv]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"no {', '.join(missing)} in {bin_dir()}: build the control plane with `make kube-env`")
    kube = KubeEnv(tmp_path_factory.mktemp("kube-env-queues"), crds=False)
    kube.start()
    try:
        for crd in yaml.safe_load_all((ROOT / "deploy/kubernetes/volcano-queue-crd.yaml").read_text()):
            kube.apply(crd)
        kube.wait_served("/apis/scheduling.volcano.sh/v1beta1/queues")
        for team in ("team-a", "team-b"):
            kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}})
            kube.apply({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": team},
                        "spec": {"weight": 1, "deserved": {"nvidia.com/gpu": "8"}}})
            kube.wait_service_account(team)
        kube.wait_nodes_ready(kube.add_gpu_nodes(2, prefix="q"))
        proc = run_trimtab_kube(kube, "--scheduler-name", SCHEDULER, "--policy", "drf", log_name="trimtab-queues")
        try:
            yield kube
        finally:
            stop_process(proc)
    finally:
        kube.stop()


def create(env: KubeEnv, team: str, names: range) -> None:
    for i in names:
        env.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{team}-{i}", "namespace": team},
                   "spec": {"schedulerName": SCHEDULER, "containers": [{"name": "main", "image": "busybox",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})


def held(env: KubeEnv) -> dict[str, int]:
    """Bound pods of each team, not being deleted."""
    out = {}
    for team in ("team-a", "team-b"):
        pods = env.request("GET", f"/api/v1/namespaces/{team}/pods")["items"]
        out[team] = sum(1 for p in pods if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp"))
    return out


def wait_held(env: KubeEnv, want: dict[str, int], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (now := held(env)) != want:
        assert time.monotonic() < deadline, f"held {now}, want {want}"
        time.sleep(0.5)


def count_pods(env: KubeEnv, team: str) -> int:
    return len(env.request("GET", f"/api/v1/namespaces/{team}/pods")["items"])


def test_borrow_then_reclaim_then_each_holds_what_it_deserves(env: KubeEnv) -> None:
    create(env, "team-b", range(16))
    wait_held(env, {"team-a": 0, "team-b": 16})  # team-a idle: its 8 are lent
    create(env, "team-a", range(8))
    wait_held(env, {"team-a": 8, "team-b": 8})  # team-b's 8 borrowed ones evicted, team-a's bound
    assert count_pods(env, "team-b") == 8  # bare pods evicted are gone; the 8 within its share stay
    create(env, "team-a", range(8, 12))
    create(env, "team-b", range(16, 20))
    time.sleep(5)  # both want more: each holds its deserved 8, no one is evicted
    assert held(env) == {"team-a": 8, "team-b": 8}
    assert count_pods(env, "team-b") == 12
    deadline = time.monotonic() + 30
    while (allocated := {team: ((env.request("GET", f"/apis/scheduling.volcano.sh/v1beta1/queues/{team}")
                                 .get("status") or {}).get("allocated") or {}).get("nvidia.com/gpu")
                         for team in ("team-a", "team-b")}) != {"team-a": "8", "team-b": "8"}:
        assert time.monotonic() < deadline, allocated  # each Queue's status says what it holds
        time.sleep(0.5)
