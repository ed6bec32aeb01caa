"""Stories of the serve daemon with the in-memory executor and a hand-driven clock: gangs, retries, cancels,
preemption, quotas and recovery after a crash, each checked against the store."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from trimtab.profile import Profile
from trimtab.serve.daemon import Daemon
from trimtab.serve.errors import ServeError
from trimtab.serve.executors.base import TaskLaunch
from trimtab.serve.executors.fake import FakeExecutor
from trimtab.serve.intake.requests import Principal
from trimtab.serve.intake.submission import JobSpec
from trimtab.serve.run.gpus import from_cluster_file, virtual
from trimtab.serve.store import JobRow, RunRow, Store, sqlite_url

ADMIN = Principal(True, None)


@dataclass
class World:
    """A store, a fake executor and a clock the test moves; `daemon()` builds a daemon over them (a second call
    is a restart after a crash: the fake's tasks are the processes that survived)."""

    tmp: Path
    store: Store
    fake: FakeExecutor
    now_s: float = 1000.0
    gpus: int = 4
    policy: str = "fifo-backfill"
    cluster: str | None = None

    def clock(self) -> float:
        return self.now_s

    def daemon(self) -> Daemon:
        inventory = from_cluster_file(self.cluster) if self.cluster else virtual(self.gpus)
        d = Daemon(self.store, inventory, self.fake, self.policy, self.tmp, clock=self.clock, grace_s=5.0)
        d.recover()
        return d

    def run(self, d: Daemon, seconds: float, step_s: float = 0.5) -> None:
        end = self.now_s + seconds
        while self.now_s < end:
            d.step()
            self.now_s += step_s
        d.step()

    def job(self, job_id: int) -> JobRow:
        with self.store.reader() as s:
            row = s.get(JobRow, job_id)
            assert row is not None
            return row

    def runs(self, job_id: int) -> list[RunRow]:
        with self.store.reader() as s:
            return list(s.scalars(select(RunRow).where(RunRow.job_id == job_id).order_by(RunRow.id)))


@pytest.fixture
def world(tmp_path: Path) -> World:
    store = Store(sqlite_url(tmp_path / "t.db"))
    store.upgrade()
    w = World(tmp_path, store, FakeExecutor(clock=lambda: 0.0))
    w.fake.clock = w.clock
    w.fake.duration_s = lambda argv: float(argv[1]) if argv[0] == "sleep" else None
    w.fake.exit_code = lambda argv: int(argv[1]) if argv[0] == "exit" else 0
    return w


def spec(cmd: str = "sleep 10", **kw: object) -> JobSpec:
    return JobSpec(command=cmd.split(), **kw)  # type: ignore[arg-type]


def test_a_gang_starts_whole_with_distinct_gpus_and_rank_variables(world: World) -> None:
    """A gang of 3 tasks x 2 GPUs on 2 nodes of 4 starts all its tasks in one go, each with its own GPUs."""
    world.cluster = "2x4"
    d = world.daemon()
    jid, _ = d.requests.submit(spec(tasks=3, gpus=2), ADMIN)
    world.run(d, 1)
    launched = world.fake.launched
    assert len(launched) == 3
    assert sorted(t.env["RANK"] for t in launched) == ["0", "1", "2"]
    assert {t.env["WORLD_SIZE"] for t in launched} == {"3"}
    assert len({t.env["MASTER_PORT"] for t in launched}) == 1
    held = [(t.node, g) for t in launched for g in t.gpu_ids]
    assert len(held) == len(set(held)) == 6
    for t in launched:
        assert t.env["CUDA_VISIBLE_DEVICES"] == ",".join(t.gpu_ids)
        assert t.env["TRIMTAB_JOB_ID"] == str(jid)
    world.run(d, 11)
    assert world.job(jid).state == "completed"


def test_a_job_that_never_fits_now_waits_and_a_smaller_one_backfills(world: World) -> None:
    d = world.daemon()
    big, _ = d.requests.submit(spec(gpus=3), ADMIN)
    blocked, _ = d.requests.submit(spec(gpus=3), ADMIN)
    small, _ = d.requests.submit(spec(gpus=1), ADMIN)
    world.run(d, 1)
    assert (world.job(big).state, world.job(blocked).state, world.job(small).state) == \
        ("running", "pending", "running")


def test_a_failed_attempt_is_retried_as_the_job_says_then_fails(world: World) -> None:
    """retries=2: three attempts, each recorded, then the job fails with the exit code."""
    d = world.daemon()
    world.fake.duration_s = lambda argv: 1.0
    jid, _ = d.requests.submit(spec("exit 3", retries=2), ADMIN)
    world.run(d, 10)
    row = world.job(jid)
    assert (row.state, row.attempts, row.failures, row.exit_code) == ("failed", 3, 3, 3)
    assert [r.outcome for r in world.runs(jid)] == ["failed"] * 3


def test_one_failed_task_ends_the_whole_gang_attempt(world: World) -> None:
    d = world.daemon()
    jid, _ = d.requests.submit(spec("sleep 100", tasks=2), ADMIN)
    world.run(d, 1)
    world.fake.end(f"{jid}.1.1", exit_code=1)
    world.run(d, 1)
    assert world.fake.stopped == [f"{jid}.1.0"]
    world.run(d, 6)
    row = world.job(jid)
    assert (row.state, row.exit_code) == ("failed", 1)
    assert not any(d.devices.held_milli[d.cluster.nodes[0].name].values()) and not d.devices.runs


def test_cancel_a_pending_job_at_once_and_a_running_one_after_its_tasks_exit(world: World) -> None:
    d = world.daemon()
    running, _ = d.requests.submit(spec(gpus=4), ADMIN)
    pending, _ = d.requests.submit(spec(gpus=4), ADMIN)
    world.run(d, 1)
    assert d.requests.cancel(pending, ADMIN) == "cancelled"
    assert d.requests.cancel(running, ADMIN) == "running"
    assert world.job(running).state == "running"
    world.run(d, 6)
    assert world.job(running).state == "cancelled"
    assert world.job(pending).state == "cancelled"
    with pytest.raises(ServeError) as err:
        d.requests.cancel(running, ADMIN)
    assert err.value.status == 409


def test_a_tenant_cannot_see_or_cancel_another_tenants_job(world: World) -> None:
    d = world.daemon()
    jid, _ = d.requests.submit(spec(tenant="a"), ADMIN)
    with pytest.raises(ServeError) as err:
        d.requests.cancel(jid, Principal(False, "b"))
    assert err.value.status == 404
    with pytest.raises(ServeError) as err:
        d.requests.submit(spec(tenant="a"), Principal(False, "b"))
    assert err.value.status == 403


def test_preemption_waits_for_the_victim_to_exit_before_reusing_its_gpus(world: World) -> None:
    """Under the priority policy a high-priority job preempts; its tasks start only once the victim's tasks
    have exited (after the grace period), never on GPUs still held."""
    world.policy = "priority"
    d = world.daemon()
    low, _ = d.requests.submit(spec("sleep 1000", gpus=4, priority_class="low"), ADMIN)
    world.run(d, 1)
    high, _ = d.requests.submit(spec("sleep 10", gpus=4, priority_class="high"), ADMIN)
    world.run(d, 1)
    assert world.fake.stopped == [f"{low}.1.0"]
    assert world.job(low).state == "pending" and world.job(low).preemptions == 1
    assert [t.run_id for t in world.fake.launched] == [f"{low}.1.0"], "not launched while the victim holds GPUs"
    world.run(d, 5)
    assert [t.run_id for t in world.fake.launched][-1] == f"{high}.1.0"
    world.run(d, 11)
    assert world.job(high).state == "completed"
    assert world.job(low).state == "running" and world.job(low).attempts == 2
    assert next(r.outcome for r in world.runs(low)) == "preempted"


def test_a_tenant_over_quota_waits_and_a_job_larger_than_the_quota_is_refused(world: World) -> None:
    d = world.daemon()
    d.requests.set_quota("a", 2)
    first, _ = d.requests.submit(spec(gpus=2, tenant="a"), ADMIN)
    second, _ = d.requests.submit(spec(gpus=1, tenant="a"), ADMIN)
    world.run(d, 1)
    assert (world.job(first).state, world.job(second).state) == ("running", "pending")
    with pytest.raises(ServeError) as err:
        d.requests.submit(spec(gpus=3, tenant="a"), ADMIN)
    assert err.value.status == 403
    world.run(d, 11)
    assert world.job(second).state == "running"


def test_after_a_crash_running_tasks_are_adopted_not_relaunched(world: World) -> None:
    """A new daemon over the same store finds the tasks still running: it launches nothing new, and their
    exits complete the jobs; queued jobs are queued again."""
    d = world.daemon()
    a, _ = d.requests.submit(spec("sleep 10", gpus=2, tasks=2), ADMIN)
    b, _ = d.requests.submit(spec("sleep 10", gpus=4), ADMIN)
    world.run(d, 1)
    launched = len(world.fake.launched)
    d2 = world.daemon()  # the old daemon is simply dropped: a SIGKILL
    world.run(d2, 1)
    assert len(world.fake.launched) == launched
    world.run(d2, 10)
    assert world.job(a).state == "completed"
    world.run(d2, 11)
    assert world.job(b).state == "completed" and world.job(b).attempts == 1


def test_after_a_crash_a_vanished_task_is_a_failed_attempt(world: World) -> None:
    d = world.daemon()
    jid, _ = d.requests.submit(spec("sleep 10", retries=1), ADMIN)
    world.run(d, 1)
    world.fake.lose(f"{jid}.1.0")
    d2 = world.daemon()
    world.run(d2, 1)
    row = world.job(jid)
    assert (row.failures, row.attempts, row.state) == (1, 2, "running")
    world.run(d2, 11)
    assert world.job(jid).state == "completed"


def test_a_crash_between_the_start_and_the_launch_queues_the_job_again(world: World) -> None:
    d = world.daemon()
    jid, _ = d.requests.submit(spec("sleep 10"), ADMIN)
    with world.store.session() as s:  # the start was committed, the daemon died before launching
        row = s.get(JobRow, jid)
        assert row is not None
        row.state, row.attempts = "running", 1
    d2 = world.daemon()
    world.run(d2, 1)
    row = world.job(jid)
    assert (row.state, row.attempts, row.failures) == ("running", 2, 0)
    assert len(world.fake.launched) == 1


def test_an_idempotency_key_returns_the_job_already_accepted(world: World) -> None:
    d = world.daemon()
    first = d.requests.submit(spec(idempotency_key="k1"), ADMIN)
    again = d.requests.submit(spec(idempotency_key="k1"), ADMIN)
    assert first == (first[0], True) and again == (first[0], False)
    with pytest.raises(ServeError) as err:  # the same key for another job: refused, as idempotency keys are
        d.requests.submit(spec("sleep 99", idempotency_key="k1"), ADMIN)
    assert (err.value.status, err.value.field) == (409, "idempotency_key") and "command differs" in str(err.value)
    with world.store.reader() as s:
        assert len(s.scalars(select(JobRow)).all()) == 1


def test_impossible_jobs_are_refused_before_anything_is_stored(world: World) -> None:
    d = world.daemon()
    world.fake.missing_commands = frozenset({"nope"})
    cases = [(spec(gpus=5), "gpus"), (spec(gpus=2, tasks=3), "gpus"), (spec("nope"), "command"),
             (spec(gpu_models=["h100"]), "gpu_models")]
    for bad, field in cases:
        with pytest.raises(ServeError) as err:
            d.requests.submit(bad, ADMIN)
        assert (err.value.status, err.value.field) == (422, field)
    with world.store.reader() as s:
        assert s.scalars(select(JobRow)).all() == []


@pytest.mark.parametrize("policy", Profile.builtin_names())
def test_every_built_in_policy_runs_live_unchanged(world: World, policy: str) -> None:
    """The profiles of simulation drive the daemon as they are: a mixed load of tenants, priorities and gangs
    all completes, and no GPU is ever held twice (the daemon refuses to, loudly)."""
    import random

    world.policy, world.gpus = policy, 8
    d = world.daemon()
    rng = random.Random(3)
    ids = []
    for _ in range(20):
        ids.append(d.requests.submit(spec(f"sleep {rng.choice((5, 40, 120))}", gpus=rng.choice((1, 2, 4)),
                                 tasks=rng.choice((1, 1, 2)), priority_class=rng.choice(("low", "normal", "high")),
                                 tenant=rng.choice(("a", "b"))), ADMIN)[0])
        world.run(d, 2)
    world.run(d, 1500, step_s=2.0)
    assert [world.job(j).state for j in ids] == ["completed"] * len(ids)


def test_a_task_that_cannot_start_fails_its_attempt_with_the_reason(world: World, tmp_path: Path) -> None:
    from trimtab.serve.executors.local import LocalExecutor

    d = Daemon(world.store, virtual(2), LocalExecutor(), "fifo", tmp_path / "data", grace_s=1.0)
    d.recover()
    jid, _ = d.requests.submit(spec("true", workdir=str(tmp_path / "no-such-dir")), ADMIN)
    deadline = time.monotonic() + 20
    while world.job(jid).state in ("pending", "running") and time.monotonic() < deadline:
        d.step()
        time.sleep(0.05)
    row = world.job(jid)
    assert (row.state, row.exit_code) == ("failed", 127)
    assert "could not start" in row.reason and "no-such-dir" in row.reason


# ------------------------------------------------------------------------------------------------ GPU shares


def share_env(launch: TaskLaunch) -> dict[str, str]:
    return {k: v for k, v in launch.env.items() if k.startswith(("CUDA_", "TRIMTAB_GPU"))}


def test_two_half_gpu_jobs_share_one_gpu_and_a_whole_gpu_job_waits_for_both(world: World) -> None:
    """On one GPU of 80 GiB, two jobs of 500 milli run at once on GPU 0, each told its share by the MPS
    variables; a job of one whole GPU submitted after them starts only once both have ended."""
    world.cluster = "1x1:h100-80gb"
    d = world.daemon()
    a, _ = d.requests.submit(spec("sleep 10", gpu_milli=500), ADMIN)
    b, _ = d.requests.submit(spec("sleep 20", gpu_milli=500), ADMIN)
    whole, _ = d.requests.submit(spec("sleep 5", gpus=1), ADMIN)
    world.run(d, 1)
    assert [world.job(j).state for j in (a, b, whole)] == ["running", "running", "pending"]
    assert [(t.gpu_ids, t.gpu_milli, share_env(t)) for t in world.fake.launched] == [
        (("0",), 500, {"CUDA_VISIBLE_DEVICES": "0", "TRIMTAB_GPU_MILLI": "500",
                       "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40960M"}),
    ] * 2
    [gpu] = d.snapshot()["nodes"][0]["devices"]
    assert gpu["jobs"] == [{"job_id": a, "milli": 500}, {"job_id": b, "milli": 500}]
    assert gpu["milli_allocated"] == 1000
    world.run(d, 10)
    assert [world.job(j).state for j in (a, b, whole)] == ["completed", "running", "pending"]
    world.run(d, 10)
    assert world.job(whole).state == "running"
    assert share_env(world.fake.launched[-1]) == {"CUDA_VISIBLE_DEVICES": "0"}, "a whole GPU gets no MPS limits"


def test_shares_fill_one_gpu_before_the_next_and_a_gang_of_shares_may_sit_on_one_gpu(world: World) -> None:
    """Shares go to the fullest GPU they fit on (the scheduler's choice, which the daemon follows): three jobs of
    400 milli on 2 GPUs take GPU 0, GPU 0, GPU 1; a gang of two 300-milli tasks then fits on GPU 1 alone. A GPU
    whose memory is unknown (a virtual GPU without a stated size) gets no memory limit."""
    world.gpus = 2
    d = world.daemon()
    for _ in range(3):
        d.requests.submit(spec(gpu_milli=400), ADMIN)
    gang, _ = d.requests.submit(spec(gpu_milli=300, tasks=2), ADMIN)
    world.run(d, 1)
    assert [t.gpu_ids for t in world.fake.launched] == [("0",), ("0",), ("1",), ("1",), ("1",)]
    assert all("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in t.env for t in world.fake.launched)
    assert {t.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] for t in world.fake.launched[3:]} == {"30"}
    assert world.job(gang).state == "running"
    held = d.devices.held_milli[d.cluster.nodes[0].name]
    assert held == {"0": 800, "1": 1000}


def test_a_cancelled_share_frees_its_part_of_the_gpu_only_once_its_task_has_exited(world: World) -> None:
    """Two shares fill the only GPU and a whole-GPU job waits. Both shares are cancelled: the whole job launches
    only after both share tasks have exited (after the grace period), never onto a GPU still shared."""
    world.gpus = 1
    d = world.daemon()
    shares = [d.requests.submit(spec("sleep 1000", gpu_milli=500), ADMIN)[0] for _ in range(2)]
    whole, _ = d.requests.submit(spec("sleep 10", gpus=1), ADMIN)
    world.run(d, 1)
    for job_id in shares:
        d.requests.cancel(job_id, ADMIN)
    world.run(d, 1)
    assert sorted(world.fake.stopped) == sorted(f"{j}.1.0" for j in shares)
    assert len(world.fake.launched) == 2, "not launched while the shares still run"
    world.run(d, 5)
    assert world.fake.launched[-1].run_id == f"{whole}.1.0"
    assert [world.job(j).state for j in (*shares, whole)] == ["cancelled", "cancelled", "running"]


def test_after_a_crash_shares_are_adopted_on_the_gpu_they_hold_and_no_gpu_goes_over_1000_milli(
        world: World) -> None:
    """A restart rebuilds the scheduler's book from the GPUs the tasks really hold: the two shares stay on GPU 0
    (1000 milli, nothing more fits there), the whole-GPU job keeps waiting, then runs once they end."""
    world.cluster = "1x2"
    d = world.daemon()
    d.requests.submit(spec("sleep 5", gpus=1), ADMIN)  # holds GPU 0 while the shares start
    world.run(d, 1)
    shares = [d.requests.submit(spec("sleep 20", gpu_milli=500), ADMIN)[0] for _ in range(2)]
    whole, _ = d.requests.submit(spec("sleep 5", gpus=1), ADMIN)
    world.run(d, 1)
    assert [t.gpu_ids for t in world.fake.launched] == [("0",), ("1",), ("1",)]
    world.run(d, 5)  # the blocker ends: GPU 0 is free, the whole job takes it
    d2 = world.daemon()
    booked = {j: d2.scheduler.running[str(j)].alloc.gpu_idx.tolist() for j in (*shares, whole)}  # type: ignore[union-attr]
    assert booked == {shares[0]: [1], shares[1]: [1], whole: [0]}, "booked where the tasks really run"
    assert d2.cluster.gpu_free_milli[0].tolist() == [0, 0]
    assert d2.devices.held_milli["node-0000"] == {"0": 1000, "1": 1000}
    assert (d2.cluster.gpu_free_milli >= 0).all()
    extra, _ = d2.requests.submit(spec("sleep 5", gpu_milli=100), ADMIN)
    world.run(d2, 1)
    assert world.job(extra).state == "pending", "GPU 1 is full with the two adopted shares"
    world.run(d2, 25)
    assert [world.job(j).state for j in (*shares, whole, extra)] == ["completed"] * 4
    assert len(world.fake.launched) == 5, "nothing relaunched: the adopted shares ran once"


def test_quota_counts_shares_in_thousandths_of_a_gpu(world: World) -> None:
    d = world.daemon()
    d.requests.set_quota("a", 1)
    first, _ = d.requests.submit(spec(gpu_milli=600, tenant="a"), ADMIN)
    second, _ = d.requests.submit(spec(gpu_milli=400, tenant="a"), ADMIN)
    third, _ = d.requests.submit(spec(gpu_milli=100, tenant="a"), ADMIN)
    world.run(d, 1)
    assert [world.job(j).state for j in (first, second, third)] == ["running", "running", "pending"]
    with pytest.raises(ServeError) as err:
        d.requests.submit(spec(gpu_milli=600, tasks=2, tenant="a"), ADMIN)
    assert (err.value.status, err.value.field) == (403, "gpu_milli")
    assert "1.2 GPUs" in err.value.detail
    assert d.snapshot()["queues"][0]["gpus_held"] == 1.0


def test_a_share_on_a_server_without_gpus_is_refused(world: World) -> None:
    world.gpus = 0
    d = world.daemon()
    with pytest.raises(ServeError) as err:
        d.requests.submit(spec(gpu_milli=500), ADMIN)
    assert (err.value.status, err.value.field) == (422, "gpu_milli")


def test_an_executor_that_loses_its_world_stops_the_loop_for_good(world: World) -> None:
    """ExecutorLost (e.g. the Ray node the server joined through is gone) stops the loop, records why and calls
    `on_fatal` once, instead of failing every step forever; the running job is left to the next server."""
    import threading

    from trimtab.serve.executors.base import ExecutorLost

    d = world.daemon()
    jid, _ = d.requests.submit(spec("sleep 100"), ADMIN)
    world.run(d, 1)
    assert world.job(jid).state == "running"
    lost = threading.Event()
    d.on_fatal = lost.set
    d.executor.node_changes = lambda: (_ for _ in ()).throw(ExecutorLost("node gone"))  # type: ignore[attr-defined]
    d.tick_s = 0.01
    d.start()
    assert lost.wait(5)
    assert d.fatal == "node gone"
    assert d._thread is not None
    d._thread.join(5)
    assert not d._thread.is_alive()
    assert world.job(jid).state == "running", "its tasks keep running, for the next server to adopt"
    d.shutdown()


def test_a_node_that_joins_takes_a_waiting_job_and_the_books_carry_on(world: World) -> None:
    """An executor that reports a new node (as Ray does when a raylet joins): the daemon takes it from the
    executor's inventory; the job that was waiting starts there on its GPUs, the running one is untouched."""
    from trimtab.serve.run.gpus import Inventory

    world.cluster = "1x4"
    d = world.daemon()
    first, _ = d.requests.submit(spec("sleep 100", gpus=4), ADMIN)
    second, _ = d.requests.submit(spec("sleep 10", gpus=4), ADMIN)
    world.run(d, 1)
    assert (world.job(first).state, world.job(second).state) == ("running", "pending")
    grown = from_cluster_file("2x4")
    joined = grown.nodes[1]
    world.fake.inventory = Inventory((joined,), {joined.name: grown.devices[joined.name]}, "test")
    world.fake.node_reports.append(([], [joined.name]))
    world.run(d, 1)
    assert world.job(second).state == "running"
    assert [r.node for r in world.runs(second)] == [joined.name]
    assert sorted(world.fake.launched[-1].gpu_ids) == ["0", "1", "2", "3"]
    nodes = {n["name"]: (n["gpus"], n["gpus_allocated"], n["healthy"]) for n in d.snapshot()["nodes"]}
    assert nodes == {grown.nodes[0].name: (4, 4, True), joined.name: (4, 4, True)}
    world.run(d, 100)
    assert (world.job(first).state, world.job(second).state) == ("completed", "completed")
    assert d.cluster.free_gpus.tolist() == [4, 4]


def test_after_a_crash_a_task_whose_node_is_gone_is_lost_and_its_job_runs_again(world: World) -> None:
    """The server was down while a node left (a Ray worker lost): at restart the node is not in the inventory. Its
    task is closed as lost with its node, the job goes back to the queue, the other job is adopted."""
    world.cluster = "2x4"
    d = world.daemon()
    x, _ = d.requests.submit(spec("sleep 100", gpus=4), ADMIN)
    y, _ = d.requests.submit(spec("sleep 10", gpus=4), ADMIN)
    world.run(d, 1)
    assert sorted(r.node for j in (x, y) for r in world.runs(j)) == ["node-0000", "node-0001"]
    lost = next(j for j in (x, y) if world.runs(j)[0].node == "node-0001")
    kept = x if lost == y else y
    world.cluster = "1x4"  # node-0001 is gone
    d = world.daemon()
    assert world.runs(lost)[0].outcome == "node-lost"
    assert (world.job(kept).state, world.job(lost).state) == ("running", "pending")
    world.run(d, 200)
    assert (world.job(kept).state, world.job(lost).state) == ("completed", "completed")
    assert [r.node for r in world.runs(lost)] == ["node-0001", "node-0000"]


def test_a_node_lost_under_a_running_gang_requeues_it_without_spending_a_retry(world: World) -> None:
    """Failover: a gang of 2 x 2 GPUs without retries runs on node-0000 (of three 4-GPU nodes); the node fails
    under it. The attempt ends as lost with its node, the job goes back to the queue with no failure counted, runs
    again on the others and completes. Only the job's own non-zero exits count against its retries."""
    world.cluster = "3x4"
    d = world.daemon()
    jid, _ = d.requests.submit(spec("sleep 10", gpus=2, tasks=2), ADMIN)
    world.run(d, 1)
    first = world.runs(jid)
    assert [r.node for r in first] == ["node-0000", "node-0000"]
    world.fake.lose_node("node-0000")
    world.run(d, 1)
    row = world.job(jid)
    assert (row.state, row.attempts, row.failures) == ("running", 2, 0)
    assert [r.outcome for r in world.runs(jid)[:2]] == ["node-lost", "node-lost"]
    assert "node-0000" not in {r.node for r in world.runs(jid)[2:]}
    world.run(d, 11)
    row = world.job(jid)
    assert (row.state, row.attempts, row.failures, row.max_retries) == ("completed", 2, 0, 0)


def test_a_gang_split_over_two_nodes_loses_one_and_stops_the_other_task(world: World) -> None:
    """A gang of 2 x 4 GPUs spans two nodes; one node fails: the task on the survivor is stopped (the gang lives
    or dies whole), both runs are node-lost, and the job runs again where it fits, not counted as failed."""
    world.cluster = "3x4"
    d = world.daemon()
    jid, _ = d.requests.submit(spec("sleep 10", gpus=4, tasks=2), ADMIN)
    world.run(d, 1)
    lost_node = world.runs(jid)[1].node
    world.fake.lose_node(lost_node)
    world.run(d, 8)  # the survivor's task is stopped after the grace period
    assert [r.outcome for r in world.runs(jid)[:2]] == ["node-lost", "node-lost"]
    row = world.job(jid)
    assert (row.state, row.attempts, row.failures) == ("running", 2, 0)
    world.run(d, 11)
    assert (world.job(jid).state, world.job(jid).failures) == ("completed", 0)


def test_a_tenants_logs_are_held_to_its_total_and_each_task_to_its_cap(world: World) -> None:
    """Each task is told its tenant's max_task_log_bytes; at a launch, once logs total more than the tenant's
    max_log_bytes, the logs of its oldest finished jobs are removed (the running job's stays), and another
    tenant's are not touched."""
    d = world.daemon()
    d.requests.set_limits("t", {"max_task_log_bytes": 500, "max_log_bytes": 2500})
    jobs = []
    for tenant in ("t", "t", "other", "t", "t"):
        jobs.append(d.requests.submit(spec("sleep 10", tenant=tenant), ADMIN)[0])
        world.run(d, 1)
        task = world.fake.launched[-1]
        assert task.log_max_bytes == (500 if tenant == "t" else 1 << 30)
        task.log_path.parent.mkdir(parents=True, exist_ok=True)
        task.log_path.write_bytes(b"x" * 1000)
        if len(jobs) < 5:
            world.fake.end(task.run_id, 0)
        world.run(d, 61)  # past the launcher's TRIM_EVERY_S
    paths = {job: Path(world.runs(job)[0].log_path) for job in jobs}
    # at the last launch t had 3,000 bytes of logs: its oldest finished job's went, and t is within 2,500 again
    assert [paths[j].exists() for j in jobs] == [False, True, True, True, True]
    assert world.job(jobs[0]).state == "completed"
