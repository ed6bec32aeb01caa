"""Executors: the narrow seam between the serve daemon and whatever runs tasks (local processes, a fake, Ray).

`Executor` is the contract; `LocalExecutor` and `FakeExecutor` implement it."""

from trimtab.serve.executors.base import Adoption, Executor, TaskExit, TaskLaunch
from trimtab.serve.executors.fake import FakeExecutor
from trimtab.serve.executors.local import LocalExecutor

__all__ = ["Adoption", "Executor", "FakeExecutor", "LocalExecutor", "TaskExit", "TaskLaunch"]
