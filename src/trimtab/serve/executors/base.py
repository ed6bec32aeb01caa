"""The Executor contract: launch a task on chosen GPUs of a chosen node, stop it, report its exit, re-adopt it.

The daemon owns all scheduling state; an executor only runs what it is told and reports what happened."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from trimtab.serve.run.gpus import Inventory
from trimtab.serve.run.identity import TaskUser


@dataclass(frozen=True, slots=True)
class TaskLaunch:
    """Everything needed to run one task of one attempt. `run_id` ("<job>.<attempt>.<rank>") names it for good:
    the executor tags what it starts with it so the task can be found again after a daemon crash.

    `node` and `gpu_ids` are the scheduler's choice (the executor must honour them, not choose); `gpu_ids` are
    what CUDA_VISIBLE_DEVICES lists (indices, or MIG UUIDs). `gpu_milli` > 0: the task holds that share (1..999
    thousandths) of its one GPU, which other tasks share; 0: its GPUs are wholly its own. `env` already holds the
    rank variables, the TRIMTAB_* variables and, for a share, the MPS limits; `run_dir` is a private folder for
    the executor's own bookkeeping of this task.

    `user`: the Unix identity the command runs as (None: the server's own); `make_dirs`: folders the executor
    makes, as that user, before the command starts (its checkpoint and working folders); `log_max_bytes`: the
    most of the task's output its log keeps (then a line saying it was cut; None: all of it)."""

    run_id: str
    job_id: int
    attempt: int
    rank: int
    node: str
    gpu_ids: tuple[str, ...]
    argv: tuple[str, ...]
    env: Mapping[str, str]
    workdir: str | None
    log_path: Path
    run_dir: Path
    gpu_milli: int = 0
    user: TaskUser | None = None
    make_dirs: tuple[str, ...] = ()
    log_max_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class TaskExit:
    """A task ended. `exit_code` 0 is success; None means it vanished or was killed by a signal, which the daemon
    treats like any non-zero code (a failed attempt, unless the daemon itself asked it to stop).

    `lost`: the task ended with its node, not by its own exit (a Ray worker gone under it, the machine restarted
    under it); `exit_code` is then None. The daemon requeues such an attempt without counting it against the
    job's retries (failover, as Slurm requeues on node failure): only the job's own endings count."""

    run_id: str
    exit_code: int | None
    detail: str = ""
    lost: bool = False


class Adoption(StrEnum):
    """What `Executor.adopt` found for a task recorded in the store."""

    RUNNING = "running"  # still running: now tracked, its exit will come through poll()
    ENDED = "ended"  # ran and ended while the daemon was down: its TaskExit comes through the next poll()
    NEVER_STARTED = "never-started"  # no trace that it ever started: the daemon may launch the attempt again


class ExecutorLost(RuntimeError):
    """The executor lost its link to the tasks' world (e.g. the Ray node the server joined through is gone);
    nothing can be launched, stopped or polled until the server is started again."""


class Executor(ABC):
    """Runs tasks for the serve daemon. Called from the daemon's loop thread only, never concurrently.

    Contract, per method:
    validate(argv)        before a job is accepted: None if the command can run here, else a short reason (the
                          API answers 422 with it and stores nothing).
    launch(task)          start the task now on exactly `task.node` / `task.gpu_ids`; returns a JSON-able handle
                          that the daemon commits to the store and hands back to `adopt` after a restart. Raising
                          OSError means the task could not start (the daemon records a failed attempt).
    stop(run_id, grace_s) ask the task to end (SIGTERM or equivalent) and end it forcibly after `grace_s`;
                          its exit is still reported through poll(). Unknown ids are ignored.
    poll()                the tasks that ended since the last call, each reported exactly once. A task is reported
                          only once nothing of it can still hold its GPUs. A task lost with its node is reported
                          with `lost` set (and only such a task: an executor that cannot tell reports a plain
                          exit, which counts against the job's retries).
    adopt(task, handle)   after a daemon restart, for every task the store says may be running (`handle` None
                          if the crash came before it was recorded). Must not mistake a different process (a
                          recycled pid) for the task. Returns an Adoption.
    close()               the daemon is shutting down; running tasks keep running (they are re-adopted later).

    prepare_gang(tasks)   before the launches of one attempt, with all its tasks in rank order: the executor may
                          reserve the gang's resources as one (Ray: a placement group). Raising OSError fails the
                          attempt's launches. The default does nothing.

    node_changes()        at the start of every step of the daemon's loop: (nodes gone, nodes back or joined) since
                          the last call, by node name, for an executor whose nodes come and go (Ray). The daemon
                          takes a node gone out of placement (its tasks' exits still come through poll()), puts a
                          node back into it, and takes a node it has never seen from `inventory`. The default:
                          no changes.
    inventory             the nodes and devices the executor found itself (Ray), which the server then serves;
                          None (the default): the server finds them (virtual, a cluster file, NVML).

    Any method may raise ExecutorLost when the executor can no longer reach its tasks: the daemon then stops and the
    server exits; a restarted server adopts the tasks still running."""

    name: str = "executor"
    inventory: Inventory | None = None

    @abstractmethod
    def validate(self, argv: tuple[str, ...]) -> str | None: ...

    @abstractmethod
    def launch(self, task: TaskLaunch) -> dict[str, Any]: ...

    @abstractmethod
    def stop(self, run_id: str, grace_s: float) -> None: ...

    @abstractmethod
    def poll(self) -> list[TaskExit]: ...

    @abstractmethod
    def adopt(self, task: TaskLaunch, handle: Mapping[str, Any] | None) -> Adoption: ...

    def prepare_gang(self, tasks: list[TaskLaunch]) -> None:
        return None

    def close(self) -> None:
        return None

    def node_changes(self) -> tuple[list[str], list[str]]:
        return [], []


def begin_stop(tracked: Any, now_s: float, grace_s: float, send: Callable[[bool], None]) -> None:
    """The stop protocol every executor shares: on the first stop, `send(False)` (SIGTERM), or `send(True)`
    (SIGKILL) when there is no grace, and arm `tracked.kill_at_s`; a later stop only brings the kill nearer. The
    executor's poll sends the kill once `kill_at_s` has passed. `tracked` has `ended` and `kill_at_s`."""
    if tracked.ended:
        return
    if tracked.kill_at_s is None:
        send(grace_s <= 0)
        tracked.kill_at_s = now_s + grace_s
    else:
        tracked.kill_at_s = min(tracked.kill_at_s, now_s + grace_s)
