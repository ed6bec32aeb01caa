"""Inter-pod affinity and preferred node affinity: the filter, the scorers and the gang-aware place, case by case."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from trimtab.cluster import Allocation, ClusterState
from trimtab.model import Job, JobState, LabelSelector, Node, PodAffinity, PodAffinityTerm, Resources
from trimtab.plugins.affinity import InterPodAffinity
from trimtab.plugins.filters import NodeAffinity
from trimtab.policy import CycleContext, RunningJob
from trimtab.scheduler import Scheduler

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
# zones interleave by index, so packing by index alone would cross them; h4 has no zone label
LAYOUT = {"h0": "a", "h1": "b", "h2": "a", "h3": "b", "h4": None}


def cluster(gpus: int = 8) -> list[Node]:
    return [Node(name, Resources(gpus, 64_000, 512 * 1024), labels={ZONE: zone} if zone else {},
                 rack=zone or "none") for name, zone in LAYOUT.items()]


def term(app: str | None, key: str = ZONE, weight: int = 0, **kw: object) -> PodAffinityTerm:
    selector = None if app is None else LabelSelector((("app", app),))
    return PodAffinityTerm(selector, key, weight=weight, **kw)  # type: ignore[arg-type]


def pod(jid: str, app: str = "", tenant: str = "default", tasks: int = 1, **affinity: tuple[PodAffinityTerm, ...],
        ) -> Job:
    return Job(jid, 0.0, tasks, Resources(gpus=1), 100.0, tenant=tenant, labels={"app": app} if app else {},
               pod_affinity=PodAffinity(**affinity) if affinity else None)


def context(running: list[tuple[Job, dict[str, int]]]) -> CycleContext:
    """A cycle's snapshot with `running` jobs holding tasks on the named nodes (only the books, not the GPUs)."""
    state = ClusterState(cluster())
    books = {}
    for job, where in running:
        idx = sorted(state.index[name] for name in where)
        counts = [where[state.nodes[i].name] for i in idx]
        books[job.id] = RunningJob(job, Allocation(np.array(idx), np.array(counts), job.task), 0.0, 0.0, 0.0)
    return CycleContext(0.0, state, [], books, {}, {}, np.random.default_rng(0))


def names(mask: np.ndarray) -> set[str]:
    return {name for name, ok in zip(LAYOUT, mask, strict=True) if ok}


ALL = set(LAYOUT)
WEB = pod("web-0", "web")
DB = pod("db-0", "db")

FILTER_CASES = [
    # (story, running jobs and where, incoming job, nodes it may use)
    ("nothing stated, nothing running: every node", [], pod("p"), ALL),
    ("anti-affinity on the host keeps it off the web pod's node",
     [(WEB, {"h0": 1})], pod("p", required_anti=(term("web", HOST),)), ALL - {"h0"}),
    ("anti-affinity on the zone keeps it out of the zone; a node without the zone label passes",
     [(WEB, {"h0": 1})], pod("p", required_anti=(term("web"),)), {"h1", "h3", "h4"}),
    ("a gang counts on every node it holds", [(pod("web-g", "web", tasks=2), {"h0": 1, "h1": 1})],
     pod("p", required_anti=(term("web", HOST),)), {"h2", "h3", "h4"}),
    ("affinity to the zone of the db pod, never a node without the zone label",
     [(DB, {"h1": 1})], pod("p", required=(term("db"),)), {"h1", "h3"}),
    ("affinity with nothing to join, and the job does not match itself: nowhere", [],
     pod("p", required=(term("db"),)), set()),
    ("the first pod of a series that matches its own term may go to any node with the key", [],
     pod("cache-0", "cache", required=(term("cache"),)), {"h0", "h1", "h2", "h3"}),
    ("the next pod of that series joins the first one's zone", [(pod("cache-0", "cache"), {"h2": 1})],
     pod("cache-1", "cache", required=(term("cache"),)), {"h0", "h2"}),
    ("a matching pod only on a node without the key is as if none ran (first of a series)",
     [(pod("cache-0", "cache"), {"h4": 1})], pod("cache-1", "cache", required=(term("cache"),)),
     {"h0", "h1", "h2", "h3"}),
    ("all terms must select one and the same running pod, each term in its own domain",
     [(DB, {"h2": 1})], pod("p", required=(term("db"), term("db", HOST))), {"h2"}),
    ("a pod matching only one of two terms does not count",
     [(DB, {"h2": 1}), (WEB, {"h1": 1})], pod("p", required=(term("db"), term("web"))), set()),
    ("symmetry: a running pod's anti-affinity keeps a matching job off its node",
     [(pod("quiet", "quiet", required_anti=(term("noisy", HOST),)), {"h1": 1})], pod("p", "noisy"), ALL - {"h1"}),
    ("symmetry reaches only the namespaces the running pod's term names (by default its own)",
     [(pod("quiet", "quiet", required_anti=(term("noisy", HOST),)), {"h1": 1})], pod("p", "noisy", "team-b"),
     ALL),
    ("an explicit namespace list", [(pod("quiet", "quiet", required_anti=(term("noisy", HOST,
                                                                               namespaces=("team-b",)),)),
                                     {"h1": 1})], pod("p", "noisy", "team-b"), ALL - {"h1"}),
    ("every namespace", [(pod("db-b", "db", "team-b"), {"h3": 1})],
     pod("p", required=(term("db", all_namespaces=True),)), {"h1", "h3"}),
    ("the default namespace is the job's own", [(pod("db-b", "db", "team-b"), {"h3": 1})],
     pod("p", required=(term("db"),)), set()),
    ("a term without a label selector selects no pod", [(WEB, {"h0": 1})],
     pod("p", required_anti=(term(None, HOST),)), ALL),
    ("NotIn selects pods without the label too", [(pod("bare"), {"h3": 1})],
     pod("p", required_anti=(PodAffinityTerm(LabelSelector((), (("app", "NotIn", ("web",)),)), HOST),)),
     ALL - {"h3"}),
]


