"""MIG geometry: the MIG profiles of each MIG-capable GPU model, where their slices may start and how many memory
slots they span (NVIDIA's placement tables), and where slices may go on one GPU; ClusterState places and frees
slices by them."""

from __future__ import annotations

from dataclasses import dataclass

MIG_SLOTS = 8  # memory slices of a MIG-capable GPU; a placement is (start slot, size in slots)


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG profile of one GPU model: the memory slots it may start at and how many it spans (NVIDIA's
    placement table, `nvidia-smi mig -lgipp`). Two instances on one GPU may not share a slot."""

    name: str
    starts: tuple[int, ...]
    size_slots: int

    def mask(self, start: int) -> int:
        return ((1 << self.size_slots) - 1) << start


def _profiles(*rows: tuple[str, tuple[int, ...], int]) -> dict[str, MigProfile]:
    table = {name: MigProfile(name, starts, size) for name, starts, size in rows}
    for name, profile in list(table.items()):
        if name.startswith("1g."):  # +me (media extensions) variants share the placement of the plain profile
            table[f"{name}+me"] = MigProfile(f"{name}+me", profile.starts, profile.size_slots)
    return table


_MIG_80GB = _profiles(("1g.10gb", (0, 1, 2, 3, 4, 5, 6), 1), ("1g.20gb", (0, 2, 4, 6), 2),
                      ("2g.20gb", (0, 2, 4), 2), ("3g.40gb", (0, 4), 4), ("4g.40gb", (0,), 4),
                      ("7g.80gb", (0,), 8))
MIG_GEOMETRY: dict[str, dict[str, MigProfile]] = {
    "A100-40GB": _profiles(("1g.5gb", (0, 1, 2, 3, 4, 5, 6), 1), ("1g.10gb", (0, 2, 4, 6), 2),
                           ("2g.10gb", (0, 2, 4), 2), ("3g.20gb", (0, 4), 4), ("4g.20gb", (0,), 4),
                           ("7g.40gb", (0,), 8)),
    "A100-80GB": _MIG_80GB,
    "H100-80GB": _MIG_80GB,
}
"""MIG profiles by MIG-capable GPU model (NVIDIA MIG User Guide, "Supported MIG Profiles")."""


def mig_model(gpu_model: str) -> str | None:
    """The MIG_GEOMETRY key of a node's GPU model name ("A100-SXM4-80GB", "a100", "H100") or None: not MIG-capable.
    An A100 without "80" in its name is the 40 GB one."""
    name = gpu_model.upper()
    if "H100" in name:
        return "H100-80GB"
    if "A100" in name:
        return "A100-80GB" if "80" in name else "A100-40GB"
    return None


def overlaps(geometry: dict[str, MigProfile], name: str, start: int, mask: int) -> bool:
    return bool(geometry[name].mask(start) & mask)


def slice_starts(busy: int, partly_free: bool, carved: dict[int, str], geometry: dict[str, MigProfile],
                 profile: MigProfile, many: bool) -> list[int]:
    """Start slots where slices of `profile` can go on one GPU now, without overlap (all of them if `many`, else the
    best one): a free carved slice of the profile first, then uncarved slots, then (only on an idle GPU) a
    repartition. `busy`: the GPU's busy slot mask; `partly_free`: its free milli-GPU is below a whole GPU (with no
    slice busy: whole or shared tasks hold it, so it takes no slice); `carved`: its slices by start slot, profiles
    of `geometry` (the GPU model's)."""
    if busy == 0 and partly_free:
        return []
    taken = busy
    carved_mask = 0
    for start, name in carved.items():
        carved_mask |= geometry[name].mask(start)
    chosen: list[int] = []
    passes = [lambda s: carved.get(s) == profile.name and not busy & profile.mask(s),
              lambda s: not (carved_mask | busy) & profile.mask(s)]
    if busy == 0:
        passes.append(lambda s: True)  # idle: the GPU may be repartitioned
    for ok in passes:
        for start in profile.starts:
            if start not in chosen and ok(start) and not taken & profile.mask(start):
                chosen.append(start)
                taken |= profile.mask(start)
                if not many:
                    return chosen
    return chosen
