"""ClusterState: free resources per node and per GPU (milli-GPU shares, MIG slices) as numpy arrays; Allocation.

Everything here is vectorised over nodes; the scheduler is the only writer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from trimtab.fit import GPU_MILLI, FitBook
from trimtab.mig import MIG_GEOMETRY, MIG_SLOTS, MigProfile, mig_model, overlaps, slice_starts
from trimtab.model import Node, Resources
from trimtab.txn import Txn


def gpu_kind(task: Resources) -> str:
    """The kind of GPU request, for keeping like with like: "share-gpu", "<n>-gpu", "mig-<profile>", or ""."""
    if task.gpu_milli:
        return "share-gpu"
    if task.gpus:
        return f"{task.gpus}-gpu"
    return f"mig-{task.mig}" if task.mig else ""


@dataclass(frozen=True, slots=True)
class Allocation:
    """Where a gang runs: `counts[i]` tasks of `task` on node index `nodes[i]` (nodes ascending, counts > 0).

    `gpu_idx` says which GPU of its node each task holds, task by task in node order: `task.gpus` entries per task
    for whole GPUs, one per task for a share or a MIG slice (`mig_start` then gives the slice's first memory slot).
    A place plugin may leave them None: ClusterState then chooses when the allocation is first applied (whole GPUs:
    the idle ones with the lowest index; a share: the fullest GPU it fits on; MIG: a free slice of the profile,
    then free slots, then an idle GPU repartitioned) and records its choice here, so a release frees the same GPUs."""

    nodes: np.ndarray
    counts: np.ndarray
    task: Resources
    gpu_idx: np.ndarray | None = None
    mig_start: np.ndarray | None = None
    tasks: int = field(init=False, compare=False)  # counts.sum(), counted once: read on every key and victim check
    gpus: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        tasks = sum(self.counts.tolist())  # a few nodes: cheaper than a numpy reduction
        object.__setattr__(self, "tasks", tasks)
        object.__setattr__(self, "gpus", tasks * self.task.gpus)

    @property
    def gpu_milli(self) -> int:
        """Milli-GPU held: 1000 per whole GPU plus the shares (MIG slices are not counted here)."""
        return self.tasks * self.task.gpu_milli_total


class ClusterState:
    """Capacity, free resources, GPU models, racks and health of every node, one numpy array per quantity, and the
    free milli-GPU of every GPU (`gpu_free_milli[node, gpu]`, 0 on the padding beyond a node's GPU count).

    Node i is `nodes[i]`. `free_gpus[i]` counts node i's idle GPUs (nothing on them), so a node with 8 GPUs each 60%
    used has 0 free GPUs and 3200 free milli-GPU, none of it usable by a task asking for 500. Free amounts never go
    below zero nor above capacity, and no GPU ever holds more than 1000 milli: `allocate` and `release` check.
    A MIG-capable GPU (see `mig_model`) holding a busy MIG slice serves only MIG requests until it is idle again.
    The arrays change only through `allocate`, `release`, `set_health` and a Txn's holds (each names the nodes it
    changed in `fits.log`); other code reads them."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        if not nodes:
            raise ValueError("a cluster needs at least one node")
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})[:3]
            raise ValueError(f"duplicate node names: {', '.join(dup)}")
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.index: dict[str, int] = {n: i for i, n in enumerate(names)}
        self.cap_gpus = np.array([n.capacity.gpus for n in nodes], dtype=np.int64)
        self.cap_cpu_milli = np.array([n.capacity.cpu_milli for n in nodes], dtype=np.int64)
        self.cap_mem_mib = np.array([n.capacity.mem_mib for n in nodes], dtype=np.int64)
        self.free_gpus = self.cap_gpus.copy()
        self.free_cpu_milli = self.cap_cpu_milli.copy()
        self.free_mem_mib = self.cap_mem_mib.copy()
        self.healthy = np.ones(len(nodes), dtype=bool)
        self.free_gpus_total = int(self.cap_gpus.sum())  # free GPUs on healthy nodes, kept in step by _apply
        self.gpu_models: tuple[str, ...] = tuple(sorted({n.gpu_model for n in nodes}))
        self.model_idx = np.array([self.gpu_models.index(n.gpu_model) for n in nodes], dtype=np.int64)
        self.racks: tuple[str, ...] = tuple(dict.fromkeys(n.rack for n in nodes))
        self.rack_idx = np.array([self.racks.index(n.rack) for n in nodes], dtype=np.int64)
        self._label_masks: dict[tuple[str, str], np.ndarray] = {}
        width = max(int(self.cap_gpus.max()), 1)
        self.gpu_exists = np.arange(width)[None, :] < self.cap_gpus[:, None]
        self.gpu_free_milli = np.where(self.gpu_exists, GPU_MILLI, 0).astype(np.int64)
        self.free_gpu_milli = self.cap_gpus * GPU_MILLI  # per node: sum of gpu_free_milli
        self.tasks_running = np.zeros(len(nodes), dtype=np.int64)  # tasks holding resources on each node
        self.version = np.zeros(len(nodes), dtype=np.int64)  # bumped whenever a node's free resources change
        self.qos_tasks: dict[str, np.ndarray] = {}  # tasks per node by QoS class (classes seen so far)
        self.kind_tasks: dict[str, np.ndarray] = {}  # GPU tasks per node by kind: share-gpu, 1-gpu, mig-1g.10gb..
        self.mig_geometry: tuple[dict[str, MigProfile] | None, ...] = tuple(
            MIG_GEOMETRY.get(mig_model(n.gpu_model) or "") if n.capacity.gpus else None for n in nodes)
        self.mig_capable = np.array([g is not None for g in self.mig_geometry], dtype=bool)
        self.mig_busy = np.zeros(self.gpu_free_milli.shape, dtype=np.int64)  # slot bitmask of busy slices
        self.mig_carved: dict[tuple[int, int], dict[int, str]] = {}  # (node, gpu) -> {start slot: profile}
        self.fits = FitBook(self)  # fit counts kept per request, and the log of changed nodes they follow

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def total_gpus(self) -> int:
        return int(self.cap_gpus.sum())

    @property
    def allocated_gpus(self) -> int:
        """GPUs that are not idle (whole, shared or sliced)."""
        return int((self.cap_gpus - self.free_gpus).sum())

    @property
    def allocated_gpu_milli(self) -> int:
        """Milli-GPU held by tasks: whole GPUs and shares, plus 125 per busy MIG memory slot."""
        busy_slots = int(np.unpackbits(self.mig_busy.astype(np.uint8)).sum()) if self.mig_capable.any() else 0
        plain = np.where(self.mig_busy == 0, GPU_MILLI - self.gpu_free_milli, 0)
        return int(plain[self.gpu_exists].sum()) + busy_slots * (GPU_MILLI // MIG_SLOTS)

    # --------------------------------------------------------------------------------------------- fit

    def fit_counts(self, task: Resources) -> np.ndarray:
        """How many tasks of `task` each node can take now (0 on unhealthy nodes). Whole GPUs count idle GPUs
        (`free_gpus`), a share counts per GPU how many copies fit in its free milli, a MIG slice counts the slices
        that can be placed without overlap under the profile's placement rules. The caller owns the array."""
        return self.fits.counts(task)

    def label_mask(self, key: str, value: str) -> np.ndarray:
        """Nodes whose label `key` equals `value` (cached: labels never change)."""
        mask = self._label_masks.get((key, value))
        if mask is None:
            mask = np.array([n.labels.get(key) == value for n in self.nodes], dtype=bool)
            self._label_masks[(key, value)] = mask
        return mask

    def model_mask(self, models: Sequence[str]) -> np.ndarray:
        """Nodes whose GPU model is one of `models`."""
        wanted = [i for i, m in enumerate(self.gpu_models) if m in models]
        return np.isin(self.model_idx, wanted)

    # --------------------------------------------------------------------------------------------- changes

    def allocate(self, alloc: Allocation) -> None:
        self._apply(alloc, -1)

    def release(self, alloc: Allocation) -> None:
        self._apply(alloc, +1)

    def _apply(self, alloc: Allocation, sign: int) -> None:
        """Take (sign -1) or give back (+1) an allocation, all of it or nothing: every check runs before any
        array changes."""
        nodes, counts, task = alloc.nodes, alloc.counts, alloc.task
        verb = "over-allocate" if sign < 0 else "release more than allocated on"
        if not (task.mig or self.mig_carved) and (sign < 0 or alloc.gpu_idx is not None or not task.gpus):
            self._apply_scalar(alloc, sign, verb)
            return
        plain: list[tuple[np.ndarray, np.ndarray]] = []
        for need, free, cap in ((task.cpu_milli, self.free_cpu_milli, self.cap_cpu_milli),
                                (task.mem_mib, self.free_mem_mib, self.cap_mem_mib)):
            if not need:
                continue
            after = free[nodes] + sign * need * counts
            bad = (after < 0) | (after > cap[nodes])
            if bad.any():
                raise ValueError(f"allocation would {verb} node {self.nodes[int(nodes[np.argmax(bad)])].name}")
            plain.append((free, after))
        gpu_rows = self._gpu_after(alloc, sign, verb) if task.wants_gpu else None
        for free, after in plain:
            free[nodes] = after
        if gpu_rows is not None:
            rows, busy_rows, carved = gpu_rows
            # whole GPUs go from idle to held and back, one for one: no need to recount idle GPUs
            whole = bool(task.gpus) and not task.mig
            idle_before = None if whole else self._idle_count(nodes)
            self.gpu_free_milli[nodes] = rows
            if not whole:
                self.mig_busy[nodes] = busy_rows
            for key, value in carved.items():
                if value:
                    self.mig_carved[key] = value
                else:
                    self.mig_carved.pop(key, None)
            if idle_before is None:
                delta = sign * task.gpus * counts
                self.free_gpu_milli[nodes] += delta * GPU_MILLI
            else:
                delta = self._idle_count(nodes) - idle_before
                self.free_gpu_milli[nodes] = rows.sum(axis=1)
            self.free_gpus[nodes] += delta
            self.free_gpus_total += int(delta[self.healthy[nodes]].sum())
        self.tasks_running[nodes] -= sign * counts
        for book, key in ((self.qos_tasks, task.qos), (self.kind_tasks, gpu_kind(task))):
            if key:
                per_node = book.setdefault(key, np.zeros(len(self.nodes), dtype=np.int64))
                per_node[nodes] -= sign * counts
        self.version[nodes] += 1
        self.fits.log.add(nodes.tolist())

    def _apply_scalar(self, alloc: Allocation, sign: int, verb: str) -> None:
        """`_apply` for whole GPUs, shares or no GPU with no MIG partition on the cluster, node by node on scalars
        (an allocation spans few nodes): no share row is copied and no idle GPU recounted. The same checks, in the
        same order, as the general path: CPU on every node, memory on every node, then the GPUs node by node;
        nothing changes before all pass."""
        task = alloc.task
        cpu_need, mem_need = task.cpu_milli * sign, task.mem_mib * sign
        nodes, counts = alloc.nodes.tolist(), alloc.counts.tolist()
        pairs = list(zip(nodes, counts, strict=True))
        for need, free, cap in ((cpu_need, self.free_cpu_milli, self.cap_cpu_milli),
                                (mem_need, self.free_mem_mib, self.cap_mem_mib)):
            if need:
                for node, count in pairs:
                    if not 0 <= free.item(node) + need * count <= cap.item(node):
                        raise ValueError(f"allocation would {verb} node {self.nodes[node].name}")
        rows: list[dict[int, tuple[int, int]]] = []  # per node: GPU -> free milli before and after
        if task.gpus or task.gpu_milli:
            given = None if alloc.gpu_idx is None else alloc.gpu_idx.tolist()
            chosen: list[int] = []
            for node, count in pairs:
                choose = self._share_choice if task.gpu_milli else self._whole_choice
                rows.append(choose(node, count, task, given, len(chosen), sign, verb, chosen))
            if given is None:
                object.__setattr__(alloc, "gpu_idx", np.array(chosen, dtype=np.int64))
        books = [self.tasks_running]
        for book, key in ((self.qos_tasks, task.qos), (self.kind_tasks, gpu_kind(task))):
            if key:
                per_node = book.get(key)
                if per_node is None:
                    per_node = book[key] = np.zeros(len(self.nodes), dtype=np.int64)
                books.append(per_node)
        free_cpu, free_mem, version = self.free_cpu_milli, self.free_mem_mib, self.version
        for node, count in pairs:
            if cpu_need:
                free_cpu[node] = free_cpu.item(node) + cpu_need * count
            if mem_need:
                free_mem[node] = free_mem.item(node) + mem_need * count
            for book in books:
                book[node] = book.item(node) - sign * count
            version[node] = version.item(node) + 1
        if rows:
            self._write_gpus(nodes, rows)
        self.fits.log.add(nodes)

    def _write_gpus(self, nodes: list[int], rows: list[dict[int, tuple[int, int]]]) -> None:
        """Apply checked GPU changes (`rows[i]`: GPU -> free milli before and after, on `nodes[i]`); the idle counts
        and free milli per node and the healthy free total follow."""
        milli, free_gpus, free_milli, healthy = self.gpu_free_milli, self.free_gpus, self.free_gpu_milli, self.healthy
        for node, changes in zip(nodes, rows, strict=True):
            idle = moved = 0
            for gpu, (before, after) in changes.items():
                milli[node, gpu] = after
                idle += (after == GPU_MILLI) - (before == GPU_MILLI)
                moved += after - before
            free_gpus[node] = free_gpus.item(node) + idle
            free_milli[node] = free_milli.item(node) + moved
            if healthy.item(node):
                self.free_gpus_total += idle

    def _whole_choice(self, node: int, count: int, task: Resources, given: list[int] | None, pos: int, sign: int,
                      verb: str, chosen: list[int]) -> dict[int, tuple[int, int]]:
        """The whole GPUs of `node` that `count` tasks take or give back: `given[pos:...]`, checked, or (taking, none
        given) the idle ones with the lowest index; appended to `chosen`, returned with their free milli before and
        after. No GPU holds a MIG slice (none is carved)."""
        need, width = count * task.gpus, self.cap_gpus.item(node)
        free = self.gpu_free_milli[node].tolist()
        if given is None:
            gpus = [g for g in range(width) if free[g] == GPU_MILLI][:need]
            valid = len(gpus) == need  # idle GPUs: taking them is within bounds
        else:
            gpus = given[pos:pos + need]
            valid = (len(gpus) == need and len(set(gpus)) == need and all(0 <= g < width for g in gpus)
                     and all(0 <= free[g] + sign * GPU_MILLI <= GPU_MILLI for g in gpus))
        if not valid:
            raise ValueError(f"allocation would {verb} node {self.nodes[node].name}")
        chosen.extend(gpus)
        return {g: (free[g], free[g] + sign * GPU_MILLI) for g in gpus}

    def _share_choice(self, node: int, count: int, task: Resources, given: list[int] | None, pos: int, sign: int,
                      verb: str, chosen: list[int]) -> dict[int, tuple[int, int]]:
        """The GPU of each of `count` shares on `node`, task by task: `given[pos + k]`, checked, or (taking, none
        given) the fullest GPU the share fits on, the lowest index among equals; appended to `chosen`, returned
        with the free milli before and after of every GPU touched. No GPU holds a MIG slice (none is carved)."""
        width, milli, name = self.cap_gpus.item(node), task.gpu_milli, self.nodes[node].name
        row = self.gpu_free_milli[node].tolist()
        before = {}
        for k in range(count):
            if given is None:
                if sign > 0:
                    raise ValueError("a share is released through the allocation that placed it (its gpu_idx)")
                fits = [g for g in range(width) if row[g] >= milli]
                if not fits:
                    raise ValueError(f"allocation would {verb} node {name}")
                gpu = min(fits, key=row.__getitem__)
            else:
                gpu = given[pos + k]
                if not 0 <= gpu < width or not 0 <= row[gpu] + sign * milli <= GPU_MILLI:
                    raise ValueError(f"allocation would {verb} node {name} (GPU {gpu})")
            before.setdefault(gpu, row[gpu])
            row[gpu] += sign * milli
            chosen.append(gpu)
        return {g: (free, row[g]) for g, free in before.items()}

    def _idle_count(self, nodes: np.ndarray) -> np.ndarray:
        rows = self.gpu_free_milli[nodes]
        return ((rows == GPU_MILLI) & (self.mig_busy[nodes] == 0) & self.gpu_exists[nodes]).sum(axis=1)

    def _gpu_after(self, alloc: Allocation, sign: int, verb: str,
                   ) -> tuple[np.ndarray, np.ndarray, dict[tuple[int, int], dict[int, str]]]:
        """The GPU rows of the allocation's nodes after applying it, GPU choices resolved and recorded."""
        nodes, counts, task = alloc.nodes, alloc.counts, alloc.task
        rows = self.gpu_free_milli[nodes]  # integer-array indexing copies already
        busy_rows = self.mig_busy[nodes]
        carved_after: dict[tuple[int, int], dict[int, str]] = {}
        per_task = task.gpus or 1
        idx = alloc.gpu_idx
        starts = alloc.mig_start
        chosen_idx: list[int] = []
        chosen_starts: list[int] = []
        pos = 0
        whole = bool(task.gpus) and not task.mig
        for r, (node, count) in enumerate(zip(nodes.tolist(), counts.tolist(), strict=True)):
            if whole and (idx is not None or sign < 0):
                # whole GPUs: every task of the node at once (the common case, kept out of Python loops)
                need = count * per_task
                given = None if idx is None else idx[pos:pos + need]
                pos += need
                chosen_idx.extend(self._whole_gpus(node, rows[r], busy_rows[r], need, given, sign, verb, carved_after))
                continue
            name, width = self.nodes[node].name, int(self.cap_gpus[node])
            for _ in range(count):
                given = None if idx is None else idx[pos:pos + per_task].tolist()
                pos += per_task
                if task.mig:
                    start = None if starts is None else int(starts[len(chosen_starts)])
                    gpu, start = self._take_mig(node, r, rows, busy_rows, carved_after, task.mig, sign,
                                                None if given is None else given[0], start, name, verb)
                    chosen_idx.append(gpu)
                    chosen_starts.append(start)
                    continue
                milli = GPU_MILLI if task.gpus else task.gpu_milli
                if given is None:
                    given = self._choose_gpus(rows[r, :width], busy_rows[r, :width], per_task, milli, sign)
                    if given is None:
                        raise ValueError(f"allocation would {verb} node {name}")
                for gpu in given:
                    after = rows[r, gpu] + sign * milli
                    if not 0 <= gpu < width or after < 0 or after > GPU_MILLI or busy_rows[r, gpu]:
                        raise ValueError(f"allocation would {verb} node {name} (GPU {gpu})")
                    rows[r, gpu] = after
                    if sign < 0 and (node, gpu) in self.mig_carved:
                        carved_after[(node, gpu)] = {}  # an idle GPU repartitioned to run whole or shared work
                chosen_idx.extend(given)
        if idx is None:
            object.__setattr__(alloc, "gpu_idx", np.array(chosen_idx, dtype=np.int64))
        if task.mig and starts is None:
            object.__setattr__(alloc, "mig_start", np.array(chosen_starts, dtype=np.int64))
        return rows, busy_rows, carved_after

    def _whole_gpus(self, node: int, row: np.ndarray, busy: np.ndarray, need: int, given: np.ndarray | None,
                    sign: int, verb: str, carved_after: dict[tuple[int, int], dict[int, str]]) -> list[int]:
        """`need` whole GPUs of one node at once, `given` or (taking) the lowest-index idle ones, checked and applied
        to `row` and `busy` (copies of the node's rows); a taken GPU's MIG partition is dropped. Returns them."""
        width = int(self.cap_gpus[node])
        if given is None:  # distinct, in range, idle: only the count needs checking
            chosen = np.flatnonzero((row[:width] == GPU_MILLI) & (busy[:width] == 0))[:need]
            valid = chosen.size == need
        else:
            chosen = np.asarray(given, dtype=np.int64)
            listed = chosen.tolist()
            valid = (len(listed) == need and len(set(listed)) == need and min(listed, default=0) >= 0
                     and max(listed, default=0) < width)
        after = row[chosen] + sign * GPU_MILLI if valid else chosen
        if not valid or (after < 0).any() or (after > GPU_MILLI).any() or busy[chosen].any():
            raise ValueError(f"allocation would {verb} node {self.nodes[node].name}")
        row[chosen] = after
        if sign < 0 and self.mig_carved:
            for gpu in chosen.tolist():
                if (node, gpu) in self.mig_carved:
                    carved_after[(node, gpu)] = {}
        return chosen.tolist()

    @staticmethod
    def _choose_gpus(row: np.ndarray, busy: np.ndarray, k: int, milli: int, sign: int) -> list[int] | None:
        """GPUs for one task when the place plugin named none: take the lowest-index idle GPUs (whole) or the fullest
        GPU the share fits on; give back the highest-index fully held GPUs (only whole GPUs are released this way)."""
        if sign < 0:
            if milli == GPU_MILLI:
                ok = np.flatnonzero((row == GPU_MILLI) & (busy == 0))
                return ok[:k].tolist() if ok.size >= k else None
            ok = np.flatnonzero((row >= milli) & (busy == 0))
            if ok.size == 0:
                return None
            return [int(ok[np.argmin(row[ok])])]  # argmin: the first of equals, the lowest index
        if milli != GPU_MILLI:
            raise ValueError("a share is released through the allocation that placed it (its gpu_idx)")
        held = np.flatnonzero((row == 0) & (busy == 0))
        return held[::-1][:k].tolist() if held.size >= k else None

    def _take_mig(self, node: int, r: int, rows: np.ndarray, busy_rows: np.ndarray,
                  carved_after: dict[tuple[int, int], dict[int, str]], profile_name: str, sign: int,
                  gpu: int | None, start: int | None, name: str, verb: str) -> tuple[int, int]:
        geometry = self.mig_geometry[node]
        profile = geometry.get(profile_name) if geometry else None
        if profile is None:
            raise ValueError(f"node {name} has no GPU that offers MIG profile {profile_name}")
        if sign > 0:
            if gpu is None or start is None or not busy_rows[r, gpu] & profile.mask(start) == profile.mask(start):
                raise ValueError(f"allocation would {verb} node {name} (MIG {profile_name})")
            busy_rows[r, gpu] &= ~profile.mask(start)
            if busy_rows[r, gpu] == 0:
                rows[r, gpu] = GPU_MILLI
            return gpu, start
        candidates = [gpu] if gpu is not None else sorted(
            range(int(self.cap_gpus[node])), key=lambda g: (busy_rows[r, g] == 0, g))  # used MIG GPUs first
        for g in candidates:
            key = (node, g)
            carved = dict(carved_after.get(key, self.mig_carved.get(key, {})))
            options = slice_starts(int(busy_rows[r, g]), bool(rows[r, g] != GPU_MILLI), carved, geometry,  # type: ignore[arg-type]
                                   profile, start is not None)
            if start is not None and start not in options:
                continue
            if options:
                s = start if start is not None else options[0]
                if busy_rows[r, g] == 0 and any(
                        overlaps(geometry, n, st, profile.mask(s)) for st, n in carved.items()):  # type: ignore[arg-type]
                    carved = {}  # idle GPU: repartitioned
                carved = {st: n for st, n in carved.items()
                          if not overlaps(geometry, n, st, profile.mask(s))}  # type: ignore[arg-type]
                carved[s] = profile_name
                carved_after[key] = carved
                busy_rows[r, g] |= profile.mask(s)
                rows[r, g] = 0
                return g, s
        raise ValueError(f"allocation would {verb} node {name} (no room for MIG {profile_name})")

    def set_health(self, node: int, healthy: bool) -> None:
        """Mark a node up or down; a down node's free GPUs are out of reach until it is up again."""
        if bool(self.healthy[node]) == healthy:
            return
        self.fits.log.add([node])
        self.healthy[node] = healthy
        self.free_gpus_total += int(self.free_gpus[node]) * (1 if healthy else -1)

    def txn(self) -> Txn:
        return Txn(self)

