"""The embedded synthetic workload: deterministic for a seed, Philly-shaped (sizes, durations, tenants, day/night
arrivals), offering the asked load to the asked cluster, and a spec parser whose errors say what is wrong."""

from __future__ import annotations

import csv
import math
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import trace_path
from trimtab.sim.workload import (
    HOUR_RATE,
    JOB_TYPES,
    MAX_DURATION_S,
    SIZE_CLASS_MAX_GPUS,
    TENANTS,
    TRACE_SIZE_JOBS,
    TRACE_TENANT_JOBS,
    offered_load,
    parse_workload_spec,
    synthetic,
)

PHILLY = "pollux-adaptdl/simulator/traces/philly.csv"


def test_same_seed_gives_the_same_jobs_and_another_seed_other_jobs():
    """Runs are reproducible from the seed alone; changing it changes the workload."""
    assert synthetic(500, seed=3) == synthetic(500, seed=3)
    assert synthetic(500, seed=3) != synthetic(500, seed=4)
    assert [j.duration_s for j in synthetic(500, seed=3)] != [j.duration_s for j in synthetic(500, seed=4)]


def test_jobs_are_sorted_start_at_zero_and_are_gangs_of_one_gpu_tasks():
    """Submissions are in order with the first at 0.0; ids follow that order; a G-GPU job is G one-GPU tasks."""
    jobs = synthetic(3000, seed=1)
    submits = [j.submit_s for j in jobs]
    assert submits[0] == 0.0
    assert submits == sorted(submits)
    assert [j.id for j in jobs] == [f"s{i:06d}" for i in range(3000)]
    assert all(j.task.gpus == 1 and j.gpus == j.tasks for j in jobs)
    assert all(1 <= j.duration_s <= MAX_DURATION_S for j in jobs)


def test_gpu_count_mix_matches_the_trace_table():
    """On 20,000 jobs each GPU count's share is within 4 standard errors (plus a hair) of the trace's."""
    n = 20_000
    counts = Counter(j.gpus for j in synthetic(n, seed=11, cluster_gpus=128))
    total = sum(TRACE_SIZE_JOBS.values())
    assert set(counts) <= set(TRACE_SIZE_JOBS)
    for gpus, trace_jobs in TRACE_SIZE_JOBS.items():
        p = trace_jobs / total
        assert abs(counts[gpus] / n - p) <= 4 * math.sqrt(p * (1 - p) / n) + 2e-4, gpus


@pytest.mark.parametrize("cluster_gpus", [1, 6, 8, 16, 64])
def test_no_job_is_wider_than_the_cluster(cluster_gpus):
    """Sizes above the cluster are left out and the rest renormalised, so every job can run."""
    jobs = synthetic(5000, seed=2, cluster_gpus=cluster_gpus)
    assert max(j.gpus for j in jobs) <= cluster_gpus
    one_gpu_share = sum(j.gpus == 1 for j in jobs) / len(jobs)
    fitting = {g: c for g, c in TRACE_SIZE_JOBS.items() if g <= cluster_gpus}
    assert one_gpu_share == pytest.approx(fitting[1] / sum(fitting.values()), abs=0.015)


@pytest.mark.parametrize(
    ("load", "cluster_gpus"),
    [(1.0, 64), (0.5, 64), (1.5, 16), (0.8, 256), (2.0, 1024)],
)
def test_offered_load_is_what_was_asked(load, cluster_gpus):
    """sum(gpus x duration) / (cluster GPUs x submission span) is within 10% of `load` on a large sample."""
    jobs = synthetic(20_000, seed=5, load=load, cluster_gpus=cluster_gpus)
    assert offered_load(jobs, cluster_gpus) == pytest.approx(load, rel=0.10)


