"""Kubernetes's node filters and the PreferNoSchedule scorer: free for a job with nothing to check, and the
warnings of a profile that lacks them."""

from __future__ import annotations

import numpy as np

from builders import job, nodes
from trimtab.cluster import ClusterState
from trimtab.formats.k8s import load_manifests
from trimtab.model import Node, Resources, Taint
from trimtab.plugins.affinity import InterPodAffinity
from trimtab.plugins.filters import GpuModel, NodeAffinity, NodeSelector, Taints
from trimtab.plugins.score import TaintPreference
from trimtab.policy import CycleContext
from trimtab.profile import Profile, profile_for_manifests

PREFER = "PreferNoSchedule"


def context(cluster: list[Node]) -> CycleContext:
    return CycleContext(0.0, ClusterState(cluster), [], {}, {}, {}, np.random.default_rng(0))


def test_a_job_with_nothing_to_check_gets_one_cached_all_true_mask_from_every_filter() -> None:
    ctx = context(nodes(4))
    for plugin in (GpuModel(), NodeSelector(), NodeAffinity(), Taints(), InterPodAffinity()):
        first, second = plugin.filter(job("a"), ctx), plugin.filter(job("b", gpus=2), ctx)
        assert first is second and first.all() and len(first) == 4, plugin


def test_taints_filter_keeps_out_untolerated_hard_taints_and_a_cordoned_node_but_not_prefer_no_schedule() -> None:
    cluster = nodes(4)
    cluster[0] = Node("hard", cluster[0].capacity, taints=(Taint("gpu", "a100", "NoSchedule"),))
    cluster[1] = Node("cordoned", cluster[1].capacity, taints=(Taint("node.kubernetes.io/unschedulable"),))
    cluster[2] = Node("soft", cluster[2].capacity, taints=(Taint("spot", "yes", PREFER),))
    ctx, taints = context(cluster), Taints()
    assert taints.filter(job("plain"), ctx).tolist() == [False, False, True, True]
    tolerant = job("tolerant", tolerations=(("gpu", "Equal", "a100", ""),))
    assert taints.filter(tolerant, ctx).tolist() == [True, False, True, True]
    assert taints.filter(job("all", tolerations=(("", "Exists", "", ""),)), ctx).all()


def test_taint_preference_scores_fewer_untolerated_prefer_no_schedule_taints_higher() -> None:
    capacity = Resources(8, 64_000, 512 * 1024)
    cluster = [Node("two", capacity, taints=(Taint("spot", "yes", PREFER), Taint("old", "", PREFER))),
               Node("one", capacity, taints=(Taint("spot", "yes", PREFER), Taint("gpu", "", "NoSchedule"))),
               Node("none", capacity)]
    ctx, scorer = context(cluster), TaintPreference()
    assert scorer.score(job("plain"), ctx).tolist() == [0.0, 50.0, 100.0]
    spot = job("spot", tolerations=(("spot", "Exists", "", PREFER),))
    assert scorer.score(spot, ctx).tolist() == [0.0, 100.0, 100.0]
    every = job("every", tolerations=(("", "Exists", "", ""),))
    assert scorer.score(every, ctx).tolist() == [0.0, 0.0, 0.0]  # a constant: no node preferred


def test_taint_preference_is_zero_everywhere_without_prefer_no_schedule_taints() -> None:
    cluster = nodes(3)
    cluster[0] = Node("hard", cluster[0].capacity, taints=(Taint("gpu", "a100", "NoSchedule"),))
    ctx, scorer = context(cluster), TaintPreference()
    first = scorer.score(job("a"), ctx)
    assert first is scorer.score(job("b", tolerations=(("gpu", "Exists", "", ""),)), ctx)
    assert not first.any()


NODES = """
apiVersion: v1
kind: Node
metadata: {name: hard}
spec: {taints: [{key: gpu, value: a100, effect: NoSchedule}]}
status: {capacity: {nvidia.com/gpu: 4}}
---
apiVersion: v1
kind: Node
metadata: {name: soft}
spec: {taints: [{key: spot, value: 'yes', effect: PreferNoSchedule}]}
status: {capacity: {nvidia.com/gpu: 4}}
"""


def test_a_profile_warns_only_of_the_taints_it_ignores_and_scores_prefer_no_schedule_whatever_it_is() -> None:
    m = load_manifests(NODES, text=True)
    fifo, warnings = profile_for_manifests(Profile.load("fifo"), m)
    assert warnings == [] and fifo.score == {"taint-preference": 3.0}
    bare, warnings = profile_for_manifests(Profile(name="bare", filter=["gpu-model"], score={"taint-preference": 0}), m)
    assert warnings == ["Node hard, field spec.taints: ignored, bare has no taints filter"]
    assert bare.score == {"taint-preference": 0}  # the profile's own choice stands
    untainted = load_manifests(NODES.replace("PreferNoSchedule", "NoExecute"), text=True)
    assert profile_for_manifests(Profile.load("las"), untainted)[0].score == {}
