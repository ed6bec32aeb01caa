"""Fixtures of the kube tests that need a real control plane: the environment (skipped, saying why, when the
binaries are not built) and a `trimtab kube` process scheduling for it; and, when such a test fails, the tails of
the `trimtab kube` logs it wrote, in the failure's report."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
import yaml
from kube_env import ROOT, KubeEnv, bin_dir, missing_binaries, run_trimtab_kube, stop_process

LOG_TAIL_LINES = 40
GPU_NODES = 3  # kwok nodes of 8 GPUs; v100 on gpu-0, a100 on the others


@pytest.fixture(scope="module", params=["crds", "stock"])
def kube_env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeEnv]:
    """The control plane of a module's stories, twice: with the PodGroup CRDs of both kinds installed, and stock
    (no CRDs, the usual cluster), where the gangs come from Jobs."""
    missing = missing_binaries()
    if missing:
        pytest.skip(f"no {', '.join(missing)} in {bin_dir()}: build the control plane with `make kube-env` "
                    "(needs Go and the Go module proxy)")
    env = KubeEnv(tmp_path_factory.mktemp(f"kube-env-{request.param}"), crds=request.param == "crds")
    env.start()
    try:
        if env.crds:
            for crd in yaml.safe_load_all((ROOT / "deploy/kubernetes/podgroup-crds.yaml").read_text()):
                env.apply(crd)
            for path in ("/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
                         "/apis/scheduling.volcano.sh/v1beta1/podgroups"):
                env.wait_served(path)
        env.add_gpu_nodes(1, labels={"gpu-type": "v100", "nvidia.com/gpu.product": "v100"})
        env.add_gpu_nodes(GPU_NODES - 1, prefix="a100", labels={"gpu-type": "a100", "gpu-present": "true"})
        env.wait_nodes_ready(["gpu-0", *(f"a100-{i}" for i in range(GPU_NODES - 1))])
        env.wait_service_account()
        yield env
    finally:
        env.stop()


@pytest.fixture(scope="module")
def trimtab_kube(kube_env: KubeEnv) -> Iterator[subprocess.Popen[bytes]]:
    """`trimtab kube` under its default policy, leader election on, scheduling `schedulerName: trimtab`."""
    proc = run_trimtab_kube(kube_env)
    yield proc
    stop_process(proc)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that used the control plane gets the last lines of every `trimtab kube` log (trimtab*.log
    in the environment's folder) written while it ran, as sections of its report: what trimtab saw and did."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    env = getattr(item, "funcargs", {}).get("kube_env")
    if report.when != "call" or not report.failed or not isinstance(env, KubeEnv):
        return
    for log in sorted(env.dir.glob("trimtab*.log")):
        if log.stat().st_mtime >= call.start:
            tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            report.sections.append((f"{log.name} (last {LOG_TAIL_LINES} lines)", "\n".join(tail)))