@pytest.mark.parametrize(("running", "job", "allowed"), [c[1:] for c in FILTER_CASES],
                         ids=[c[0] for c in FILTER_CASES])
def test_filter(running, job, allowed):
    plugin = InterPodAffinity()
    ctx = context(running)
    plugin.open(ctx)
    assert names(plugin.filter(job, ctx)) == allowed


SCORE_CASES = [
    ("nothing preferred: all zero", [(DB, {"h1": 1})], pod("p"), [0, 0, 0, 0, 0]),
    ("preferred affinity to the db's zone", [(DB, {"h1": 1})],
     pod("p", preferred=(term("db", weight=50),)), [0, 100, 0, 100, 0]),
    ("preferred anti-affinity away from the web pod's host", [(WEB, {"h0": 1})],
     pod("p", preferred_anti=(term("web", HOST, weight=30),)), [0, 100, 100, 100, 100]),
    ("weights add up per domain and scale from the lowest to the highest node",
     [(DB, {"h1": 1}), (WEB, {"h3": 1})],
     pod("p", preferred=(term("db", weight=80),), preferred_anti=(term("web", HOST, weight=20),)),
     [0, 100, 0, 75, 0]),
    ("each pod of a gang counts", [(pod("db-g", "db", tasks=4), {"h1": 3, "h0": 1})],
     pod("p", preferred=(term("db", HOST, weight=10),)), [100 / 3, 100, 0, 0, 0]),
    ("symmetry: a running pod's required affinity draws the pods it selects (hard weight 1)",
     [(pod("client", "client", required=(term("web", HOST),)), {"h2": 1})], pod("p", "web"), [0, 0, 100, 0, 0]),
    ("symmetry: a running pod's preferred anti-affinity pushes the pods it selects away",
     [(pod("quiet", "quiet", preferred_anti=(term("noisy", weight=40),)), {"h0": 1})], pod("p", "noisy"),
     [0, 100, 0, 100, 100]),
]


@pytest.mark.parametrize(("running", "job", "expected"), [c[1:] for c in SCORE_CASES],
                         ids=[c[0] for c in SCORE_CASES])
def test_pod_affinity_score(running, job, expected):
    plugin = InterPodAffinity()
    ctx = context(running)
    plugin.open(ctx)
    assert plugin.score(job, ctx) == pytest.approx(expected)


def expr(key: str, op: str, *values: str) -> tuple[str, str, tuple[str, ...]]:
    return (key, op, values)


NODE_PREFERENCE_CASES = [
    ("none stated", (), [0, 0, 0, 0, 0]),
    ("one preference: its nodes score 100", ((30, (expr(ZONE, "In", "a"),)),), [100, 0, 100, 0, 0]),
    ("weights add and scale to the best node",
     ((80, (expr(ZONE, "In", "b"),)), (20, (expr(ZONE, "DoesNotExist"),)), (20, (expr("field:metadata.name", "In",
                                                                                        "h3"),))),
     [0, 80, 0, 100, 20]),
    ("a preference no node matches changes nothing", ((50, (expr(ZONE, "In", "z"),)),), [0, 0, 0, 0, 0]),
]


@pytest.mark.parametrize(("preferences", "expected"), [c[1:] for c in NODE_PREFERENCE_CASES],
                         ids=[c[0] for c in NODE_PREFERENCE_CASES])
