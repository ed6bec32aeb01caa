"""Tuning: the knobs of a profile, the objective's orientation, the held-out split, and a small search whose tuned
profile loads back as a policy."""

import math

import pytest
import yaml

from builders import nodes
from trimtab.profile import Profile
from trimtab.sim.run import SimConfig
from trimtab.sim.tune import knobs, objective, split, tune, with_values
from trimtab.sim.workload import synthetic


def test_knobs_are_the_numeric_plugin_arguments():
    profile = Profile.load("las")
    found = {k.path: k.value for k in knobs(profile)}
    assert found == {("order", 0, "las", "thresholds_gpu_s", 0): 3250.0,
                     ("order", 0, "las", "thresholds_gpu_s", 1): 7200.0}
    changed = with_values(profile, {("order", 0, "las", "thresholds_gpu_s", 1): 9000.4}, "x")
    assert changed.name == "x" and changed.order[0] == {"las": {"thresholds_gpu_s": [3250, 9000]}}


def test_objective_is_lower_is_better_for_every_metric():
    base = {"p99_jct_s": 100.0, "gpu_util": 0.5, "goodput_cv": None}
    assert objective({"p99_jct_s": 50.0, "gpu_util": 1.0}, base, ["p99_jct_s", "gpu_util"]) == pytest.approx(0.5)
    assert objective({"p99_jct_s": None, "gpu_util": 1.0}, base, ["p99_jct_s"]) == math.inf
    assert objective({"p99_jct_s": 10.0}, base, ["goodput_cv", "p99_jct_s"]) == pytest.approx(0.1)


def test_split_keeps_order_and_rebases_time():
    jobs = synthetic(jobs=100, seed=1)
    first, rest = split(jobs, 0.7)
    assert len(first) == 70 and len(rest) == 30
    assert first[0].submit_s == 0 and rest[0].submit_s == 0
    assert {j.id for j in first} | {j.id for j in rest} == {j.id for j in jobs}


def test_a_small_search_gives_a_profile_that_loads_back(tmp_path):
    jobs = synthetic(jobs=300, seed=2, load=1.2, cluster_gpus=16)
    result = tune(nodes(2, gpus=8), jobs, Profile.load("las"), ["avg_jct_s"], budget=3,
                  config=SimConfig(timing=False), workers=1)
    assert result["tune"]["score"] <= min(c["score"] for c in result["candidates"])
    assert result["held_out_jobs"] == 90 and set(result["held_out"]) == {"base", "tuned", "score"}
    path = tmp_path / "tuned.yaml"
    path.write_text(yaml.safe_dump(result["tuned_profile"]))
    assert Profile.load(path).name == "las-tuned"


def test_steady_knobs_leave_the_structure_alone() -> None:
    from trimtab.profile import Profile
    from trimtab.sim.tune import knobs

    paths = {k.path for k in knobs(Profile.load("steady"))}
    assert ("args", "lower-order", "min_runtime_s") in paths and ("args", "las", "thresholds_gpu_s", 1) in paths
    assert not any("key_depth" in p or "consolidate_window_s" in p for p in paths)
