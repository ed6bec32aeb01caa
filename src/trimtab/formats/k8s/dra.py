"""DRA objects (resource.k8s.io/v1) as the scheduler reads them: DeviceClasses, ResourceSlices, ResourceClaims and
ResourceClaimTemplates become one Inventory of devices, classes, claim specs and allocations.

Owns Device, Request, ClaimSpec, Claim, Inventory and read_inventory. The slices of a pool count only at its
newest generation and only when the pool is complete (every slice of `resourceSliceCount` published), as the
structured allocator has it. Allocation itself is dra_alloc.py."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from trimtab.formats.k8s.cel import Semver, compile_selector, semver
from trimtab.formats.k8s.documents import Doc, int_field, list_field, mapping, quantity

DRA_API = "resource.k8s.io/v1"
DRA_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")
FINALIZER = "resource.kubernetes.io/delete-protection"  # what the scheduler adds before it allocates a claim
MAX_DEVICES_PER_CLAIM = 32  # AllocationResultsMaxSize
DeviceId = tuple[str, str, str]  # driver, pool, device name


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice; `node` is its slice's nodeName ("" for allNodes). `counters` is what it
    consumes of its pool's shared counter sets: ((set, counter), amount)."""

    driver: str
    pool: str
    name: str
    node: str
    attributes: Mapping[str, Any]
    capacity: Mapping[str, Fraction]
    counters: tuple[tuple[tuple[str, str], Fraction], ...] = ()
    multiple: bool = False

    @property
    def id(self) -> DeviceId:
        return (self.driver, self.pool, self.name)


