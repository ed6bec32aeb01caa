"""Several policies on the same cluster and workload: `compare` runs each with `simulate`, in parallel on the
local cores or as Ray tasks, and returns their run records by policy name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trimtab.model import Job, Node
from trimtab.profile import Profile
from trimtab.sim.parallel import parallel_map
from trimtab.sim.run import SimConfig, simulate


def simulate_profile(nodes: Sequence[Node], jobs: Sequence[Job], config: SimConfig,
                     profile: Profile) -> dict[str, Any]:
    """`simulate` with the profile last, as `parallel_map` calls it (the cluster, workload and config shared)."""
    return simulate(nodes, jobs, profile, config)


def compare(nodes: Sequence[Node], jobs: Sequence[Job], policies: Sequence[Profile | str],
            config: SimConfig | None = None, workers: int | None = None,
            ray_address: str | None = None) -> dict[str, dict[str, Any]]:
    """Run each policy on the same cluster and workload; returns run records by policy name, in the given order.
    Runs go to forked processes, up to `workers` (default: the local cores) at a time; the inputs are inherited,
    not pickled, so a large trace costs nothing to hand over. With `ray_address`, each run is a Ray task (one CPU)
    on that cluster instead; the inputs are put in its object store once. A run is deterministic for its seed, so
    both ways give the same records (the wall-clock `timing` fields aside)."""
    config = config or SimConfig()
    profiles = [p if isinstance(p, Profile) else Profile.load(p) for p in policies]
    names = [p.name for p in profiles]
    if len(set(names)) != len(names):
        raise ValueError(f"policies named twice: {names}")
    results = parallel_map(simulate_profile, profiles, (nodes, jobs, config), workers, ray_address)
    return dict(zip(names, results, strict=True))
