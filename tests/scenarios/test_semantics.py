"""The Kubernetes semantics suite: every manifest set under tests/scenarios/semantics/ runs under every built-in
profile its rule applies to, and what happened (who started when and where, who was evicted) is checked.

Each scenario file holds the manifests a user would write, headed by a comment naming the rule it checks and the
documentation it comes from, and ends with one `kind: Expected` document (not a Kubernetes kind; the runner takes
it out before the manifests are read): the profiles the rule applies to and the expected outcome. The keys:

    profiles: a group of PROFILE_GROUPS or a list of profile names
    faults: a `--faults` YAML mapping (e.g. a schedule of node outages), written next to the run
    preemptions: evictions in the run; evicted_gpus: the GPUs of the jobs ever evicted, summed
    evicted_at: {time: T, gpus: N, jobs: [ids]}: the attempts preempted at T (a preemptor's decision, apart from
        any later evictions a profile makes for other reasons): their GPUs summed, and (optionally) their jobs
    peak: {gpus|pods|cpu_milli|mem_mib: {namespace: the most it held at any instant}}
    held_at: {time: T, gpus: {namespace: GPUs held at T}}
    apart: {jobs: glob, label: node label}: the first attempts of those jobs ran where the label's values differ
    jobs: {job id or glob: {start, starts, nodes, last_nodes, nodes_in, node_count, attempts, state}}
        start: the first attempt's start; starts: every attempt's start; nodes / last_nodes: the first / last
        attempt's nodes (as a set); nodes_in: where every node of the first attempt is; node_count: how many
        nodes the first attempt spans; attempts: how many attempts; state: the job's final state.

Every scenario also expects every job to complete (but those whose expected state is `failed`) and the manifests
to be read without a warning. Times are durations (`30m`, `2h`) or seconds. Rules today's code gets wrong are in
KNOWN_GAPS: those cases are strict xfails naming why (and the change that fixes them, where one is under way), so
they flip to failures, to be removed from that list, when it lands."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

import pytest
import yaml
from stories import peak_by, run

from trimtab.formats.k8s import Manifests, load_manifests
from trimtab.profile import Profile
from trimtab.units import parse_duration_s

SCENARIOS = Path(__file__).parent / "semantics"
ALL_PROFILES = Profile.builtin_names()
PROFILE_GROUPS = {
    "all": ALL_PROFILES,
    # scenarios whose pods behind a filtered head must start: all but fifo, whose head blocks the queue by design
    # (strict head-of-line, as Tiresias's simulator), also when a filter holds the head
    "all-but-strict-fifo": [p for p in ALL_PROFILES if p != "fifo"],
    # the profiles whose preemptor evicts lower-priority work for a pending pod
    "priority-preemption": ["priority", "steady", "tenants"],
    # the profiles that model Volcano queues: weights (fair share) and reclaim of what a queue borrowed
    "queue-share": ["drf", "tenants"],
    # the profiles that admit by queue (capability, borrowing)
    "queue-admission": ["drf", "quota-fifo", "reserve", "tenants"],
}


# (scenario glob, profiles, reason): the cases today's code gets wrong
KNOWN_GAPS: list[tuple[str, list[str], str]] = []


def scenario_cases() -> list[Any]:
    cases = []
    for path in sorted(SCENARIOS.glob("*.yaml")):
        expected = _split(path)[1]
        group = expected["profiles"]
        profiles = PROFILE_GROUPS[group] if isinstance(group, str) else group
        for profile in profiles:
            reasons = [reason for glob, where, reason in KNOWN_GAPS
                       if fnmatch.fnmatch(path.stem, glob) and profile in where]
            marks = [pytest.mark.xfail(strict=True, reason="; ".join(reasons))] if reasons else []
            cases.append(pytest.param(path, profile, marks=marks, id=f"{path.stem}-{profile}"))
    return cases


def _split(path: Path) -> tuple[str, dict[str, Any]]:
    """The manifests (text) and the Expected document of one scenario file."""
    docs = path.read_text().split("\n---\n")
    expected = yaml.safe_load(docs[-1])
    assert expected.get("kind") == "Expected", f"{path.name}: the last document must be kind: Expected"
    return "\n---\n".join(docs[:-1]), expected


@pytest.mark.parametrize(("path", "profile"), scenario_cases())
def test_scenario(path: Path, profile: str, tmp_path: Path) -> None:
    text, expected = _split(path)
    m = load_manifests(text, text=True)
    config: dict[str, Any] = {}
    if "faults" in expected:
        faults = tmp_path / "faults.yaml"
        faults.write_text(yaml.safe_dump(expected["faults"]))
        config["faults"] = str(faults)
    result = run(m, profile, **config)
    check_outcome(m, result, expected)
    assert m.warnings == [], "the manifests are read whole"


def check_outcome(m: Manifests, result: dict[str, Any], expected: dict[str, Any]) -> None:
    summary, records = result["summary"], result["jobs"]
    failed = sum(1 for want in expected.get("jobs", {}).values() if want.get("state") == "failed")
    assert summary["jobs_completed"] == len(m.jobs) - failed, _story(records)
    if "preemptions" in expected:
        assert summary["preemptions"] == expected["preemptions"], _story(records)
    if "evicted_gpus" in expected:
        assert sum(r["gpus"] for r in records if r["preemptions"]) == expected["evicted_gpus"], _story(records)
    if "evicted_at" in expected:
        at_s = parse_duration_s(expected["evicted_at"]["time"])
        victims = [r for r in records for a in r["runs"] if a["end"] == at_s and a["outcome"] == "preempted"]
        assert sum(r["gpus"] for r in victims) == expected["evicted_at"]["gpus"], _story(records)
        if "jobs" in expected["evicted_at"]:
            assert sorted(r["id"] for r in victims) == sorted(expected["evicted_at"]["jobs"]), _story(records)
    for dimension, limits in expected.get("peak", {}).items():
        per_job = {j.id: _amount(j, dimension) for j in m.jobs}
        peaks = peak_by(result, "tenant", per_job)
        assert {ns: peaks.get(ns, 0) for ns in limits} == limits, (dimension, _story(records))
    if "held_at" in expected:
        at_s = parse_duration_s(expected["held_at"]["time"])
        held = {ns: sum(r["gpus"] for r in records for a in r["runs"] if r["tenant"] == ns and a["start"] <= at_s
                        < a["end"]) for ns in expected["held_at"]["gpus"]}
        assert held == expected["held_at"]["gpus"], _story(records)
    if "apart" in expected:
        labels = {n.name: n.labels for n in m.nodes}
        apart = [r for r in records if fnmatch.fnmatchcase(r["id"], expected["apart"]["jobs"])]
        values = [labels[r["runs"][0]["nodes"][0]].get(expected["apart"]["label"]) for r in apart if r["runs"]]
        assert len(apart) >= 2 and len(set(values)) == len(apart), _story(records)
    for pattern, want in expected.get("jobs", {}).items():
        matched = [r for r in records if fnmatch.fnmatchcase(r["id"], pattern)]
        assert matched, f"no job matches {pattern}"
        for rec in matched:
            check_job(rec, want, records)


def check_job(rec: dict[str, Any], want: dict[str, Any], records: list[dict[str, Any]]) -> None:
    runs = rec["runs"]
    first = set(runs[0]["nodes"]) if runs else set()
    story = f"{rec['id']}: {_story(records)}"
    if "start" in want:
        assert runs and runs[0]["start"] == parse_duration_s(want["start"]), story
    if "starts" in want:
        assert [r["start"] for r in runs] == [parse_duration_s(s) for s in want["starts"]], story
    if "attempts" in want:
        assert len(runs) == want["attempts"], story
    if "nodes" in want:
        assert first == set(want["nodes"]), story
    if "nodes_in" in want:
        assert first and first <= set(want["nodes_in"]), story
    if "last_nodes" in want:
        assert runs and set(runs[-1]["nodes"]) == set(want["last_nodes"]), story
    if "node_count" in want:
        assert len(first) == want["node_count"], story
    if "state" in want:
        assert rec["state"] == want["state"], story


def _amount(job: Any, dimension: str) -> int:
    per_task = {"gpus": job.task.gpus, "pods": 1, "cpu_milli": job.task.cpu_milli, "mem_mib": job.task.mem_mib}
    return per_task[dimension] * job.tasks


def _story(records: list[dict[str, Any]]) -> str:
    """Every attempt of the run, for a failing assertion: id prio gpus [start-end@nodes ...] evictions."""
    lines = []
    for r in records:
        attempts = " ".join(f"{a['start']:.0f}-{a['end']:.0f}@{','.join(sorted(set(a['nodes'])))}" for a in r["runs"])
        lines.append(f"{r['id']} p{r['priority']} {r['gpus']}g [{attempts}] ev{r['preemptions']} {r['state']}")
    return "\n" + "\n".join(lines)
