"""`trimtab compare --ray ADDRESS`: the simulations run as Ray tasks on a real (head-only) Ray cluster started here
and give byte-for-byte the same run files as the local run with the same seed, faults included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

from test_ray_cluster import RayCluster

SRC = Path(__file__).resolve().parents[1] / "src"
POLICIES = "fifo-backfill,las,sjf"


def _compare(out: Path, *extra: str) -> None:
    cmd = [sys.executable, "-m", "trimtab.cli", "compare", "--cluster", "4x8", "--workload",
           "synthetic:jobs=400,seed=5", "--seed", "3", "--faults", "node-mtbf=3d,node-mttr=2h,job-fail=0.02,seed=1",
           "--no-timing", "--policies", POLICIES, "--out-dir", str(out), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(SRC), "RAY_USAGE_STATS_ENABLED": "0"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


def test_compare_on_ray_gives_the_same_json_as_the_local_run(tmp_path: Path) -> None:
    cluster = RayCluster(tmp_path, workers=0, head_cpus=2)
    try:
        _compare(tmp_path / "ray", "--ray", cluster.address)
    finally:
        cluster.stop()
    _compare(tmp_path / "local")
    for policy in POLICIES.split(","):
        local = json.loads((tmp_path / "local" / f"{policy}.json").read_text())
        on_ray = json.loads((tmp_path / "ray" / f"{policy}.json").read_text())
        assert local["summary"]["jobs_completed"] > 0
        assert on_ray == local, policy
    summaries = {p: json.loads((tmp_path / "local" / f"{p}.json").read_text())["summary"]
                 for p in POLICIES.split(",")}
    assert len({json.dumps(s, sort_keys=True) for s in summaries.values()}) == 3, "the policies differ"