def test_preferred_node_affinity_score(preferences, expected):
    ctx = context([])
    job = Job("p", 0.0, 1, Resources(gpus=1), 10.0, node_preferences=preferences)
    assert NodeAffinity().score(job, ctx) == pytest.approx(expected)


def test_terms_are_validated():
    with pytest.raises(ValueError, match="topology_key"):
        PodAffinityTerm(None, "")
    with pytest.raises(ValueError, match="weight"):
        PodAffinity(preferred=(term("db"),))
    with pytest.raises(ValueError, match="needs values"):
        LabelSelector((), (("app", "In", ()),))


# ------------------------------------------------------------------------------------------------ placement


def place(*jobs: Job, gpus: int = 8, profile: str = "tenants") -> tuple[Scheduler, dict[str, list[str]]]:
    scheduler = Scheduler(ClusterState(cluster(gpus)), profile)
    for job in jobs:
        scheduler.submit(job, 0.0)
    decision = scheduler.cycle(0.0)
    return scheduler, {job.id: [scheduler.cluster.nodes[int(i)].name for i in alloc.nodes]
                       for job, alloc in decision.starts}


def test_a_gang_that_repels_itself_goes_one_member_per_node():
    """Three members with anti-affinity to their own label on the host: three nodes, one task each."""
    _, started = place(pod("ps", "ps", tasks=3, required_anti=(term("ps", HOST),)))
    assert len(started["ps"]) == 3


def test_a_gang_that_repels_itself_per_zone_goes_one_member_per_zone_or_waits():
    """Members with anti-affinity to their own label on the zone, kept to zoned nodes: two zones take two
    members; a gang of three waits whole. Five hosts take five members; a sixth never half-places the gang."""
    zoned = (((ZONE, "Exists", ()),),)
    spread = PodAffinity(required_anti=(term("ps"),))
    two = Job("ps", 0.0, 2, Resources(gpus=1), 100.0, labels={"app": "ps"}, pod_affinity=spread, node_affinity=zoned)
    _, started = place(two)
    assert sorted(LAYOUT[n] for n in started["ps"]) == ["a", "b"]
    _, started = place(Job("ps", 0.0, 3, Resources(gpus=1), 100.0, labels={"app": "ps"}, pod_affinity=spread,
                           node_affinity=zoned))
    assert started == {}
    _, started = place(pod("ps", "ps", tasks=5, required_anti=(term("ps", HOST),)))
    assert started == {"ps": ["h0", "h1", "h2", "h3", "h4"]}
    _, started = place(pod("ps", "ps", tasks=6, required_anti=(term("ps", HOST),)))
    assert started == {}


def test_a_node_without_the_topology_label_is_in_no_domain():
    """As in Kubernetes, a pod on a node without the key is not counted, so members may share that node: the
    zone-spread gang, free to use h4 (no zone label), goes there whole (packing)."""
    _, started = place(pod("ps", "ps", tasks=3, required_anti=(term("ps"),)))
    assert started == {"ps": ["h4"]}


def test_a_gang_that_draws_itself_stays_in_one_zone():
    """12 one-GPU members on 8-GPU nodes whose zones interleave: packing alone would take h0 and h1 (two zones);
    affinity to their own label on the zone keeps all twelve in one zone."""
    gang = pod("dp", "dp", tasks=12, required=(term("dp"),))
    _, started = place(gang)
    assert len({LAYOUT[n] for n in started["dp"]}) == 1
    _, plain = place(pod("dp", "dp", tasks=12))
    assert len({LAYOUT[n] for n in plain["dp"]}) == 2, "the check above can fail"


def test_spread_over_hosts_inside_one_zone():
    """Anti-affinity on the host and affinity on the zone, both to their own label: one per node, one zone."""
    _, started = place(pod("g", "g", tasks=2, required_anti=(term("g", HOST),), required=(term("g"),)))
    assert len(started["g"]) == 2 and len({LAYOUT[n] for n in started["g"]}) == 1
    _, started = place(pod("g", "g", tasks=3, required_anti=(term("g", HOST),), required=(term("g"),)))
    assert started == {}, "each zone has two hosts"


def test_a_job_waiting_for_its_peer_is_tried_again_as_soon_as_the_peer_starts():
    """web needs a db pod in its zone and comes first in the queue; the db starts in the same cycle, so the cycle
    asks to run again at once, and web then starts in the db's zone."""
    scheduler = Scheduler(ClusterState(cluster()), "tenants")
    scheduler.submit(pod("web", "web", required=(term("db"),)), 0.0)
    scheduler.submit(Job("db", 0.0, 1, Resources(gpus=2), 100.0, labels={"app": "db"}), 0.0)
    first = scheduler.cycle(0.0)
    assert [job.id for job, _ in first.starts] == ["db"] and "web" in first.waiting
    assert first.wake_s == math.nextafter(0.0, math.inf)
    (job, alloc), = scheduler.cycle(first.wake_s).starts
    db_node = scheduler.cluster.nodes[int(scheduler.running["db"].alloc.nodes[0])].name
    assert job.id == "web" and LAYOUT[scheduler.cluster.nodes[int(alloc.nodes[0])].name] == LAYOUT[db_node]