def test_submissions_follow_the_day_night_profile():
    """Hour-of-day counts over whole days track the 24 calibrated rates (t=0 is midnight of the profile, and with
    dense arrivals the first job is a few seconds after it)."""
    jobs = synthetic(50_000, seed=9, cluster_gpus=2048)
    submit_s = np.array([j.submit_s for j in jobs])
    whole_days = int(submit_s[-1] // 86_400)
    assert whole_days >= 5
    submit_s = submit_s[submit_s < whole_days * 86_400]
    per_hour = np.bincount((submit_s % 86_400 // 3600).astype(int), minlength=24)
    assert per_hour / per_hour.mean() == pytest.approx(np.array(HOUR_RATE) / np.mean(HOUR_RATE), rel=0.12)


def test_tenants_keeps_the_biggest_teams():
    """`tenants=N` keeps team-a .. the N-th team; the biggest submits most jobs, in the trace's order."""
    assert {j.tenant for j in synthetic(2000, seed=0, tenants=1)} == {"team-a"}
    counts = Counter(j.tenant for j in synthetic(20_000, seed=0, tenants=4))
    assert set(counts) == set(TENANTS[:4])
    share_a = TRACE_TENANT_JOBS[0] / sum(TRACE_TENANT_JOBS[:4])
    assert counts["team-a"] / 20_000 == pytest.approx(share_a, abs=0.03)
    assert counts["team-a"] > counts["team-b"] > counts["team-c"] > counts["team-d"]


def test_users_belong_to_their_tenant_and_the_first_user_is_the_busiest():
    """Each tenant has `users_per_tenant` users with Zipf-like activity; job types come from the small model list."""
    jobs = synthetic(10_000, seed=4, users_per_tenant=3)
    assert all(j.user.startswith(j.tenant + "-user") for j in jobs)
    users_a = Counter(j.user for j in jobs if j.tenant == "team-a")
    assert set(users_a) == {"team-a-user1", "team-a-user2", "team-a-user3"}
    assert users_a["team-a-user1"] > users_a["team-a-user2"] > users_a["team-a-user3"]
    assert {j.job_type for j in jobs} <= {name for pair in JOB_TYPES for name in pair}
    assert all(j.job_type in ("cifar10", "ncf") for j in jobs if j.gpus * j.duration_s < 3600)
    assert all(j.job_type == "imagenet" for j in jobs if j.gpus * j.duration_s >= 100 * 3600)


def test_max_duration_caps_every_job():
    jobs = synthetic(5000, seed=6, max_duration_s=3600)
    assert max(j.duration_s for j in jobs) == 3600


def test_zero_jobs_is_an_empty_workload():
    assert synthetic(0) == []


@settings(max_examples=25, deadline=None)
@given(
    jobs=st.integers(0, 300),
    seed=st.integers(0, 2**32),
    load=st.floats(0.05, 4.0),
    cluster_gpus=st.integers(1, 512),
    tenants=st.one_of(st.none(), st.integers(1, 15)),
)
def test_invariants_hold_for_any_arguments(jobs, seed, load, cluster_gpus, tenants):
    """Whatever the arguments: sorted, first at 0, every job fits, only the kept tenants, durations in range, and
    the measured offered load never below the asked one."""
    out = synthetic(jobs, seed, load=load, cluster_gpus=cluster_gpus, tenants=tenants)
    assert len(out) == jobs
    submits = [j.submit_s for j in out]
    assert submits == sorted(submits)
    assert not out or submits[0] == 0.0
    assert all(j.gpus <= cluster_gpus for j in out)
    assert {j.tenant for j in out} <= set(TENANTS[: tenants or len(TENANTS)])
    assert all(1 <= j.duration_s <= MAX_DURATION_S for j in out)
    if len(out) >= 2 and submits[-1] > 0:
        # the arrival window is exactly work / (cluster_gpus x load) and the submission span lies inside it
        assert offered_load(out, cluster_gpus) >= load * (1 - 1e-6)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("synthetic", {}),
        ("synthetic:", {}),
        ("synthetic:jobs=5000,seed=7,load=0.8", {"jobs": 5000, "seed": 7, "load": 0.8}),
        (" synthetic : jobs = 10 , cluster_gpus = 32 ", {"jobs": 10, "cluster_gpus": 32}),
        ("synthetic:tenants=3,users_per_tenant=2,max_duration_s=86400", {"tenants": 3, "users_per_tenant": 2,
                                                                         "max_duration_s": 86400.0}),
        ("synthetic:seed=3,priorities=0.1:1000,0.3:100", {"seed": 3, "priorities": ((0.1, 1000), (0.3, 100))}),
    ],
)  # fmt: skip
def test_spec_parses_to_synthetic_keyword_arguments(spec, expected):
    kwargs = parse_workload_spec(spec)
    assert kwargs == expected
    assert all(type(v) is type(expected[k]) for k, v in kwargs.items())
    assert synthetic(**{"jobs": 20, **kwargs}) == synthetic(**{"jobs": 20, **kwargs})


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        ("synthetic:jobz=5", ["'jobz'", "valid keys: jobs, seed, load"]),
        ("synthetic:jobs=5,gpus=8", ["'gpus'", "cluster_gpus"]),
        ("synthetic:jobs=many", ["jobs='many'", "not an integer", "valid keys"]),
        ("synthetic:load=high", ["load='high'", "not a number"]),
        ("synthetic:jobs=1.5", ["jobs='1.5'", "not an integer"]),
        ("synthetic:load=0", ["load=0.0", "> 0"]),
        ("synthetic:load=nan", ["load=nan", "finite"]),
        ("synthetic:tenants=16", ["tenants=16", "1 to 15"]),
        ("synthetic:cluster_gpus=0", ["cluster_gpus=0", ">= 1"]),
        ("synthetic:jobs", ["'jobs' needs a value"]),
        ("synthetic:seed=1,seed=2", ["'seed' given twice"]),
        ("philly:jobs=5", ["unknown workload 'philly'", "synthetic"]),
        ("synthetic:priorities=0.1:high", ["priorities", "'0.1:high'", "share:priority"]),
        ("synthetic:priorities=0.7:1,0.5:2", ["priorities=", "summing to at most 1"]),
    ],
)
def test_bad_specs_say_what_is_wrong(spec, names):
    """Every error names the spec and the bad key or value, and lists the valid keys."""
    with pytest.raises(ValueError) as err:
        parse_workload_spec(spec)
    message = str(err.value)
    assert repr(spec) in message
    assert "jobs, seed, load, cluster_gpus, tenants, users_per_tenant, max_duration_s" in message
    for name in names:
        assert name in message


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"jobs": -1}, "jobs=-1"), ({"load": -0.5}, "load=-0.5"), ({"cluster_gpus": 0}, "cluster_gpus=0"),
     ({"tenants": 0}, "tenants=0"), ({"users_per_tenant": 0}, "users_per_tenant=0"),
     ({"max_duration_s": 0.5}, "max_duration_s=0.5"), ({"jobs": 2.5}, "jobs=2.5")],
)  # fmt: skip
def test_out_of_range_arguments_are_refused_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        synthetic(**kwargs)


