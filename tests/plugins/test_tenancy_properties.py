"""Invariants over random manifests and arrival orders under the multi-tenant policies: no namespace over its
ResourceQuota at any instant, no gang partly running, no node over capacity, and no job lost."""

import sys
from collections import defaultdict
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parents[1] / "scenarios"))
from stories import manifests, node, peak_by, priority_class, quota, run, vcjob

from trimtab.profile import Profile

POLICIES = ["tenants", "quota-fifo", "drf", "reserve", "tenants-delay-consolidate"]


def policy_named(name: str) -> Profile | str:
    if name == "tenants-delay-consolidate":
        profile = Profile.load("tenants")
        return profile.model_copy(update={"name": name, "admit": [*profile.admit, {"delay": {"max_delay_s": 900}}],
                                          "preempt": ["consolidate", *profile.preempt]})
    return name


@st.composite
def scenarios(draw):
    node_gpus = draw(st.sampled_from([4, 8]))
    n_nodes = draw(st.integers(1, 3))
    cap = node_gpus * n_nodes
    docs = [node(f"n{i}", node_gpus) for i in range(n_nodes)]
    docs += [priority_class("low", 10), priority_class("high", 1000),
             priority_class("polite", 500, never=True)]
    namespaces = ["a", "b", "c"][: draw(st.integers(1, 3))]
    limits = {}
    for ns in namespaces:
        if draw(st.booleans()):
            gpus, pods = draw(st.integers(2, cap)), draw(st.integers(2, 8))
            limits[ns] = (gpus, pods)
            docs.append(quota(ns, **{"requests.nvidia.com/gpu": str(gpus), "pods": str(pods)}))
    for i in range(draw(st.integers(1, 14))):
        ns = draw(st.sampled_from(namespaces))
        max_gpus, max_pods = limits.get(ns, (cap, 8))
        per_pod = draw(st.integers(1, min(2, node_gpus, max_gpus)))
        replicas = draw(st.integers(1, max(1, min(4, max_pods, max_gpus // per_pod, cap // per_pod))))
        docs.append(vcjob(f"j{i}", ns, replicas=replicas, gpus=per_pod,
                          duration=f"{draw(st.integers(1, 120))}m", submit=f"{draw(st.integers(0, 180))}m",
                          priority=draw(st.sampled_from(["", "low", "high", "polite"]))))
    return manifests(*docs), limits, draw(st.sampled_from(POLICIES))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_quota_gang_and_capacity_invariants_hold(scenario):
    m, limits, policy = scenario
    result = run(m, policy_named(policy))
    assert result["summary"]["jobs_lost"] == 0
    assert result["summary"]["jobs_completed"] == len(m.jobs)
    by_id = {j.id: j for j in m.jobs}
    gpus = peak_by(result, "tenant", {j.id: j.gpus for j in m.jobs})
    pods = peak_by(result, "tenant", {j.id: j.tasks for j in m.jobs})
    for ns, (max_gpus, max_pods) in limits.items():
        assert gpus.get(ns, 0) <= max_gpus and pods.get(ns, 0) <= max_pods, ns
    node_changes = defaultdict(list)
    for rec in result["jobs"]:
        job = by_id[rec["id"]]
        for r in rec["runs"]:
            assert sum(r["node_tasks"]) == job.tasks, "a gang runs whole or not at all"
            for name, tasks in zip(r["nodes"], r["node_tasks"], strict=True):
                node_changes[name] += [(r["start"], tasks * job.task.gpus), (r["end"], -tasks * job.task.gpus)]
    capacity = {n.name: n.capacity.gpus for n in m.nodes}
    for name, changes in node_changes.items():
        level = 0
        for _, delta in sorted(changes):
            level += delta
            assert level <= capacity[name], f"node {name} over capacity"
    never = {j.id for j in m.jobs if j.preemption_policy == "Never"}
    starts = defaultdict(set)
    for rec in result["jobs"]:
        for r in rec["runs"]:
            starts[r["start"]].add(rec["id"])
    for rec in result["jobs"]:
        for r in rec["runs"]:
            if r["outcome"] == "preempted":
                assert starts[r["end"]] - never, "every eviction makes room for a job that may preempt"