def test_a_job_running_before_the_first_cycle_still_repels():
    """serve re-adopts running jobs after a restart without a cycle; their anti-affinity holds all the same: the
    noisy pod avoids h0, which packing alone would choose (it is the fullest node)."""
    scheduler = Scheduler(ClusterState(cluster()), "tenants")
    quiet = pod("quiet", "quiet", required_anti=(term("noisy", HOST),))
    alloc = Allocation(np.array([0]), np.array([1]), quiet.task)
    scheduler.cluster.allocate(alloc)
    scheduler.jobs[quiet.id] = quiet
    scheduler.state[quiet.id] = JobState.RUNNING
    scheduler.running[quiet.id] = RunningJob(quiet, alloc, 0.0, 0.0, 0.0)
    scheduler.submit(pod("noisy", "noisy"), 0.0)
    (_, placed), = scheduler.cycle(0.0).starts
    assert scheduler.cluster.nodes[int(placed.nodes[0])].name != "h0"
    scheduler.submit(pod("calm", "calm"), 0.0)
    (_, placed), = scheduler.cycle(0.0).starts
    assert scheduler.cluster.nodes[int(placed.nodes[0])].name == "h0", "the check above can fail"


def test_preferred_node_affinity_decides_before_packing():
    """A pod preferring zone b goes there although h0, partly used, would fit it more tightly; once zone b is
    full it falls back to the best fit elsewhere."""
    prefer_b = ((50, (expr(ZONE, "In", "b"),)),)
    scheduler = Scheduler(ClusterState(cluster()), "tenants")

    def start(job: Job) -> list[str]:
        scheduler.submit(job, 0.0)
        (_, alloc), = scheduler.cycle(0.0).starts
        return [scheduler.cluster.nodes[int(i)].name for i in alloc.nodes]

    assert start(Job("filler", 0.0, 4, Resources(gpus=1), 100.0)) == ["h0"]
    assert start(Job("p", 0.0, 1, Resources(gpus=1), 100.0, node_preferences=prefer_b)) == ["h1"]
    assert start(Job("fill-b", 0.0, 15, Resources(gpus=1), 100.0, node_selector={ZONE: "b"})) == ["h1", "h3"]
    assert start(Job("q", 0.0, 1, Resources(gpus=2), 100.0, node_preferences=prefer_b)) == ["h0"]


def test_a_blocked_replica_does_not_hold_back_a_plain_job_of_the_same_request():
    """Five hosts, six replicas that repel each other per host, then a plain job asking for the same: the sixth
    replica waits, the plain job starts."""
    replicas = [pod(f"web-{i}", "web", required_anti=(term("web", HOST),)) for i in range(6)]
    _, started = place(*replicas, pod("plain"), profile="quota-fifo")
    assert "plain" in started


def test_under_a_dynamic_order_a_blocked_replica_holds_back_nothing():
    """The same under `tenants`, whose drf order is sorted every cycle (no shape skipping)."""
    replicas = [pod(f"web-{i}", "web", required_anti=(term("web", HOST),)) for i in range(6)]
    _, started = place(*replicas, pod("plain"))
    assert "plain" in started and "web-5" not in started


def test_pods_a_preemption_is_stopping_count_as_gone():
    """While a preemption tries its victims, their pods neither repel nor attract: a job kept off a host by a
    running pod's anti-affinity may take the host that pod is being evicted from, and a job that needs the pod
    nearby may not count on it."""
    plugin = InterPodAffinity()
    repels = pod("noisy", "noisy", required_anti=(term("p", HOST),))
    ctx = context([(repels, {"h0": 1})])
    plugin.open(ctx)
    job = pod("p-0", "p")
    assert "h0" not in names(plugin.filter(job, ctx))
    assert "h0" in names(plugin.filter(job, replace(ctx, releasing=frozenset({"noisy"}))))
    needs_db = pod("web-1", "web", required=(term("db"),))
    ctx = context([(DB, {"h1": 1})])
    plugin.open(ctx)
    assert names(plugin.filter(needs_db, ctx)) == {"h1", "h3"}
    assert names(plugin.filter(needs_db, replace(ctx, releasing=frozenset({"db-0"})))) == set()