def test_generator_matches_the_real_trace():
    """Against philly.csv (skipped when absent), overall and per size class, at p10/p50/p90/p99: the generator's
    quantile is within 0.1 in log10 (~25%) of the trace's, or, where the distribution is steep or tied, the
    generator's CDF at the trace's quantile is within 0.02 of p (0.2 and 0.05 for the 289-job 9+ class).
    GPU-count and tenant job shares agree within a point."""
    with trace_path(PHILLY).open(newline="") as f:
        rows = [(float(r["duration"]), int(r["num_gpus"]), r["cluster"]) for r in csv.DictReader(f)]
    duration_s = np.clip(np.array([r[0] for r in rows]), 1, MAX_DURATION_S)
    gpus = np.array([r[1] for r in rows])
    vc_jobs = sorted(Counter(r[2] for r in rows).values(), reverse=True)

    jobs = synthetic(100_000, seed=0, cluster_gpus=128)
    gen_s = np.array([j.duration_s for j in jobs])
    gen_gpus = np.array([j.gpus for j in jobs])
    p = np.array([0.1, 0.5, 0.9, 0.99])
    edges = np.array(SIZE_CLASS_MAX_GPUS)
    trace_class = np.searchsorted(edges, gpus)
    gen_class = np.searchsorted(edges, gen_gpus)
    for k, log10_tol, cdf_tol in [(None, 0.1, 0.02), (0, 0.1, 0.02), (1, 0.1, 0.02), (2, 0.1, 0.02), (3, 0.2, 0.05)]:
        trace_k = duration_s if k is None else duration_s[trace_class == k]
        gen_k = np.sort(gen_s if k is None else gen_s[gen_class == k])
        trace_q, gen_q = np.quantile(trace_k, p), np.quantile(gen_k, p)
        log10_err = np.abs(np.log10(gen_q) - np.log10(trace_q))
        gen_cdf_below = np.searchsorted(gen_k, trace_q, side="left") / len(gen_k)
        gen_cdf_at = np.searchsorted(gen_k, trace_q, side="right") / len(gen_k)
        cdf_ok = (gen_cdf_below - cdf_tol <= p) & (p <= gen_cdf_at + cdf_tol)
        assert np.all((log10_err <= log10_tol) | cdf_ok), (k, trace_q, gen_q)

    for g in TRACE_SIZE_JOBS:
        assert np.mean(gen_gpus == g) == pytest.approx(np.mean(gpus == g), abs=0.01)
    tenant_share = Counter(j.tenant for j in jobs)
    for name, trace_jobs in zip(TENANTS, vc_jobs, strict=True):
        assert tenant_share[name] / len(jobs) == pytest.approx(trace_jobs / len(rows), abs=0.01)


def test_priority_classes_change_only_the_priorities():
    """With priority classes the same jobs arrive (ids, times, sizes, durations, tenants); each class holds about
    its share of them and the rest keep priority 0."""
    plain = synthetic(jobs=4000, seed=5)
    classed = synthetic(jobs=4000, seed=5, priorities=((0.1, 1000), (0.3, 100)))
    assert [replace(j, priority=0) for j in classed] == plain
    counts = {p: sum(j.priority == p for j in classed) for p in (1000, 100, 0)}
    assert sum(counts.values()) == 4000
    assert 0.08 < counts[1000] / 4000 < 0.12 and 0.27 < counts[100] / 4000 < 0.33