@dataclass(frozen=True, slots=True)
class Request:
    """One device request (or a firstAvailable alternative): `count` devices of a class matching every selector,
    or every matching device (`all`). `alternatives` are firstAvailable's, tried in order."""

    name: str
    class_name: str = ""
    selectors: tuple[str, ...] = ()
    all: bool = False
    count: int = 1
    alternatives: tuple[Request, ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """A claim's `spec.devices`: its requests, its matchAttribute constraints ((request names, attribute); no
    names means every request) and its config (copied into the allocation)."""

    requests: tuple[Request, ...]
    constraints: tuple[tuple[tuple[str, ...], str], ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()


@dataclass(slots=True)
class Claim:
    """A ResourceClaim: its spec, and what its status says: allocated devices (None: not allocated), the node its
    allocation is bound to, and the uids it is reserved for."""

    namespace: str
    name: str
    uid: str
    spec: ClaimSpec
    allocated: tuple[DeviceId, ...] | None = None
    node: str = ""
    reserved_for: tuple[str, ...] = ()
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()
    extended_resource: str = ""


@dataclass(slots=True)
class Inventory:
    """Everything DRA the scheduler knows: `devices` by node name ("" holds the allNodes devices), counter set
    capacities by (driver, pool, set), classes, templates and claims by (namespace, name); `own_gpus` the nodes'
    own GPUs (device plugins), as with_devices finds them. `live`: pods name
    their template claims in their status (a cluster), rather than the claims being still to be made (manifests);
    `devices_key` changes whenever the devices or classes do (what capable-node caches key on)."""

    devices: dict[str, list[Device]] = field(default_factory=dict)
    counter_sets: dict[tuple[str, str, str], dict[str, Fraction]] = field(default_factory=dict)
    classes: dict[str, DeviceClass] = field(default_factory=dict)
    templates: dict[tuple[str, str], ClaimSpec] = field(default_factory=dict)
    claims: dict[tuple[str, str], Claim] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    own_gpus: dict[str, int] = field(default_factory=dict)  # node -> the nvidia.com/gpu it advertises itself
    live: bool = False
    devices_key: object = field(default_factory=object)

    def __bool__(self) -> bool:
        return bool(self.devices or self.claims or self.templates)

    def node_devices(self, node: str) -> list[Device]:
        """The devices a pod on `node` may get: its own and the allNodes ones."""
        return self.devices.get(node, []) + self.devices.get("", [])

    def in_use(self) -> set[DeviceId]:
        """Devices in some claim's allocation (never chosen for another claim)."""
        return {d for c in self.claims.values() if c.allocated for d in c.allocated}


def read_inventory(docs: Iterable[Doc], live: bool = False) -> Inventory:
    """The Inventory of DRA documents (any order). Invalid fields raise FormatError naming the document."""
    inv = Inventory(live=live)
    slices: list[tuple[Doc, dict[str, Any]]] = []
    for doc in docs:
        spec = mapping(doc, doc.data.get("spec"), "spec")
        if doc.kind == "DeviceClass":
            inv.classes[doc.name] = _device_class(doc, spec)
        elif doc.kind == "ResourceSlice":
            slices.append((doc, spec))
        elif doc.kind == "ResourceClaimTemplate":
            inner = mapping(doc, spec.get("spec"), "spec.spec")
            inv.templates[(doc.namespace, doc.name)] = claim_spec(doc, inner, "spec.spec")
        else:
            inv.claims[(doc.namespace, doc.name)] = _claim(doc, spec)
    _read_slices(inv, slices)
    return inv


def _device_class(doc: Doc, spec: dict[str, Any]) -> DeviceClass:
    doc.check_keys(spec, "spec", ("selectors", "config", "extendedResourceName"))
    return DeviceClass(doc.name, _selectors(doc, spec.get("selectors"), "spec.selectors"),
                       tuple(list_field(doc, spec.get("config"), "spec.config")),
                       str(spec.get("extendedResourceName") or ""))


def _selectors(doc: Doc, value: Any, path: str) -> tuple[str, ...]:
    out = []
    for i, sel in enumerate(list_field(doc, value, path)):
        expr = (sel or {}).get("cel", {}).get("expression") if isinstance(sel, dict) else None
        if not isinstance(expr, str) or not expr:
            raise doc.error(f"{path}[{i}].cel.expression", "a selector needs a CEL expression")
        compiled = compile_selector(expr)
        if isinstance(compiled, str):
            raise doc.error(f"{path}[{i}].cel.expression", compiled)
        out.append(expr)
    return tuple(out)


def claim_spec(doc: Doc, spec: dict[str, Any], path: str) -> ClaimSpec:
    """A ResourceClaim's (or template's) spec: `devices.requests`, `constraints` and `config`."""
    devices = mapping(doc, spec.get("devices"), f"{path}.devices")
    doc.check_keys(devices, f"{path}.devices", ("requests", "constraints", "config"))
    requests = tuple(_request(doc, r, f"{path}.devices.requests[{i}]", top=True)
                     for i, r in enumerate(list_field(doc, devices.get("requests"), f"{path}.devices.requests")))
    names = {r.name for r in requests} | {f"{r.name}/{a.name}" for r in requests for a in r.alternatives}
    constraints = []
    for i, c in enumerate(list_field(doc, devices.get("constraints"), f"{path}.devices.constraints")):
        cpath = f"{path}.devices.constraints[{i}]"
        c = mapping(doc, c, cpath)
        attribute = c.get("matchAttribute")
        if not isinstance(attribute, str) or "/" not in attribute:
            raise doc.error(f"{cpath}.matchAttribute", "a fully qualified attribute name (domain/name) is required")
        on = tuple(str(n) for n in list_field(doc, c.get("requests"), f"{cpath}.requests"))
        unknown = [n for n in on if n not in names]
        if unknown:
            raise doc.error(f"{cpath}.requests", f"names no request of this claim: {', '.join(unknown)}")
        constraints.append((on, attribute))
    config = tuple(list_field(doc, devices.get("config"), f"{path}.devices.config"))
    return ClaimSpec(requests, tuple(constraints), config)


def _request(doc: Doc, data: Any, path: str, top: bool) -> Request:
    data = mapping(doc, data, path)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise doc.error(f"{path}.name", "a request needs a name")
    if top:
        exactly, first = data.get("exactly"), data.get("firstAvailable")
        if (exactly is None) == (first is None):
            raise doc.error(path, "exactly one of exactly and firstAvailable is required")
        if first is not None:
            subs = tuple(_request(doc, s, f"{path}.firstAvailable[{i}]", top=False)
                         for i, s in enumerate(list_field(doc, first, f"{path}.firstAvailable")))
            if not subs:
                raise doc.error(f"{path}.firstAvailable", "needs at least one subrequest")
            return Request(name, alternatives=subs)
        data, path = mapping(doc, exactly, f"{path}.exactly"), f"{path}.exactly"
    class_name = data.get("deviceClassName")
    if not isinstance(class_name, str) or not class_name:
        raise doc.error(f"{path}.deviceClassName", "a request names its DeviceClass")
    if data.get("adminAccess"):
        doc.warn(f"{path}.adminAccess", "admin access is not modelled: the request is allocated as any other")
    mode = data.get("allocationMode", "ExactCount")
    if mode not in ("ExactCount", "All"):
        raise doc.error(f"{path}.allocationMode", f"must be ExactCount or All, got {mode!r}")
    count = int_field(doc, data.get("count", 1), f"{path}.count", 1) if mode == "ExactCount" else 0
    if count > MAX_DEVICES_PER_CLAIM:
        raise doc.error(f"{path}.count", f"at most {MAX_DEVICES_PER_CLAIM} devices per claim")
    return Request(name, class_name, _selectors(doc, data.get("selectors"), f"{path}.selectors"), mode == "All",
                   count)


def _claim(doc: Doc, spec: dict[str, Any]) -> Claim:
    meta = doc.data.get("metadata") or {}
    status = mapping(doc, doc.data.get("status"), "status")
    claim = Claim(doc.namespace, doc.name, str(meta.get("uid") or ""), claim_spec(doc, spec, "spec"),
                  deleting=bool(meta.get("deletionTimestamp")))
    allocation = status.get("allocation")
    if isinstance(allocation, dict):
        results = list_field(doc, (allocation.get("devices") or {}).get("results"),
                             "status.allocation.devices.results")
        claim.allocated = tuple((str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
                                for r in results if isinstance(r, dict))
        claim.node = _allocation_node(allocation)
    claim.reserved_for = tuple(str(r.get("uid")) for r in list_field(doc, status.get("reservedFor"),
                                                                      "status.reservedFor") if isinstance(r, dict))
    return claim


def _allocation_node(allocation: Mapping[str, Any]) -> str:
    """The one node an allocation's nodeSelector names by metadata.name ("" when it names none)."""
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for req in (term or {}).get("matchFields") or []:
            if req.get("key") == "metadata.name" and req.get("operator") == "In" and len(req.get("values")) == 1:
                return str(req["values"][0])
    return ""


def _read_slices(inv: Inventory, slices: list[tuple[Doc, dict[str, Any]]]) -> None:
    """Devices of the complete pools at their newest generation (others are skipped with a warning)."""
    pools: dict[tuple[str, str], list[tuple[Doc, dict[str, Any], int, int]]] = {}
    for doc, spec in slices:
        driver = spec.get("driver")
        pool = mapping(doc, spec.get("pool"), "spec.pool")
        if not isinstance(driver, str) or not driver or not isinstance(pool.get("name"), str):
            raise doc.error("spec", "a ResourceSlice needs driver and pool.name")
        gen = int_field(doc, pool.get("generation", 0), "spec.pool.generation", 0)
        count = int_field(doc, pool.get("resourceSliceCount", 1), "spec.pool.resourceSliceCount", 1)
        pools.setdefault((driver, pool["name"]), []).append((doc, spec, gen, count))
    for (driver, pool), members in sorted(pools.items()):
        newest = max(m[2] for m in members)
        current = [m for m in members if m[2] == newest]
        if len(current) != current[0][3]:
            inv.warnings.append(f"ResourceSlice pool {driver}/{pool}: {len(current)} of {current[0][3]} slices "
                                f"of generation {newest} published; its devices are not used until it is complete")
            continue
        for doc, spec, _, _ in current:
            _read_slice(inv, doc, spec, driver, pool)


def _read_slice(inv: Inventory, doc: Doc, spec: dict[str, Any], driver: str, pool: str) -> None:
    node = spec.get("nodeName")
    if not node and not spec.get("allNodes"):
        doc.ignore("spec", "devices selected by nodeSelector or per device are not modelled")
        return
    for i, counter_set in enumerate(list_field(doc, spec.get("sharedCounters"), "spec.sharedCounters")):
        inv.counter_sets[(driver, pool, str(counter_set.get("name")))] = _counters(
            doc, counter_set.get("counters"), f"spec.sharedCounters[{i}].counters")
    for i, dev in enumerate(list_field(doc, spec.get("devices"), "spec.devices")):
        path = f"spec.devices[{i}]"
        dev = mapping(doc, dev, path)
        if not isinstance(dev.get("name"), str):
            raise doc.error(f"{path}.name", "a device needs a name")
        attrs = {str(k): _attribute(doc, v, f"{path}.attributes.{k}")
                 for k, v in mapping(doc, dev.get("attributes"), f"{path}.attributes").items()}
        caps = {str(k): quantity(doc, (v or {}).get("value"), f"{path}.capacity.{k}.value")
                for k, v in mapping(doc, dev.get("capacity"), f"{path}.capacity").items()}
        consumed = tuple(((str(c.get("counterSet")), name), amount)
                         for j, c in enumerate(list_field(doc, dev.get("consumesCounters"), f"{path}.consumesCounters"))
                         for name, amount in _counters(doc, c.get("counters"),
                                                       f"{path}.consumesCounters[{j}].counters").items())
        inv.devices.setdefault(str(node or ""), []).append(
            Device(driver, pool, dev["name"], str(node or ""), attrs, caps, consumed,
                   bool(dev.get("allowMultipleAllocations"))))


def _counters(doc: Doc, value: Any, path: str) -> dict[str, Fraction]:
    return {str(k): quantity(doc, (v or {}).get("value"), f"{path}.{k}.value")
            for k, v in mapping(doc, value, path).items()}


def _attribute(doc: Doc, value: Any, path: str) -> Any:
    value = mapping(doc, value, path)
    for key in ("int", "bool", "string"):
        if key in value:
            return value[key]
    for key in ("ints", "bools", "strings"):
        if key in value:
            return tuple(list_field(doc, value[key], f"{path}.{key}"))
    if "version" in value:
        try:
            return semver(value["version"])
        except ValueError as exc:
            raise doc.error(f"{path}.version", str(exc)) from None
    raise doc.error(path, "an attribute needs one of int, bool, string and version (or their lists)")


def attribute_value(device: Device, name: str) -> Any:
    """A fully qualified attribute of a device (a name of the driver's domain also matches its bare id), as
    matchAttribute compares them; None when absent."""
    if name in device.attributes:
        value = device.attributes[name]
    else:
        domain, _, ident = name.partition("/")
        value = device.attributes.get(ident) if domain == device.driver else None
    return value.text if isinstance(value, Semver) else value
