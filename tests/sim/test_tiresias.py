"""Tiresias's simulator is the reference for fifo and las: on its 60-job trace and one 8-GPU node our average JCT
is the one it computes (SymbioticLab/Tiresias simulator/run_sim.py, --scheme=count)."""

import itertools

import pytest

from builders import trace_path
from trimtab.formats.cluster import load_cluster
from trimtab.formats.traces import load_trace
from trimtab.sim.run import SimConfig, simulate

# Average JCT in seconds computed by Tiresias's run_sim.py on 60_job.csv with 1 switch x 1 node x 8 GPUs,
# --scheme=count: --schedule=fifo, dlas-gpu, and shortest (its preemptive shortest-remaining-time-first).
TIRESIAS_AVG_JCT_S = {"fifo": 1556.483333, "las": 715.266667, "srtf": 519.866667}
# Tiresias suspends a preempted job and resumes it where it stopped, at no cost.
TIRESIAS_WORLD = SimConfig(checkpoint_s=0, restart_s=0, timing=False)


@pytest.mark.parametrize("policy", sorted(TIRESIAS_AVG_JCT_S))
def test_average_jct_matches_tiresias(policy):
    jobs = load_trace(f"tiresias:{trace_path('tiresias/simulator/60_job.csv')}")
    run = simulate(load_cluster("1x8"), jobs, policy, TIRESIAS_WORLD)
    assert run["summary"]["jobs_lost"] == 0
    assert run["summary"]["avg_jct_s"] == pytest.approx(TIRESIAS_AVG_JCT_S[policy], abs=1e-3)


def test_fifo_is_strict_head_of_line_on_the_trace():
    """Under fifo no job starts before a job submitted earlier has started (Tiresias's blocking queue)."""
    jobs = load_trace(f"tiresias:{trace_path('tiresias/simulator/60_job.csv')}")
    run = simulate(load_cluster("1x8"), jobs, "fifo", TIRESIAS_WORLD)
    starts = [(j["submit"], j["runs"][0]["start"]) for j in run["jobs"]]
    starts.sort()
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(starts))


def test_las_demotes_past_3250_gpu_seconds_and_new_jobs_preempt():
    """Two jobs checked by hand against Tiresias's dlas-gpu: an 8-GPU job of 1000 s passes 3250 GPU-seconds after
    406.25 s; a 2-GPU job arriving then takes 2 of its GPUs, so it stops and waits for them."""
    from builders import job

    jobs = [job("big", 8, submit_s=0, duration_s=1000), job("small", 2, submit_s=500, duration_s=3000)]
    run = simulate(load_cluster("1x8"), jobs, "las", TIRESIAS_WORLD)
    by_id = {j["id"]: j for j in run["jobs"]}
    assert by_id["big"]["preemptions"] == 1
    assert by_id["small"]["runs"][0]["start"] == 500
    assert by_id["small"]["end"] == 3500
    # big runs 0..500, waits while small holds 2 of the 8 GPUs, resumes at 3500 for its remaining 500 s
    assert by_id["big"]["end"] == 4000
