"""trimtab: a job scheduler for shared GPU clusters that keeps throughput steady, with a trace-driven simulator.

The public surface is what `__all__` names; everything else is private to the package."""

from trimtab.cluster import Allocation, ClusterState, Txn
from trimtab.model import Job, JobState, Node, Outcome, Resources, Taint
from trimtab.plugins import default_registry
from trimtab.policy import CycleContext, Decision, Plugin, Reservation, Status
from trimtab.profile import Profile, Registry
from trimtab.scheduler import Scheduler
from trimtab.sim.compare import compare
from trimtab.sim.run import SimConfig, simulate

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
