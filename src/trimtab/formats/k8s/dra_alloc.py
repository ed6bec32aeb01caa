"""Structured allocation of ResourceClaims on one node, as the DRA allocator does it: every request of every claim
gets its devices (a count, or all matching ones; firstAvailable alternatives in order), each device matches its
class's and the request's selectors, is not in another claim's allocation, fits its pool's shared counters, and
keeps every matchAttribute constraint.

Owns allocate (a search over the candidates, in slice order) and Allocated (one claim's result, with the
`status.allocation` it writes). Device-to-selector matches are cached across calls."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trimtab.formats.k8s.cel import activation, compile_selector
from trimtab.formats.k8s.dra import ClaimSpec, Device, DeviceId, Inventory, Request, attribute_value

SEARCH_STEPS = 200_000  # devices tried per allocate call before it gives up (the allocator has a like bound)
_MATCH_CACHE: dict[tuple[str, Any], tuple[bool, str]] = {}
_MATCH_CACHE_MAX = 500_000


@dataclass(frozen=True, slots=True)
class Allocated:
    """One claim's devices: (request name, "request/subrequest" for a firstAvailable choice; device)."""

    results: tuple[tuple[str, Device], ...]

    def status(self, spec: ClaimSpec, inv: Inventory, node: str) -> dict[str, Any]:
        """The claim's `status.allocation`: results, configs (the classes' then the claim's) and, for node-local
        devices, the node selector that pins the claim to `node`."""
        results = [{"request": r, "driver": d.driver, "pool": d.pool, "device": d.name} for r, d in self.results]
        config: list[dict[str, Any]] = []
        by_class: dict[str, list[str]] = {}
        for top in spec.requests:
            for name, _ in self.results:
                if name.split("/")[0] == top.name:
                    chosen = _chosen(top, name)
                    by_class.setdefault(chosen.class_name, []).append(name)
                    break
        for class_name, names in by_class.items():
            cls = inv.classes.get(class_name)
            for c in cls.config if cls else ():
                config.append({"source": "FromClass", "requests": names, **c})
        for c in spec.config:
            config.append({"source": "FromClaim", **dict(c)})
        out: dict[str, Any] = {"devices": {"results": results, **({"config": config} if config else {})}}
        if any(d.node for _, d in self.results):
            out["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}
        return out


def _chosen(top: Request, name: str) -> Request:
    if not top.alternatives:
        return top
    sub = name.partition("/")[2]
    return next(a for a in top.alternatives if a.name == sub)


def matches(inv: Inventory, request: Request, device: Device) -> tuple[bool, str]:
    """Whether a device is of the request's class and matches every selector (class's, then request's); the
    runtime error, if one stopped it."""
    cls = inv.classes.get(request.class_name)
    if cls is None:
        return False, f"DeviceClass {request.class_name} does not exist"
    key_device = (device.id, tuple(sorted(device.attributes.items())), tuple(sorted(device.capacity.items())))
    for expr in (*cls.selectors, *request.selectors):
        key = (expr, key_device)
        hit = _MATCH_CACHE.get(key)
        if hit is None:
            compiled = compile_selector(expr)
            hit = (False, compiled) if isinstance(compiled, str) else compiled.matches(
                activation(device.driver, device.attributes, device.capacity, device.multiple))
            if len(_MATCH_CACHE) >= _MATCH_CACHE_MAX:
                _MATCH_CACHE.clear()
            _MATCH_CACHE[key] = hit
        if not hit[0]:
            return hit
    return True, ""


def allocate(inv: Inventory, specs: Sequence[ClaimSpec], node: str,
             taken: set[DeviceId]) -> list[Allocated] | str:
    """Devices of `node` (and allNodes devices) for every claim of `specs`, none in `taken`; or why not."""
    search = _Search(inv, node, taken)
    if search.solve(specs):
        return [Allocated(tuple(r)) for r in search.results]
    return search.why or f"no devices of node {node} satisfy the claims"


class _Search:
    def __init__(self, inv: Inventory, node: str, taken: set[DeviceId]) -> None:
        self.inv, self.node, self.taken = inv, node, set(taken)
        self.devices = inv.node_devices(node)
        self.counters: dict[tuple[str, str, str, str], Fraction] = {}
        for d in self.devices:
            if d.id in taken:
                self._count(d, 1)
        self.results: list[list[tuple[str, Device]]] = []
        self.why = ""
        self.steps = 0

    def solve(self, specs: Sequence[ClaimSpec]) -> bool:
        items = [(ci, r) for ci, spec in enumerate(specs) for r in spec.requests]
        self.results = [[] for _ in specs]
        self.specs = specs
        return self._item(items, 0)

    def _item(self, items: list[tuple[int, Request]], i: int) -> bool:
        if i == len(items):
            return True
        ci, top = items[i]
        for req, name in ((a, f"{top.name}/{a.name}") for a in top.alternatives) if top.alternatives \
                else ((top, top.name),):
            candidates = self._candidates(req)
            if req.all:
                if candidates and len(candidates) == len(self._matching(req)) and \
                        self._take(ci, name, candidates, 0, len(candidates), items, i):
                    return True
            elif self._take(ci, name, candidates, 0, req.count, items, i):
                return True
        return False

    def _take(self, ci: int, name: str, candidates: list[Device], start: int, left: int,
              items: list[tuple[int, Request]], i: int) -> bool:
        """Choose `left` more devices of `candidates[start:]` for request `name` of claim `ci`, then go on."""
        if left == 0:
            return self._item(items, i + 1)
        for k in range(start, len(candidates) - left + 1):
            self.steps += 1
            if self.steps > SEARCH_STEPS:
                self.why = f"allocation on node {self.node} gave up after {SEARCH_STEPS} tries"
                return False
            d = candidates[k]
            if d.id in self.taken or not self._fits(d) or not self._constraints_hold(ci, name, d):
                continue
            self.taken.add(d.id)
            self._count(d, 1)
            self.results[ci].append((name, d))
            if self._take(ci, name, candidates, k + 1, left - 1, items, i):
                return True
            self.results[ci].pop()
            self._count(d, -1)
            self.taken.discard(d.id)
        return False

    def _matching(self, req: Request) -> list[Device]:
        out = []
        for d in self.devices:
            ok, why = matches(self.inv, req, d)
            if ok:
                out.append(d)
            elif why:
                self.why = why
        return out

    def _candidates(self, req: Request) -> list[Device]:
        return [d for d in self._matching(req) if d.id not in self.taken]

    def _constraints_hold(self, ci: int, name: str, device: Device) -> bool:
        top = name.split("/")[0]
        for on, attribute in self.specs[ci].constraints:
            if on and top not in on and name not in on:
                continue
            value = attribute_value(device, attribute)
            if value is None:
                return False
            for other_name, other in self.results[ci]:
                if (not on or other_name.split("/")[0] in on or other_name in on) and \
                        attribute_value(other, attribute) != value:
                    return False
        return True

    def _fits(self, device: Device) -> bool:
        for (counter_set, counter), amount in device.counters:
            key = (device.driver, device.pool, counter_set, counter)
            have = self.inv.counter_sets.get((device.driver, device.pool, counter_set), {}).get(counter)
            if have is None or self.counters.get(key, Fraction(0)) + amount > have:
                return False
        return True

    def _count(self, device: Device, sign: int) -> None:
        for (counter_set, counter), amount in device.counters:
            key = (device.driver, device.pool, counter_set, counter)
            self.counters[key] = self.counters.get(key, Fraction(0)) + sign * amount


def devices_for(spec: ClaimSpec) -> int:
    """How many devices a claim asks at least (the first alternative of firstAvailable; 1 for `all`), as the
    model counts them."""
    return sum(_least(r) for r in spec.requests)


def _least(r: Request) -> int:
    if r.alternatives:
        return _least(r.alternatives[0])
    return 1 if r.all else r.count


def capable_nodes(inv: Inventory, specs: Sequence[ClaimSpec], nodes: Sequence[str]) -> Iterator[str]:
    """The nodes whose devices could hold every claim of `specs` if none were in use (preemption may free
    them)."""
    for node in nodes:
        if not isinstance(allocate(inv, specs, node, set()), str):
            yield node


def model_gpus(inv: Inventory, devices: Sequence[Device]) -> int:
    """How many of a node's devices can be allocated at once, as the model counts its GPUs: every device that
    consumes no shared counter, plus, for partitions (MIG-like), as many as fit their counters smallest first."""
    whole = sum(1 for d in devices if not d.counters)
    used: dict[tuple[str, str, str, str], Fraction] = {}
    parts = 0
    for d in sorted((d for d in devices if d.counters), key=lambda d: sum(a for _, a in d.counters)):
        need = {(d.driver, d.pool, cs, c): a for (cs, c), a in d.counters}
        have = {key: inv.counter_sets.get(key[:3], {}).get(key[3], Fraction(0)) for key in need}
        if all(used.get(key, Fraction(0)) + a <= have[key] for key, a in need.items()):
            for key, a in need.items():
                used[key] = used.get(key, Fraction(0)) + a
            parts += 1
    return whole + parts
