"""Placement scorers and place plugins: each scorer ranks the nodes of a small, known cluster as its contract says;
ties go to a fixed seeded order; a job's GPU models are respected; openb inputs are read as documented."""

import itertools

import numpy as np
import pytest

from trimtab.cluster import Allocation, ClusterState
from trimtab.cycle import Framework
from trimtab.formats import FormatError
from trimtab.formats.openb import load_openb_nodes, load_openb_pods
from trimtab.model import Job, Node, Resources
from trimtab.plugins import default_registry, fragmentation, score
from trimtab.plugins.fragmentation import TargetWorkload
from trimtab.plugins.place import top_node
from trimtab.policy import CycleContext
from trimtab.profile import Profile
from trimtab.sim.packing import arrival_order, parse_seeds, run_packing

CPU = 64_000

PLUGINS = {**score.PLUGINS, **fragmentation.PLUGINS}


def cluster() -> ClusterState:
    """n0: 8 GPUs, GPU 0 holds a 600-milli share (400 left), GPUs 1-4 whole-GPU tasks; n1: 8 idle GPUs;
    n2: 2 GPUs, one whole-GPU task; n3: CPU only."""
    state = ClusterState([Node("n0", Resources(8, CPU, 1 << 20), gpu_model="G2"),
                          Node("n1", Resources(8, CPU, 1 << 20), gpu_model="G2"),
                          Node("n2", Resources(2, CPU, 1 << 20), gpu_model="T4"),
                          Node("n3", Resources(0, CPU, 1 << 20))])
    state.allocate(Allocation(np.array([0]), np.array([1]), Resources(gpu_milli=600), gpu_idx=np.array([0])))
    state.allocate(Allocation(np.array([0]), np.array([4]), Resources(gpus=1)))
    state.allocate(Allocation(np.array([2]), np.array([1]), Resources(gpus=1)))
    return state


def ranking(name: str, task: Resources, args: dict | None = None, jobs: int = 1) -> list[str]:
    """Feasible node names, best first (stable by index on equal scores), for the last of `jobs` identical jobs."""
    state = cluster()
    plugin = PLUGINS[name](**(args or {}))
    ctx = CycleContext(0.0, state, (), {}, {}, {}, np.random.default_rng(0))
    job = Job("j", 0.0, 1, task)
    for _ in range(jobs):
        score = plugin.score(job, ctx)
    assert score.shape == (4,) and (score >= 0).all() and (score <= 100).all()
    fit = np.flatnonzero(state.fit_counts(task) > 0)
    order = fit[np.argsort(-score[fit], kind="stable")]
    return [state.nodes[i].name for i in order]


SHARE = Resources(gpu_milli=300)
TARGET = TargetWorkload([(0, 1, 300, ()), (0, 1, 1000, ())], [0.5, 0.5])


@pytest.mark.parametrize(("scorer", "task", "args", "jobs", "expected"), [
    # the fullest node after placing: n2 (700 left), n0 (4100), n1 (7700)
    ("best-fit", SHARE, None, 1, ["n2", "n0", "n1"]),
    # a smaller <free, request> scores higher: the node with least free GPU first (99, 97, 93)
    ("dot-product", Resources(gpus=1), None, 1, ["n2", "n0", "n1"]),
    # a used GPU first (n0), then idle GPUs of a used node (n2), then an empty node (n1)
    ("gpu-packing", SHARE, None, 1, ["n0", "n2", "n1"]),
    ("gpu-packing", Resources(gpus=1), None, 1, ["n0", "n2", "n1"]),
    # shares and whole GPUs on n0, whole only on n2, nothing on n1: a whole-GPU job goes to n2, then n0, then n1
    ("gpu-clustering", Resources(gpus=1), None, 1, ["n2", "n0", "n1"]),
    ("gpu-clustering", SHARE, None, 1, ["n0", "n1", "n2"]),
    # most free first
    ("least-load", SHARE, None, 1, ["n1", "n2", "n0"]),
    ("least-load", Resources(cpu_milli=1000), None, 1, ["n0", "n1", "n2", "n3"]),
    # fewest running tasks: n1 and n3 none, n2 one, n0 five
    ("least-connections", Resources(cpu_milli=1000), None, 1, ["n1", "n3", "n2", "n0"]),
    # in turn: the first job favours n0, the third n2
    ("round-robin", Resources(cpu_milli=1000), None, 1, ["n0", "n1", "n2", "n3"]),
    ("round-robin", Resources(cpu_milli=1000), None, 3, ["n2", "n3", "n0", "n1"]),
    # weights 3:1:1:1 (n0 by name): n0 first; having paid back the total (6) it is last for the next job
    ("weighted-round-robin", Resources(cpu_milli=1000), {"weights": {"n0": 3}}, 1, ["n0", "n1", "n2", "n3"]),
    ("weighted-round-robin", Resources(cpu_milli=1000), {"weights": {"n0": 3}}, 2, ["n1", "n2", "n3", "n0"]),
    ("weighted-round-robin", Resources(cpu_milli=1000), {"weights": {"G2": 2}}, 1, ["n0", "n1", "n2", "n3"]),
    # the 300 share on n0's 400-left GPU leaves 100 (fragmentation falls); elsewhere it breaks an idle GPU
    ("fgd", SHARE, {"target": TARGET}, 1, ["n0", "n1", "n2"]),
    ("steady-pack", SHARE, {"target": TARGET}, 1, ["n0", "n1", "n2"]),
])
def test_scorer_ranking(scorer, task, args, jobs, expected):
    assert ranking(scorer, task, args, jobs) == expected


