"""The upstream Workload API on a real control plane with its feature gates on (GenericWorkload, beta in 1.37,
and WorkloadWithJob; `scheduling.k8s.io/v1beta1` served): the PodGroup a pod's `spec.schedulingGroup` names is
its gang, of the gang policy's minCount; and a Job's pods, which the Job controller then puts in a PodGroup of
its own making, bind whole."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kube_env import KubeEnv, bin_dir, missing_binaries, run_trimtab_kube, stop_process
from kube_objects import gpu_pod
from test_kube_failover import pool
from test_kube_live import create_pod, get_pod, job_pods, scheduled_condition, wait_for

pytestmark = pytest.mark.kube

GATES = ("GenericWorkload", "WorkloadWithJob")
GROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups"


@pytest.fixture(scope="module")
def workload_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeEnv]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"no {', '.join(missing)} in {bin_dir()}: build the control plane with `make kube-env`")
    env = KubeEnv(tmp_path_factory.mktemp("kube-env-workload"), crds=False, feature_gates=GATES,
                  runtime_config=("scheduling.k8s.io/v1beta1=true",))
    env.start()
    try:
        env.wait_served(GROUPS)
        env.wait_service_account()
        yield env
    finally:
        env.stop()


def upstream_group(env: KubeEnv, name: str, min_count: int) -> None:
    env.request("POST", GROUPS, {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                                 "metadata": {"name": name},
                                 "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}})


def test_the_podgroup_a_pod_names_is_its_gang_and_a_jobs_pods_bind_whole(workload_env: KubeEnv) -> None:
    env = workload_env
    taint, spec = pool("wl")
    env.wait_nodes_ready(env.add_gpu_nodes(2, prefix="wl", labels={"pool": "wl"}, taints=[taint]))
    proc = run_trimtab_kube(env, "--scheduler-name", "trimtab-wl", log_name="trimtab-wl")
    member: dict[str, Any] = {"scheduler": "trimtab-wl", **spec}
    try:
        upstream_group(env, "pair", 2)
        for i in range(2):
            create_pod(env, gpu_pod(f"pair-{i}", 4, schedulingGroup={"podGroupName": "pair"}, **member))
        wait_for("the pair bound", lambda: all(get_pod(env, f"pair-{i}")["spec"].get("nodeName") for i in range(2)))
        upstream_group(env, "huge", 3)  # 3 x 8 GPUs on the 8 left of 16: never, and none of it bound
        for i in range(3):
            create_pod(env, gpu_pod(f"huge-{i}", 8, schedulingGroup={"podGroupName": "huge"}, **member))
        for i in range(3):
            condition = wait_for(f"huge-{i} Unschedulable", lambda i=i: scheduled_condition(env, f"huge-{i}"))
            assert condition["message"].startswith("waiting for room for the gang's 3 members"), condition
        assert not any(get_pod(env, f"huge-{i}")["spec"].get("nodeName") for i in range(3))
        for name in ("pair-0", "pair-1", "huge-0", "huge-1", "huge-2"):
            env.request("DELETE", f"/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0")

        template = gpu_pod("x", 4, **member)["spec"]
        template.pop("priority")
        env.apply({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "wl-job"},
                   "spec": {"completionMode": "Indexed", "completions": 3, "parallelism": 3,
                            "template": {"spec": template}}})
        pods = wait_for("the Job's 3 pods", lambda: len(names := job_pods(env, "wl-job")) == 3 and names)
        groups = {get_pod(env, p)["spec"].get("schedulingGroup", {}).get("podGroupName") for p in pods}
        print(f"the Job's pods are in PodGroup {groups}")
        assert len(groups) == 1 and None not in groups, groups  # the Job controller made the group
        wait_for("the Job's pods bound", lambda: all(get_pod(env, p)["spec"].get("nodeName") for p in pods),
                 timeout_s=60)
    finally:
        stop_process(proc)
