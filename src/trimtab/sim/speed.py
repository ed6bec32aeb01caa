"""How long a job runs in the simulator given where it was placed: the run-time model seam.

The base model runs every job at its reference speed; richer models (GPU model, spread, sharing, data) plug in here."""

from __future__ import annotations

from typing import Protocol

from trimtab.cluster import Allocation, ClusterState
from trimtab.model import Job


class SpeedModel(Protocol):
    def slowdown(self, job: Job, alloc: Allocation, cluster: ClusterState) -> float:
        """Wall seconds per reference second of progress for `job` placed at `alloc` (1.0: reference speed;
        2.0: half speed). Must be > 0."""
        ...


class ReferenceSpeed:
    """Every job runs at its reference duration wherever it is placed (the assumption of Tiresias's simulator)."""

    def slowdown(self, job: Job, alloc: Allocation, cluster: ClusterState) -> float:
        return 1.0
