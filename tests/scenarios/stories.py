"""Shared helpers of the scenario stories: manifests built from small dicts, and checks read from a run's jobs."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import yaml

from trimtab.formats.k8s import Manifests, load_manifests
from trimtab.profile import Profile, profile_for_manifests
from trimtab.sim.run import SimConfig, simulate


def node(name: str, gpus: int = 8, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": gpus}}}


def quota(namespace: str, **hard: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": namespace},
            "spec": {"hard": hard}}


def priority_class(name: str, value: int, never: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": name}, "value": value}
    if never:
        doc["preemptionPolicy"] = "Never"
    return doc


def vcjob(name: str, namespace: str, replicas: int = 1, gpus: int = 1, duration: str = "1h", submit: str = "0",
          priority: str = "", queue: str = "") -> dict[str, Any]:
    """A Volcano Job: one task of `replicas` pods of `gpus` GPUs each, run as one gang."""
    spec: dict[str, Any] = {"minAvailable": replicas, "tasks": [{"name": "worker", "replicas": replicas, "template": {
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}]}
    if priority:
        spec["priorityClassName"] = priority
    if queue:
        spec["queue"] = queue
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {"trimtab.io/duration": duration, "trimtab.io/submit-time": submit}},
            "spec": spec}


def manifests(*docs: dict[str, Any]) -> Manifests:
    return load_manifests(yaml.safe_dump_all(docs, sort_keys=False), text=True)


def run(m: Manifests, policy: str | Profile, **config: Any) -> dict[str, Any]:
    profile, _ = profile_for_manifests(policy if isinstance(policy, Profile) else Profile.load(policy), m)
    return simulate(m.nodes, m.jobs, profile, SimConfig(timing=False, **config))


def peak_by(run_record: dict[str, Any], key: str, per_job: dict[str, int]) -> dict[str, int]:
    """The most that jobs grouped by `key` (e.g. "tenant") held at any instant, counting `per_job[id]` per
    running attempt; an attempt ending at t is gone before one starting at t begins."""
    changes: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for rec in run_record["jobs"]:
        for r in rec["runs"]:
            changes[rec[key]] += [(r["start"], per_job[rec["id"]]), (r["end"], -per_job[rec["id"]])]
    peaks = {}
    for group, events in changes.items():
        level = peak = 0
        for _, delta in sorted(events):
            level += delta
            peak = max(peak, level)
        peaks[group] = peak
    return peaks
