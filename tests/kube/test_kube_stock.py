"""trimtab kube on the clusters teams run, with and without the PodGroup CRDs (the kube_env fixture gives both):
it becomes ready and binds plain pods, and the pods of batch/v1 Jobs are gangs with no PodGroup written, so two
Jobs that fit only one at a time never deadlock each other half-bound. Each test has its scheduler name and a
tainted pool of nodes of its own."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import pytest
from kube_env import KubeEnv, free_port, run_trimtab_kube, stop_process
from kube_objects import gpu_pod
from test_kube_failover import pool
from test_kube_live import create_pod, get_pod, job_pods, wait_for

pytestmark = pytest.mark.kube


def test_plain_pods_bind_and_readyz_does_not_wait_for_absent_kinds(kube_env: KubeEnv) -> None:
    taint, spec = pool("plain")
    kube_env.wait_nodes_ready(kube_env.add_gpu_nodes(1, gpus=4, prefix="plain", labels={"pool": "plain"},
                                                     taints=[taint]))
    port = free_port()
    proc = run_trimtab_kube(kube_env, "--scheduler-name", "trimtab-plain", "--endpoints", f"127.0.0.1:{port}",
                            log_name="trimtab-plain")
    try:
        wait_for("/readyz 200", lambda: _ready(port))
        names = [f"plain-{i}" for i in range(4)]
        for name in names:
            create_pod(kube_env, gpu_pod(name, 1, scheduler="trimtab-plain", **spec))
        nodes = wait_for("the four pods bound", lambda: all(n := [get_pod(kube_env, p)["spec"].get("nodeName")
                                                                   for p in names]) and n)
        assert nodes == ["plain-0"] * 4
    finally:
        stop_process(proc)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def test_two_jobs_that_fit_one_at_a_time_each_bind_whole_and_both_complete(kube_env: KubeEnv) -> None:
    """Two Indexed Jobs of 3 pods x 4 GPUs (no PodGroup), created together on 2 x 8 GPUs: pod by pod, the first
    pods of both would be bound and each Job would wait for GPUs the other holds. As gangs, one Job is bound
    whole and runs 6 s; the other starts once enough of those pods have completed. Sampled every 0.2 s: a Job's
    pods are never seen partly bound for longer than its binding takes, and both Jobs complete."""
    taint, spec = pool("jobs")
    kube_env.wait_nodes_ready(kube_env.add_gpu_nodes(2, prefix="jobs", labels={"pool": "jobs"}, taints=[taint]))
    proc = run_trimtab_kube(kube_env, "--scheduler-name", "trimtab-jobs", "--policy", "fifo", log_name="trimtab-jobs")
    template = gpu_pod("x", 4, scheduler="trimtab-jobs", **spec)["spec"]
    template.pop("priority")
    try:
        for job in ("job-a", "job-b"):
            kube_env.apply({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job},
                            "spec": {"completionMode": "Indexed", "completions": 3, "parallelism": 3,
                                     "template": {"metadata": {"annotations": {"trimtab.io/duration": "6s"}},
                                                  "spec": template}}})
        first_bound: dict[str, float] = {}
        whole: dict[str, float] = {}
        deadline = time.monotonic() + 120
        while not all(_complete(kube_env, job) for job in ("job-a", "job-b")):
            assert time.monotonic() < deadline, f"both Jobs complete within 120 s: {first_bound}, {whole}"
            for job in ("job-a", "job-b"):
                bound = _bound(kube_env, job)
                if bound:
                    first_bound.setdefault(job, time.monotonic())
                if bound == 3:
                    whole.setdefault(job, time.monotonic())
            time.sleep(0.2)
        assert sorted(whole) == ["job-a", "job-b"]
        for job in whole:
            assert whole[job] - first_bound[job] < 5.0, f"{job} partly bound for {whole[job] - first_bound[job]} s"
        # 2 x 12 GPUs on 16: the second waits for pods of the first to complete, 6 s after they started
        assert max(first_bound.values()) - min(whole.values()) > 3.0, (first_bound, whole)
    finally:
        stop_process(proc)


def _bound(env: KubeEnv, job: str) -> int:
    """How many of a Job's pods are bound, finished ones included."""
    return sum(1 for name in job_pods(env, job) if get_pod(env, name)["spec"].get("nodeName"))


def _complete(env: KubeEnv, job: str) -> Any:
    status = env.request("GET", f"/apis/batch/v1/namespaces/default/jobs/{job}").get("status") or {}
    return any(c["type"] == "Complete" and c["status"] == "True" for c in status.get("conditions") or [])


def test_the_credit_configmap_is_created_then_patched_and_read_back(kube_env: KubeEnv) -> None:
    """What kube/credit.py writes through the API server: a ConfigMap created on the first write (404 to the
    merge patch), patched after, one key read back; an absent one reads as None."""
    from trimtab.kube.api import KubeApi

    api = KubeApi.connect(str(kube_env.kubeconfig), "trimtab-credit-test")
    assert api.read_config("kube-system", "trimtab-credit-test-credit", "credit.json") is None
    api.write_config("kube-system", "trimtab-credit-test-credit", "credit.json", '{"version":1,"jobs":{}}')
    api.write_config("kube-system", "trimtab-credit-test-credit", "credit.json", '{"version":1,"jobs":{"a":[1,2]}}')
    assert api.read_config("kube-system", "trimtab-credit-test-credit", "credit.json") == \
        '{"version":1,"jobs":{"a":[1,2]}}'
