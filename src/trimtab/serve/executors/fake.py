"""The in-memory executor for tests: tasks 'run' on a clock the test controls and end as the test says.

It keeps what it was asked to do (launches, stops) so tests can check the daemon's side of the contract."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trimtab.serve.executors.base import Adoption, Executor, TaskExit, TaskLaunch
from trimtab.serve.run.gpus import Inventory


@dataclass(slots=True)
class FakeTask:
    launch: TaskLaunch
    started_s: float
    ends_s: float | None  # None: runs until stopped or ended by the test
    exit_code: int = 0
    stop_at_s: float | None = None


@dataclass
class FakeExecutor(Executor):
    """Tasks end at `started + duration_s(argv)` with `exit_code(argv)`, or when the test calls `end(run_id)`.
    A stop ends the task after `grace_s` with code None (killed). The same instance given to a new daemon acts as
    processes that survived the old daemon; `lose(run_id)` makes a task vanish (as if its process was killed);
    `lose_node(name)` ends every task of that node as lost with it and reports the node gone. Nodes come and go
    as the test says: each `node_changes()` answers the next of `node_reports` (then no changes); a node that
    joins must be in `inventory`."""

    clock: Callable[[], float]
    duration_s: Callable[[tuple[str, ...]], float | None] = lambda argv: None
    exit_code: Callable[[tuple[str, ...]], int] = lambda argv: 0
    missing_commands: frozenset[str] = frozenset()
    tasks: dict[str, FakeTask] = field(default_factory=dict)
    launched: list[TaskLaunch] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    node_reports: list[tuple[list[str], list[str]]] = field(default_factory=list)
    inventory: Inventory | None = None
    _ended: list[TaskExit] = field(default_factory=list)
    name: str = "fake"

    def validate(self, argv: tuple[str, ...]) -> str | None:
        if not argv or argv[0] in self.missing_commands:
            return f"command {argv[0] if argv else ''!r} was not found on the server's PATH"
        return None

    def launch(self, task: TaskLaunch) -> dict[str, Any]:
        now = self.clock()
        duration = self.duration_s(task.argv)
        self.tasks[task.run_id] = FakeTask(task, now, None if duration is None else now + duration,
                                           self.exit_code(task.argv))
        self.launched.append(task)
        return {"fake": task.run_id}

    def stop(self, run_id: str, grace_s: float) -> None:
        task = self.tasks.get(run_id)
        if task is None:
            return
        self.stopped.append(run_id)
        at = self.clock() + grace_s
        task.stop_at_s = at if task.stop_at_s is None else min(task.stop_at_s, at)

    def end(self, run_id: str, exit_code: int | None = 0) -> None:
        """End a running task now (the test's hand)."""
        self.tasks.pop(run_id)
        self._ended.append(TaskExit(run_id, exit_code))

    def lose(self, run_id: str) -> None:
        """The task's process disappears without a trace (no exit to report after a restart)."""
        self.tasks.pop(run_id)

    def lose_node(self, name: str) -> None:
        """The node `name` fails: its tasks end as lost with it, and the next `node_changes()` reports it gone."""
        for run_id, task in list(self.tasks.items()):
            if task.launch.node == name:
                del self.tasks[run_id]
                self._ended.append(TaskExit(run_id, None, f"node {name} lost", lost=True))
        self.node_reports.insert(0, ([name], []))

    def running_ids(self) -> list[str]:
        return sorted(self.tasks)

    def poll(self) -> list[TaskExit]:
        now = self.clock()
        exits, self._ended = self._ended, []
        for run_id, task in list(self.tasks.items()):
            if task.stop_at_s is not None and now >= task.stop_at_s:
                exits.append(TaskExit(run_id, None, "stopped"))
            elif task.ends_s is not None and now >= task.ends_s:
                exits.append(TaskExit(run_id, task.exit_code))
            else:
                continue
            del self.tasks[run_id]
        return exits

    def node_changes(self) -> tuple[list[str], list[str]]:
        return self.node_reports.pop(0) if self.node_reports else ([], [])

    def adopt(self, task: TaskLaunch, handle: Mapping[str, Any] | None) -> Adoption:
        if task.run_id in self.tasks:
            return Adoption.RUNNING
        if handle is None:
            return Adoption.NEVER_STARTED
        self._ended.append(TaskExit(task.run_id, None, "vanished"))
        return Adoption.ENDED
