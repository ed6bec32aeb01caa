"""trimtab: a job scheduler for shared GPU clusters that keeps throughput steady, with a trace-driven simulator.

The public surface is what `__all__` names; everything else is private to the package."""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

__all__ = [
    "Allocation",
    "ClusterState",
    "CycleContext",
    "Decision",
    "Job",
    "JobState",
    "Node",
    "Outcome",
    "Plugin",
    "Profile",
    "Registry",
    "Reservation",
    "Resources",
    "Scheduler",
    "SimConfig",
    "Status",
    "Taint",
    "Txn",
    "compare",
    "default_registry",
    "simulate",
]

# Each public name and the module it lives in. Imported on first use: `import trimtab.cli` (and so every `trimtab`
# command) must not pay for numpy, the scheduler and the simulator when it runs none of them.
_HOMES = {
    "Allocation": "trimtab.cluster",
    "ClusterState": "trimtab.cluster",
    "Txn": "trimtab.txn",
    "Job": "trimtab.model",
    "JobState": "trimtab.model",
    "Node": "trimtab.model",
    "Outcome": "trimtab.model",
    "Resources": "trimtab.model",
    "Taint": "trimtab.model",
    "default_registry": "trimtab.plugins",
    "CycleContext": "trimtab.policy",
    "Decision": "trimtab.policy",
    "Plugin": "trimtab.policy",
    "Reservation": "trimtab.policy",
    "Status": "trimtab.policy",
    "Profile": "trimtab.profile",
    "Registry": "trimtab.profile",
    "Scheduler": "trimtab.scheduler",
    "SimConfig": "trimtab.sim.run",
    "compare": "trimtab.sim.compare",
    "simulate": "trimtab.sim.run",
}


def __getattr__(name: str) -> Any:
    """`trimtab.<public name>` and `from trimtab import <public name>`: the object from its module, cached here
    after the first look-up."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'trimtab' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

