"""The whole Philly-derived list (82,247 jobs) replays on 56x8 under las with no job lost."""

import pytest

from builders import trace_path
from trimtab.formats.cluster import load_cluster
from trimtab.formats.traces import load_trace
from trimtab.sim.run import SimConfig, simulate


@pytest.mark.slow
def test_philly_replays_whole_with_no_job_lost():
    jobs = load_trace(f"philly:{trace_path('pollux-adaptdl/simulator/traces/philly.csv')}")
    run = simulate(load_cluster("56x8"), jobs, "las", SimConfig(timing=False))
    s = run["summary"]
    assert s["jobs_submitted"] == 82_247
    assert s["jobs_lost"] == 0 and s["jobs_completed"] == 82_247
    assert 0 < s["gpu_util"] <= 1