def test_qos_isolation_keeps_latency_sensitive_work_off_best_effort_nodes():
    state = cluster()
    state.allocate(Allocation(np.array([1]), np.array([2]), Resources(gpu_milli=100, qos="BE")))
    plugin = PLUGINS["qos-isolation"]()
    ctx = CycleContext(0.0, state, (), {}, {}, {}, np.random.default_rng(0))
    ls = plugin.score(Job("a", 0, 1, Resources(gpu_milli=100, qos="LS")), ctx)
    be = plugin.score(Job("b", 0, 1, Resources(gpu_milli=100, qos="BE")), ctx)
    other = plugin.score(Job("c", 0, 1, Resources(gpu_milli=100, qos="Burstable")), ctx)
    assert ls.tolist() == [100.0, 0.0, 100.0, 100.0]
    assert be.tolist() == [0.0, 100.0, 0.0, 0.0]
    assert other.tolist() == [50.0] * 4


def test_random_scores_come_from_the_seeded_rng():
    assert ranking("random", SHARE) == ranking("random", SHARE)
    state = cluster()
    plugin = PLUGINS["random"]()
    a = plugin.score(Job("j", 0, 1, SHARE), CycleContext(0.0, state, (), {}, {}, {}, np.random.default_rng(1)))
    assert len(set(a.tolist())) == 4


def test_fgd_scores_as_the_paper_and_places_the_share_on_the_gpu_that_scored():
    """sigmoid of the fragmentation decrease / 1000, truncated: +100 milli on n0 -> 52; -350 on n1 -> 41."""
    state = cluster()
    fgd = PLUGINS["fgd"](target=TARGET)
    ctx = CycleContext(0.0, state, (), {}, {}, {}, np.random.default_rng(0))
    job = Job("j", 0.0, 1, SHARE)
    score = fgd.score(job, ctx)
    assert score[:3].tolist() == [52.0, 41.0, 41.0]
    alloc = fgd.place(job, ctx, state.fit_counts(SHARE), score)
    assert alloc.nodes.tolist() == [0] and alloc.gpu_idx.tolist() == [0]


