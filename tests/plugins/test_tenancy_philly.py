"""The Philly-derived job list with its virtual clusters as tenants (equal queue weights) on 56x8 GPUs: how quota
queues with and without borrowing, drf with reclaim, and the tenants profile change each VC's wait."""

import sys
from pathlib import Path

import numpy as np
import pytest

from builders import trace_path
from trimtab.formats.cluster import load_cluster
from trimtab.formats.traces import load_trace
from trimtab.sim.compare import compare
from trimtab.sim.run import SimConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from tenancy_philly import vc_profiles  # the benchmark's policies: the same runs, on fewer jobs

JOBS = 5000  # the first 5,000 jobs (12 VCs) keep this under a minute; the full list has 15 VCs


def vc_waits(run: dict) -> np.ndarray:
    return np.array([t["avg_wait_s"] for t in run["summary"]["tenants"].values() if t["avg_wait_s"] is not None])


@pytest.mark.slow
def test_philly_vcs_as_tenants():
    jobs = load_trace(f"philly:{trace_path('pollux-adaptdl/simulator/traces/philly.csv')}")[:JOBS]
    runs = compare(load_cluster("56x8"), jobs, vc_profiles(jobs), SimConfig(timing=False), workers=2)
    for name, run in runs.items():
        w = vc_waits(run)
        print(f"{name:18} jain={run['summary']['fairness_jain']} avg_wait_s={run['summary']['avg_wait_s']:.0f} "
              f"vc_wait_s min/median/max={w.min():.0f}/{np.median(w):.0f}/{w.max():.0f} "
              f"preemptions={run['summary']['preemptions']}")
        assert run["summary"]["jobs_lost"] == 0
    fifo, drf = vc_waits(runs["fifo-backfill"]), vc_waits(runs["drf"])
    assert np.median(drf) * 10 < np.median(fifo), "drf serves the typical VC far sooner"
    assert drf.max() < fifo.max(), "and the worst-served VC sooner too"
    assert runs["queues-borrow"]["summary"]["avg_wait_s"] == runs["fifo-backfill"]["summary"]["avg_wait_s"], \
        "with borrowing and no reclaim, equal queues change nothing for FIFO"
    assert vc_waits(runs["queues-no-borrow"]).max() > fifo.max(), "without borrowing a busy VC waits on idle GPUs"
