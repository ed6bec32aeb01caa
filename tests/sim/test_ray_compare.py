"""`trimtab compare --ray ADDRESS` and `trimtab tune --ray ADDRESS`: the simulations run as Ray tasks on a real
(head-only) Ray cluster started here and give byte-for-byte the same results as the local run with the same seed,
faults included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray")

from test_ray_cluster import RayCluster

SRC = Path(__file__).resolve().parents[2] / "src"
POLICIES = "fifo-backfill,las,sjf"


@pytest.fixture(scope="module")
def ray_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cluster = RayCluster(tmp_path_factory.mktemp("ray"), workers=0, head_cpus=2)
    try:
        yield cluster.address
    finally:
        cluster.stop()


def _trimtab(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "trimtab.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(SRC), "RAY_USAGE_STATS_ENABLED": "0"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def _compare(out: Path, *extra: str) -> None:
    _trimtab("compare", "--cluster", "4x8", "--workload", "synthetic:jobs=400,seed=5", "--seed", "3", "--faults",
             "node-mtbf=3d,node-mttr=2h,job-fail=0.02,seed=1", "--no-timing", "--policies", POLICIES,
             "--out-dir", str(out), *extra)


def test_compare_on_ray_gives_the_same_json_as_the_local_run(tmp_path: Path, ray_address: str) -> None:
    _compare(tmp_path / "ray", "--ray", ray_address)
    _compare(tmp_path / "local")
    for policy in POLICIES.split(","):
        local = json.loads((tmp_path / "local" / f"{policy}.json").read_text())
        on_ray = json.loads((tmp_path / "ray" / f"{policy}.json").read_text())
        assert local["summary"]["jobs_completed"] > 0
        assert on_ray == local, policy
    summaries = {p: json.loads((tmp_path / "local" / f"{p}.json").read_text())["summary"]
                 for p in POLICIES.split(",")}
    assert len({json.dumps(s, sort_keys=True) for s in summaries.values()}) == 3, "the policies differ"


def test_tune_on_ray_finds_the_same_profile_as_the_local_run(tmp_path: Path, ray_address: str) -> None:
    args = ("tune", "--cluster", "4x8", "--workload", "synthetic:jobs=300,seed=2", "--policy", "las",
            "--objective", "avg_jct_s", "--budget", "5", "--seed", "1", "--force")
    on_ray = _trimtab(*args, "--ray", ray_address, "--out", str(tmp_path / "ray.yaml"))
    local = _trimtab(*args, "--out", str(tmp_path / "local.yaml"))
    assert (tmp_path / "ray.yaml").read_text() == (tmp_path / "local.yaml").read_text()
    assert "thresholds_gpu_s" in (tmp_path / "local.yaml").read_text()
    rows = [line for line in local.splitlines() if line.startswith("│")]
    assert len(rows) == 4 and rows == [line for line in on_ray.splitlines() if line.startswith("│")]