# Where steady-pack departs from FGD, one case per rule of docs/placement.md: nodes (name, GPUs, CPU milli, model),
# the target workload (kinds, weights), the request, the node FGD scores strictly higher (None: a tie) and the node
# steady-pack scores strictly higher.
STEADY_PACK_CASES = {
    # CPU-hungry GPU requests in the target: the GPU node's CPU is worth keeping for its GPUs
    "cpu: a CPU-only job leaves the GPU node's CPU to its GPUs": (
        [("g", 4, 40_000, "G2"), ("c", 0, 40_000, "")],
        ([(8_000, 1, 1000, ()), (8_000, 0, 0, ())], [0.8, 0.2]),
        Resources(cpu_milli=16_000), None, "c"),
    # FGD counts the V100 node's GPUs as fragmented for the G2-only kind, so it spends them on a request that could
    # go anywhere, and the 2-GPU V100-only kind no longer fits there
    "models: kinds constrained elsewhere do not make a node fragmented": (
        [("v", 2, 64_000, "V100M16"), ("g", 2, 64_000, "G2")],
        ([(4_000, 1, 1000, ()), (4_000, 1, 1000, ("G2",)), (4_000, 2, 1000, ("V100M16",))], [0.3, 0.5, 0.2]),
        Resources(gpus=1, cpu_milli=4_000), "v", "g"),
    # half the GPU demand may use only V100, which has 2 of the 10 GPUs (r = 2.5): its free GPUs are protected;
    # without that rule the two nodes tie for steady-pack (and the V100 node wins on the node order)
    "models: an over-subscribed model is kept for the requests that can only use it": (
        [("v", 2, 64_000, "V100M16"), ("g", 8, 64_000, "G2")],
        ([(4_000, 1, 1000, ()), (4_000, 1, 1000, ("V100M16",))], [0.5, 0.5]),
        Resources(gpus=1, cpu_milli=4_000), "g", "g"),
}


@pytest.mark.parametrize("case", list(STEADY_PACK_CASES))
def test_where_steady_pack_departs_from_fgd(case):
    specs, target, task, fgd_best, steady_best = STEADY_PACK_CASES[case]
    state = ClusterState([Node(name, Resources(gpus, cpu, 1 << 20), gpu_model=model)
                          for name, gpus, cpu, model in specs])
    ctx = CycleContext(0.0, state, (), {}, {}, {}, np.random.default_rng(0))
    job = Job("j", 0.0, 1, task)
    names = [name for name, *_ in specs]
    for policy, best in (("fgd", fgd_best), ("steady-pack", steady_best)):
        score = PLUGINS[policy](target=TargetWorkload(*target)).score(job, ctx)
        if best is None:
            assert score[0] == score[1], policy
        else:
            other = 1 - names.index(best)
            assert score[names.index(best)] > score[other], policy


def test_a_states_fragmentation_does_not_depend_on_the_batch_it_is_computed_in():
    """The cache recomputes a few nodes at a time, in batches of varying size: with job counts as weights the sum is
    exact, so a node's value (and the integer score cut from it) never moves with the batch."""
    rng = np.random.default_rng(5)
    size = rng.integers(0, 3, 3000)
    cpu_milli = rng.zipf(1.5, 3000) % 64 * 1000
    share = rng.integers(1, 100, 3000) * 10
    jobs = [Job(f"j{i}", 0.0, 1, Resources(gpus=int(g), cpu_milli=int(c)) if g else
                Resources(gpu_milli=int(m), cpu_milli=int(c)))
            for i, (g, c, m) in enumerate(zip(size, cpu_milli, share, strict=True))]
    target = TargetWorkload.from_jobs(jobs, popular=1.0)  # about 700 kinds
    gpu = rng.integers(0, 1001, (500, 8))
    cpu = rng.integers(0, 65, 500) * 1000
    ok = np.ones((500, len(target.kinds)), dtype=bool)
    whole = target.frag_milli(cpu, gpu, ok)
    one_by_one = np.concatenate([target.frag_milli(cpu[i:i + 1], gpu[i:i + 1], ok[i:i + 1]) for i in range(500)])
    assert np.array_equal(whole, one_by_one)


def test_oversubscription_counts_the_constrained_jobs_the_popularity_cut_drops():
    """5% of the jobs may use only the V100 node, which has 1 of the 40 GPUs: r = 0.05 / 0.025 = 2, weight 1,
    although their kind is below FGD's 95% cut."""
    jobs = [Job(f"a{i}", 0.0, 1, Resources(gpus=1)) for i in range(95)]
    jobs += [Job(f"v{i}", 0.0, 1, Resources(gpus=1), gpu_models=("V100",)) for i in range(5)]
    target = TargetWorkload.from_jobs(jobs)
    assert [k[3] for k in target.kinds] == [()]
    state = ClusterState([Node("v", Resources(1, 8_000, 1 << 20), gpu_model="V100"),
                          Node("g", Resources(39, 8_000, 1 << 20), gpu_model="G2"),
                          Node("c", Resources(0, 8_000, 1 << 20))])
    assert target.oversubscription(state).tolist() == pytest.approx([1.0, 0.0, 0.0])


