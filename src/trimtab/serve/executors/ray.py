"""The Ray executor: trimtab places, Ray runs. Each task is a detached actor pinned to the node trimtab chose
(hard node affinity), which starts the job's command as a process and streams its output back.

Owns the Ray side of `trimtab serve --backend ray`: the inventory read from the Ray cluster's nodes, which nodes are
alive (polled by the daemon through `node_changes`), launch / stop / poll / adopt of task actors."""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trimtab.model import Node, Resources
from trimtab.serve.executors.base import Adoption, Executor, ExecutorLost, TaskExit, TaskLaunch, begin_stop
from trimtab.serve.executors.ray_actor import TaskActor
from trimtab.serve.executors.task_wrapper import cut_notice
from trimtab.serve.run.gpus import Device, Inventory

NAMESPACE = "trimtab"
ACTOR_PREFIX = "trimtab-task-"
GANG_PREFIX = "trimtab-gang-"
PIN = 0.001  # of a node's `node:<address>` resource: pins a bundle to that node
RUN_ID_VAR = "TRIMTAB_RUN_ID"

def _gang_name(job_id: int, attempt: int) -> str:
    return f"{GANG_PREFIX}{job_id}.{attempt}"


def _gpus(task: TaskLaunch) -> float:
    """The Ray GPUs a task holds: its GPU count, or its fraction of one GPU for a share."""
    return task.gpu_milli / 1000 if task.gpu_milli else len(task.gpu_ids)


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise RuntimeError("the Ray backend needs the ray extra: pip install 'trimtab[ray]'") from exc
    return ray


def connect(address: str, node_ip: str | None = None) -> None:
    """Join the Ray cluster at `address` as a driver (once per process), through the Ray node of this machine
    whose address is `node_ip` (Ray's choice if None; it matters only where several raylets share a machine)."""
    ray = _ray()
    if not ray.is_initialized():
        extra = {"_node_ip_address": node_ip} if node_ip else {}
        ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False, **extra)


def node_name(info: Mapping[str, Any]) -> str:
    """trimtab's name for a Ray node: its address and the start of its node id (two raylets on one host differ)."""
    return f"{info['NodeManagerAddress']}-{info['NodeID'][:8]}"