def test_ties_go_to_the_first_node_of_a_fixed_seeded_order():
    state = cluster()
    ctx = CycleContext(0.0, state, (), {}, {}, {}, np.random.default_rng(0))
    job = Job("j", 0.0, 1, Resources(cpu_milli=10))
    fit = state.fit_counts(job.task)
    rank = np.array([3, 1, 0, 2])
    assert top_node(job, ctx, fit, np.zeros(4), rank).nodes.tolist() == [2]
    assert top_node(job, ctx, fit, np.array([0, 5, 0, 5.0]), rank).nodes.tolist() == [1]
    gang = Job("g", 0.0, 12, Resources(gpus=1))
    alloc = top_node(gang, ctx, state.fit_counts(gang.task), np.array([0, 9, 5, 0.0]), rank)
    assert alloc.nodes.tolist() == [0, 1, 2] and alloc.counts.tolist() == [3, 8, 1]  # n1 (9), n2 (5), then n0


@pytest.mark.parametrize("policy", ["best-fit", "fgd", "steady-pack", "gpu-packing", "random"])
def test_a_job_with_gpu_models_lands_only_on_those_models(policy):
    nodes = [Node(f"n{i}", Resources(4, 32_000, 1 << 18), gpu_model=m) for i, m in enumerate(["T4", "V100", "A10"] * 3)]
    pods = [Job(f"p{i}", 0.0, 1, Resources(gpu_milli=250 * (1 + i % 3), cpu_milli=1_000),
                gpu_models=("V100", "A10") if i % 2 else ()) for i in range(60)]
    state = ClusterState(nodes)
    profile = Profile(name=policy, filter=["gpu-model"], score={policy: 1.0},
                      place=policy if policy in ("fgd", "steady-pack") else "best-node")
    framework = Framework(profile, default_registry())
    ctx = CycleContext(0.0, state, (), {}, {}, {}, np.random.default_rng(3))
    placed = 0
    for job in pods:
        alloc = framework.try_place(job, ctx)
        if alloc is None:
            continue
        state.allocate(alloc)
        placed += 1
        if job.gpu_models:
            assert all(state.nodes[i].gpu_model in job.gpu_models for i in alloc.nodes)
    assert placed >= 40


def test_pack_is_share_aware():
    """pack puts a share on the node with the least free milli-GPU that holds it."""
    state = cluster()
    framework = Framework(Profile(name="p", score={}, place="pack"), default_registry())
    ctx = CycleContext(0.0, state, (), {}, {}, {}, np.random.default_rng(0))
    alloc = framework.try_place(Job("j", 0.0, 1, Resources(gpu_milli=300)), ctx)
    assert alloc.nodes.tolist() == [2]


def test_arrival_order_inflates_to_the_target_and_depends_on_the_seed():
    pods = [Job(f"p{i}", 0.0, 1, Resources(gpus=1 + i % 2)) for i in range(10)]  # 15 GPUs
    order = arrival_order(pods, 10_000, 2.0, seed=5)
    assert {j.id for j in order[:10]} == {j.id for j in pods}
    total = sum(j.task.gpu_milli_total for j in order)
    assert 18_000 <= total <= 20_000
    assert [j.id for j in arrival_order(pods, 10_000, 2.0, seed=5)] == [j.id for j in order]
    assert [j.id for j in arrival_order(pods, 10_000, 2.0, seed=6)] != [j.id for j in order]
    assert sum(j.task.gpu_milli_total for j in arrival_order(pods, 10_000, 1.0, seed=5)) <= 10_000


def test_packing_run_on_a_small_cluster():
    nodes = [Node(f"n{i}", Resources(2, 16_000, 1 << 16), gpu_model="T4") for i in range(10)]
    pods = [Job(f"p{i}", 0.0, 1, Resources(gpu_milli=300 + 100 * (i % 5), cpu_milli=2_000)) for i in range(30)]
    run = run_packing(nodes, pods, "fgd", inflate=1.3, seed=1)
    curve = run["alloc_pct"]
    assert len(curve) == 131
    done = [v for v in curve if v is not None]
    assert all(b >= a for a, b in itertools.pairwise(done)), "pods never leave: the ratio never falls"
    assert 50 < done[-1] <= 100
    assert parse_seeds("42-44,7") == [42, 43, 44, 7]


def test_openb_readers(tmp_path):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\na,32000,262144,0,\nb,96000,393216,8,G2\n")
    read = load_openb_nodes(nodes)
    assert [(n.name, n.capacity.gpus, n.gpu_model) for n in read] == [("a", 0, ""), ("b", 8, "G2")]
    pods = tmp_path / "pods.csv"
    header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time," \
             "scheduled_time\n"
    pods.write_text(header + "p0,12000,16384,1,1000,,LS,Running,0,100,0\n"
                             "p1,6000,12288,1,460,V100M16|V100M32,BE,Running,5,4,5\n"
                             "p2,4000,1024,0,0,,Burstable,Failed,7,,7\n"
                             "p3,88000,327680,8,1000,,LS,Succeeded,9,19,9\n")
    jobs = load_openb_pods(pods)
    assert [j.task for j in jobs] == [Resources(1, 12_000, 16_384, qos="LS"),
                                      Resources(0, 6_000, 12_288, gpu_milli=460, qos="BE"),
                                      Resources(0, 4_000, 1024, qos="Burstable"),
                                      Resources(8, 88_000, 327_680, qos="LS")]
    assert jobs[1].gpu_models == ("V100M16", "V100M32")
    assert [j.duration_s for j in jobs] == [100.0, None, None, 10.0]
    bad = tmp_path / "bad.csv"
    bad.write_text(header + "p0,1000,1,2,500,,LS,Running,0,1,0\n")
    with pytest.raises(FormatError, match=r"bad\.csv line 2, field gpu_milli"):
        load_openb_pods(bad)
    bad.write_text("sn,cpu_milli,memory_mib,gpu,model\nb,96000,393216,8,\n")
    with pytest.raises(FormatError, match="line 2, field model"):
        load_openb_nodes(bad)


def test_openb_prefixes_reach_the_readers(tmp_path):
    from trimtab.formats import load_cluster, load_trace

    nodes = tmp_path / "n.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nb,96000,393216,8,G2\n")
    pods = tmp_path / "p.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,10,1,200\n")
    assert load_cluster(f"openb:{nodes}")[0].capacity.gpus == 8
    assert load_trace(f"openb:{pods}")[0].task.gpu_milli == 200


@pytest.mark.parametrize("policy", ["fgd", "steady-pack"])
def test_scores_refreshed_a_few_nodes_at_a_time_equal_scores_computed_afresh(policy):
    """fgd and steady-pack keep each request kind's scores and recompute only the nodes changed since, one by one on
    Python scalars when they are few, on arrays when they are many: both give what a fresh plugin computes for
    every node, scores and GPU choices alike, on a cluster with GPU models the target constrains."""
    rng = np.random.default_rng(11)
    state = ClusterState([Node(f"n{i}", Resources(int(rng.choice([2, 4, 8])), int(rng.integers(8, 65)) * 1000,
                                                  1 << 20), gpu_model=("G2", "T4", "V100M16")[i % 3])
                          for i in range(40)])
    target = TargetWorkload([(2_000, 1, 1000, ()), (4_000, 1, 350, ()), (1_000, 1, 600, ("T4",)),
                             (8_000, 2, 1000, ("G2",)), (6_000, 0, 0, ())], [40, 30, 15, 10, 5])
    asks = [Resources(gpu_milli=350, cpu_milli=4_000), Resources(gpus=1, cpu_milli=2_000),
            Resources(gpu_milli=600, cpu_milli=1_000), Resources(cpu_milli=6_000)]
    kept = PLUGINS[policy](target=target)
    ctx = CycleContext(0.0, state, (), {}, {}, {}, np.random.default_rng(0))
    held = []
    for step in range(300):
        if held and rng.random() < 0.35:
            state.release(held.pop(int(rng.integers(len(held)))))
        else:
            task = asks[int(rng.integers(len(asks)))]
            job = Job("j", 0.0, 1, task)
            score = kept.score(job, ctx)
            fit = state.fit_counts(task)
            fresh = PLUGINS[policy](target=target)
            assert np.array_equal(score[fit > 0], fresh.score(job, ctx)[fit > 0]), step
            assert np.array_equal(kept._last.gpu[fit > 0], fresh._last.gpu[fit > 0]), step  # the GPU of a share
            alloc = kept.place(job, ctx, fit, score)
            if alloc is not None:
                state.allocate(alloc)
                held.append(alloc)