def ray_inventory(nodes: list[dict[str, Any]] | None = None) -> Inventory:
    """The alive Ray nodes that offer GPUs (all alive nodes if none does), their GPUs as ids 0..n-1 and their
    model from Ray's `accelerator_type:*` resource."""
    if nodes is None:
        nodes = _ray().nodes()
    alive = [n for n in nodes if n.get("Alive")]
    with_gpus = [n for n in alive if n["Resources"].get("GPU", 0) > 0]
    found: list[Node] = []
    devices: dict[str, tuple[Device, ...]] = {}
    for info in sorted(with_gpus or alive, key=node_name):
        res = info["Resources"]
        gpus = int(res.get("GPU", 0))
        model = next((k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")), "")
        name = node_name(info)
        found.append(Node(name, Resources(gpus, int(res.get("CPU", 0)) * 1000,
                                          int(res.get("memory", 0)) // (1 << 20)), gpu_model=model))
        devices[name] = tuple(Device(str(i), model, 0) for i in range(gpus))
    if not found:
        raise ValueError("the Ray cluster has no alive node")
    return Inventory(tuple(found), devices, "ray")


@dataclass(slots=True)
class _Gang:
    """The placement group of one attempt, its tasks whose actors have not been reaped yet, and whether Ray has
    reserved its bundles (`ready_ref`, the group's ready() call; None for a group adopted after a restart)."""

    group: Any
    holding: set[str]
    ready_ref: Any = None
    placed: bool = False


@dataclass(slots=True)
class _Tracked:
    actor: Any
    log_path: Path
    node: str
    wait_ref: Any = None
    read_ref: Any = None
    offset: int = 0
    kill_at_s: float | None = None
    killed: bool = False
    exit_code: int | None = None
    detail: str = ""
    ended: bool = False
    lost_at_s: float | None = None  # when the actor was found dead (its node may be gone)
    extra: dict[str, Any] = field(default_factory=dict)
    log_max_bytes: int | None = None  # TaskLaunch's: the log keeps the output's first bytes only


class RayExecutor(Executor):
    """Runs each attempt as a detached placement group with one bundle per task, each bundle pinned to the node
    trimtab chose through that node's `node:<address>` resource, so Ray reserves the gang whole or not at all; each
    task is a detached actor named after its run id in its bundle, holding `len(task.gpu_ids)` of the node's Ray
    GPUs (its fraction of one, for a share). Where a chosen node's address is shared by another alive node (several
    raylets on one machine) the attempt has no placement group and each actor is pinned by a hard node affinity.
    Once every actor of the attempt is up, each starts its command, all in the same step, with the task's
    environment (CUDA_VISIBLE_DEVICES as trimtab chose, MASTER_ADDR set to the address of rank 0's node). The
    placement group is removed once every actor of the gang is gone.

    Output is read back from the actor and appended to `task.log_path` as it comes. A stop sends SIGTERM to the
    task's process group through the actor, SIGKILL after the grace period, then kills the actor. A task whose
    actor dies is reported with exit code None, as lost (`TaskExit.lost`) when its node is gone. `log_dir` is the
    folder on the nodes where tasks' output is kept until read (default `TRIMTAB_RAY_LOG_DIR` or /tmp/trimtab-ray).

    The server joins the cluster through one Ray node of its machine (`node_ip` chooses it). If that node leaves
    the cluster, Ray ends this driver's job and drops what it exported (the actor class): `node_changes` then
    raises ExecutorLost, and a restarted server adopts the tasks still running."""

    name = "ray"

    def __init__(self, address: str, clock: Callable[[], float] = time.monotonic,
                 nodes_every_s: float = 1.0, log_dir: str | None = None, lost_wait_s: float = 45.0,
                 node_ip: str | None = None, start_timeout_s: float | None = None) -> None:
        connect(address, node_ip)
        ray = _ray()
        self._ray = ray
        self.address = address
        self._clock = clock
        self._nodes_every_s = nodes_every_s
        self._lost_wait_s = lost_wait_s
        self._start_timeout_s = start_timeout_s if start_timeout_s is not None else float(
            os.environ.get("TRIMTAB_RAY_START_TIMEOUT_S", "120"))
        self._next_nodes_s = 0.0
        self._log_dir = log_dir or os.environ.get("TRIMTAB_RAY_LOG_DIR", "/tmp/trimtab-ray")
        self._tasks: dict[str, _Tracked] = {}
        self._reaping: list[tuple[str, Any, Any, float]] = []  # (run id, actor, its finish() call, kill-by time)
        self._gangs: dict[str, _Gang] = {}  # by placement group name
        self._swept = False  # placement groups left by an earlier server removed (at the first poll)
        self._masters: dict[tuple[int, int], str] = {}
        self._node_ids: dict[str, str] = {}
        self._node_ips: dict[str, str] = {}
        self._alive: set[str] = set()
        self._actor_cls = ray.remote(max_concurrency=4, num_cpus=0)(TaskActor)
        self.own_node_id: str = ray.get_runtime_context().get_node_id()
        self.inventory = ray_inventory()
        self._refresh_nodes()

    # ------------------------------------------------------------------------------------------- nodes

    def _refresh_nodes(self) -> tuple[list[str], list[str]]:
        alive: set[str] = set()
        nodes = self._ray.nodes()
        for info in nodes:
            name = node_name(info)
            self._node_ids[name] = info["NodeID"]
            self._node_ips[name] = info["NodeManagerAddress"]
            if info.get("Alive"):
                alive.add(name)
            elif info["NodeID"] == self.own_node_id:
                raise ExecutorLost(f"the Ray node this server joined the cluster through ({name}) is gone, and Ray "
                                   "has dropped this server's connection: start trimtab serve again (it adopts "
                                   "the tasks still running; choose a stable node with --ray-node-ip)")
        down, up = sorted(self._alive - alive), sorted(alive - self._alive)
        self._alive = alive
        known = {node.name for node in self.inventory.nodes}
        if any(name not in known for name in up):  # nodes joined: the daemon takes them from the inventory
            self.inventory = ray_inventory(nodes)
        return down, up

    def node_changes(self) -> tuple[list[str], list[str]]:
        """(nodes gone, nodes back or joined) since the last call, checked at most every `nodes_every_s`; after a
        join, `inventory` holds the alive nodes again, the new ones included."""
        now = self._clock()
        if now < self._next_nodes_s:
            return [], []
        self._next_nodes_s = now + self._nodes_every_s
        return self._refresh_nodes()

    # ------------------------------------------------------------------------------------------- contract

    def validate(self, argv: tuple[str, ...]) -> str | None:
        if not argv or not argv[0]:
            return "the command is empty"
        return None  # the command runs on a Ray node; its PATH is not known here

    def prepare_gang(self, tasks: list[TaskLaunch]) -> None:
        """Reserve the attempt's bundles as one placement group (detached, so it outlives a server restart)."""
        ray = self._ray
        head = tasks[0]  # rank 0: its node's address is the gang's MASTER_ADDR
        self._masters = {(head.job_id, head.attempt): self._node_ips.get(head.node, "127.0.0.1")}
        for task in tasks:
            if task.node not in self._alive:
                raise OSError(f"Ray node {task.node} is not alive")
        ips = [self._node_ips[task.node] for task in tasks]
        sharing = Counter(ip for name, ip in self._node_ips.items() if name in self._alive)
        if any(sharing[ip] > 1 for ip in ips):
            return  # an address names more than one node: each actor is pinned by node id instead
        name = _gang_name(tasks[0].job_id, tasks[0].attempt)
        with contextlib.suppress(ValueError):  # a leftover of a launch cut by a crash
            ray.util.remove_placement_group(ray.util.get_placement_group(name))
        bundles = [{**({"GPU": _gpus(task)} if _gpus(task) else {}), f"node:{ip}": PIN}
                   for task, ip in zip(tasks, ips, strict=True)]
        group = ray.util.placement_group(bundles, strategy="PACK", name=name, lifetime="detached")
        self._gangs[name] = _Gang(group, {task.run_id for task in tasks}, group.ready())

    def launch(self, task: TaskLaunch) -> dict[str, Any]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

        node_id = self._node_ids.get(task.node)
        if node_id is None or task.node not in self._alive:
            self._release_gang(task.run_id)  # never started: it holds nothing of its gang's group
            raise OSError(f"Ray node {task.node} is not alive")
        key = (task.job_id, task.attempt)
        if task.rank == 0 or key not in self._masters:
            self._masters[key] = self._node_ips.get(task.node, "127.0.0.1")
        env = {**task.env, "MASTER_ADDR": self._masters[key], RUN_ID_VAR: task.run_id}
        name = ACTOR_PREFIX + task.run_id
        with contextlib.suppress(ValueError):  # a leftover actor of the same name (a launch cut by a crash)
            self._ray.kill(self._ray.get_actor(name, namespace=NAMESPACE))
        gang = _gang_name(task.job_id, task.attempt)
        strategy = PlacementGroupSchedulingStrategy(self._gangs[gang].group, placement_group_bundle_index=task.rank) \
            if gang in self._gangs else NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
        actor = self._actor_cls.options(
            name=name, namespace=NAMESPACE, lifetime="detached", num_gpus=_gpus(task), scheduling_strategy=strategy,
        ).remote(task.run_id, self._log_dir)
        task.log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tracked = _Tracked(actor, task.log_path, task.node, log_max_bytes=task.log_max_bytes)
        tracked.wait_ref = actor.wait.remote()
        tracked.extra.update(start_ref=None, launched_s=self._clock(), ready_ref=actor.ready.remote(),
                             start_args=(list(task.argv), env, task.workdir, list(task.make_dirs)))
        self._tasks[task.run_id] = tracked
        return {"actor": name, "node_id": node_id, "namespace": NAMESPACE,
                "placement_group": gang if gang in self._gangs else None}

    def stop(self, run_id: str, grace_s: float) -> None:
        tracked = self._tasks.get(run_id)
        if tracked is not None:
            begin_stop(tracked, self._clock(), grace_s, lambda kill: tracked.actor.signal.remote(9 if kill else 15))

    def poll(self) -> list[TaskExit]:
        now = self._clock()
        exits: list[TaskExit] = []
        if not self._swept:
            self._sweep_gangs()
        self._reap(now)
        self._start_gangs()
        self._pump_logs()
        for run_id, tracked in list(self._tasks.items()):
            if "start_ref" in tracked.extra:
                self._check_start(run_id, tracked, now)
            if not tracked.ended and not self._check_end(tracked, now):
                continue
            if tracked.ended and self._node_settled(tracked, now):
                self._drain_log(tracked)
                if tracked.actor is not None:  # the actor removes its node-side log and exits; killed if not
                    self._reaping.append((run_id, tracked.actor, tracked.actor.finish.remote(), now + 10.0))
                else:
                    self._release_gang(run_id)
                del self._tasks[run_id]
                # lost with its node only when the node is known gone: an actor that died on a live node (e.g.
                # killed by Ray for the memory its task used) ends the attempt as the job's own failure
                lost = tracked.lost_at_s is not None and tracked.node not in self._alive
                exits.append(TaskExit(run_id, tracked.exit_code, tracked.detail, lost=lost))
        return exits

    def _start_gangs(self) -> None:
        """Start the commands of each attempt whose launched actors are all up, together: an actor comes up when
        Ray has started a worker process for it, seconds apart on a busy node, and no rank's command may start
        before the others can join it."""
        waiting: dict[str, list[_Tracked]] = {}
        for run_id, tracked in self._tasks.items():
            if "start_args" in tracked.extra and not tracked.ended:
                waiting.setdefault(run_id.rsplit(".", 1)[0], []).append(tracked)
        for members in waiting.values():
            refs = [t.extra["ready_ref"] for t in members]
            if len(self._ray.wait(refs, num_returns=len(refs), timeout=0)[0]) < len(refs):
                continue
            for tracked in members:
                tracked.extra["start_ref"] = tracked.actor.start.remote(*tracked.extra.pop("start_args"))

    def _check_start(self, run_id: str, tracked: _Tracked, now_s: float) -> None:
        """Whether the actor started the command: a failed start ends the task with 127, and so does a start
        that Ray has not reserved the GPUs for within the start timeout (counted from the launch)."""
        ray = self._ray
        start_ref = tracked.extra["start_ref"]
        ready, _ = ray.wait([start_ref], timeout=0) if start_ref is not None else ([], [])
        if ready:
            tracked.extra.pop("start_ref")
            try:
                info = ray.get(start_ref)
            except Exception as exc:  # the actor died before it could start the command
                info = {"error": f"{type(exc).__name__}"}
                self._lost(tracked, now_s)
            if "error" in info:
                tracked.ended, tracked.exit_code = True, 127
                tracked.detail = f"could not start: {info['error']}"
        elif (tracked.kill_at_s is None and now_s - tracked.extra["launched_s"] >= self._start_timeout_s
              and not self._gang_placed(run_id)):
            # Ray has not reserved the task's GPUs (held by work trimtab does not see): fail it
            tracked.extra.pop("start_ref")
            with contextlib.suppress(Exception):
                ray.kill(tracked.actor, no_restart=True)
            tracked.killed = tracked.ended = True
            tracked.exit_code = 127
            tracked.detail = (f"not started by Ray within {self._start_timeout_s:g} s "
                              "(its GPUs held by other Ray work?)")

    def _check_end(self, tracked: _Tracked, now_s: float) -> bool:
        """Whether a running task ended (its code, or None when killed or lost with its actor). False while it is
        being killed: a stop past its grace sends SIGKILL, then kills the actor if that goes unanswered."""
        ray = self._ray
        ready, _ = ray.wait([tracked.wait_ref], timeout=0)
        if ready:
            tracked.ended = True
            try:
                code = ray.get(tracked.wait_ref)
                tracked.exit_code = code if code is not None and 0 <= code < 128 else None
                if tracked.exit_code is None:
                    tracked.detail = "killed"
            except Exception as exc:  # RayActorError: the actor (or its node) died
                tracked.exit_code, tracked.detail = None, f"actor lost ({type(exc).__name__})"
                self._lost(tracked, now_s)
        elif tracked.kill_at_s is not None and now_s >= tracked.kill_at_s:
            if not tracked.killed:
                tracked.actor.signal.remote(9)
                tracked.killed = True
                tracked.kill_at_s = now_s + 5.0  # the actor does not answer: kill it, with its process
            else:
                ray.kill(tracked.actor, no_restart=True)
                tracked.kill_at_s = None
            return False
        return True

    def adopt(self, task: TaskLaunch, handle: Mapping[str, Any] | None) -> Adoption:
        try:
            actor = self._ray.get_actor(ACTOR_PREFIX + task.run_id, namespace=NAMESPACE)
        except ValueError:
            if handle is None:
                return Adoption.NEVER_STARTED
            self._tasks[task.run_id] = _Tracked(None, task.log_path, task.node, ended=True, detail="vanished")
            return Adoption.ENDED
        offset = task.log_path.stat().st_size if task.log_path.exists() else 0
        tracked = _Tracked(actor, task.log_path, task.node, offset=offset, log_max_bytes=task.log_max_bytes)
        gang = _gang_name(task.job_id, task.attempt)
        if gang in self._gangs:
            self._gangs[gang].holding.add(task.run_id)
        else:
            with contextlib.suppress(ValueError):
                self._gangs[gang] = _Gang(self._ray.util.get_placement_group(gang), {task.run_id})
        tracked.wait_ref = actor.wait.remote()
        self._tasks[task.run_id] = tracked
        return Adoption.RUNNING

    def close(self) -> None:
        self._tasks.clear()  # detached actors keep running; a restarted daemon adopts them
        for run_id, actor, _ref, _at in self._reaping:
            with contextlib.suppress(Exception):
                self._ray.kill(actor, no_restart=True)
            self._release_gang(run_id)
        self._reaping.clear()

    def _reap(self, now_s: float) -> None:
        """Kill the actors of ended tasks once their finish() call has returned (or failed), or at the latest 10 s
        after it was sent: a detached actor is never left behind."""
        if not self._reaping:
            return
        refs = [ref for _, _, ref, _ in self._reaping]
        ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
        done = set(ready)
        keep = []
        for run_id, actor, ref, kill_at_s in self._reaping:
            if ref in done or now_s >= kill_at_s:
                with contextlib.suppress(Exception):
                    self._ray.kill(actor, no_restart=True)
                self._release_gang(run_id)
            else:
                keep.append((run_id, actor, ref, kill_at_s))
        self._reaping = keep

    def _gang_placed(self, run_id: str) -> bool:
        """Whether Ray has reserved the bundles of the task's gang (its actor is then only slow to start). False
        for a task without a placement group: its start alone is timed."""
        job, attempt, _rank = run_id.split(".")
        gang = self._gangs.get(_gang_name(int(job), int(attempt)))
        if gang is None or gang.ready_ref is None:
            return False
        if not gang.placed:
            ready, _ = self._ray.wait([gang.ready_ref], timeout=0)
            gang.placed = bool(ready)
        return gang.placed

    def _release_gang(self, run_id: str) -> None:
        """A task's actor is gone: once its whole gang's are, remove the gang's placement group."""
        job, attempt, _rank = run_id.split(".")
        name = _gang_name(int(job), int(attempt))
        gang = self._gangs.get(name)
        if gang is None:
            return
        gang.holding.discard(run_id)
        if not gang.holding:
            del self._gangs[name]
            with contextlib.suppress(Exception):
                self._ray.util.remove_placement_group(gang.group)

    def _sweep_gangs(self) -> None:
        """Remove the placement groups of trimtab gangs that no task holds (left by a server that crashed between
        reserving a gang and launching it, or before it removed an ended gang's group)."""
        self._swept = True
        ray = self._ray
        for info in ray.util.placement_group_table().values():
            name = info.get("name", "")
            if name.startswith(GANG_PREFIX) and name not in self._gangs and info.get("state") != "REMOVED":
                with contextlib.suppress(Exception):
                    ray.util.remove_placement_group(ray.util.get_placement_group(name))

    def _lost(self, tracked: _Tracked, now_s: float) -> None:
        if tracked.killed:
            return  # we killed it ourselves (a stop past its grace period), not its node
        tracked.lost_at_s = now_s
        self._next_nodes_s = 0.0  # look at the nodes at the next step: the actor's may be gone

    def _node_settled(self, tracked: _Tracked, now_s: float) -> bool:
        """Whether a lost actor's exit may be reported: once its node is known dead (so the daemon has marked it
        down and will not place the retry there), or after `lost_wait_s` with the node still alive."""
        if tracked.lost_at_s is None or tracked.node not in self._alive:
            return True
        return now_s - tracked.lost_at_s >= self._lost_wait_s

    # ------------------------------------------------------------------------------------------- logs

    def _pump_logs(self) -> None:
        ray = self._ray
        pending = [t for t in self._tasks.values() if t.read_ref is not None]
        if pending:
            ready, _ = ray.wait([t.read_ref for t in pending], num_returns=len(pending), timeout=0)
            done = set(ready)
            for tracked in pending:
                if tracked.read_ref in done:
                    self._take(tracked, tracked.read_ref)
        for tracked in self._tasks.values():
            if tracked.read_ref is None and tracked.actor is not None and not tracked.ended:
                tracked.read_ref = tracked.actor.read.remote(tracked.offset)

    def _take(self, tracked: _Tracked, ref: Any) -> bool:
        tracked.read_ref = None
        try:
            data = self._ray.get(ref)
        except Exception:  # the actor is gone: what it had not sent is lost
            return False
        if data:
            with open(tracked.log_path, "ab") as log:
                log.write(_within_cap(data, tracked.offset, tracked.log_max_bytes))
            tracked.offset += len(data)
        return bool(data)

    def _drain_log(self, tracked: _Tracked) -> None:
        """Read what is left of an ended task's output (bounded: a dead actor answers with an error at once)."""
        if tracked.actor is None:
            return
        ray = self._ray
        if tracked.read_ref is not None:
            ready, _ = ray.wait([tracked.read_ref], timeout=5)
            if not ready or not self._take(tracked, tracked.read_ref):
                return
        for _ in range(64):
            ref = tracked.actor.read.remote(tracked.offset)
            ready, _ = ray.wait([ref], timeout=5)
            if not ready or not self._take(tracked, ref):
                return


def _within_cap(data: bytes, offset: int, cap: int | None) -> bytes:
    """What of `data`, the output from byte `offset` on, the log keeps under `cap` (as the local task wrapper
    keeps it: the first `cap` bytes, then a line saying it was cut)."""
    if cap is None or offset + len(data) <= cap:
        return data
    if offset >= cap:
        return b""
    return data[:cap - offset] + cut_notice(cap)
