"""DRA on a live cluster, as kube-scheduler's DynamicResources plugin does it: the inventory of each cycle from the
informers, the claims a pod's binding must allocate and reserve first, and those writes.

Owns ClaimKeeper. Before a pod is bound, each of its claims gets the finalizer (an update), then
`status.allocation` (unless already allocated) and `status.reservedFor` (the pod) in one status update; both
carry the resourceVersion read, so a concurrent change (409) sends the gang back to the queue. A gang's claims
are planned together (no device twice), written before any of its pods is bound, and rolled back when its
binding fails. Allocations in flight count as taken until the informer shows them. Deallocation, once no pod
uses a claim, is the claim controller's, as in Kubernetes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from trimtab.formats import FormatError
from trimtab.formats.k8s.documents import GPU, Doc
from trimtab.formats.k8s.dra import FINALIZER, Claim, DeviceId, Inventory, read_inventory
from trimtab.formats.k8s.dra_alloc import allocate
from trimtab.formats.k8s.dra_extended import ANNOTATION as EXTENDED
from trimtab.formats.k8s.dra_extended import claim_manifest, extended_claim
from trimtab.formats.k8s.pod_claims import held_devices, pod_claims
from trimtab.kube.api import KubeApi

log = logging.getLogger(__name__)
Obj = dict[str, Any]


@dataclass(slots=True)
class ClaimWrite:
    """One claim to write before a pod's binding: the claim as read, the allocation to store (None: allocated
    already) and the pod to reserve it for."""

    claim: Obj
    allocation: Obj | None
    pod: Obj
    node: str
    devices: tuple[DeviceId, ...] = ()
    mappings: tuple[tuple[str, str, str], ...] = ()  # a claim to create for extended resources: its mappings
    created: bool = False  # it was created by this write (so a rollback deletes it)
    stale: bool = False  # the pod's claim for extended resources from an attempt that did not bind: delete it

    @property
    def key(self) -> str:
        """The claim's uid; before a claim for extended resources is created, its pod's."""
        return self.claim["metadata"].get("uid") or "new:" + self.pod["metadata"]["uid"]


def _doc(obj: Obj) -> Doc:
    meta = obj["metadata"]
    return Doc(f"{obj.get('kind', 'Pod')} {meta.get('namespace', '')}/{meta['name']}", obj, obj.get("kind", "Pod"),
               obj.get("apiVersion", "v1"), meta["name"], meta.get("namespace") or "default", [], [])


def pod_claim_objects(pod: Obj, inv: Inventory) -> list[Claim]:
    """The claims of a pod the inventory knows (by name, or named in the pod's status for a template)."""
    ns = pod["metadata"]["namespace"]
    generated = {s.get("name"): s.get("resourceClaimName")
                 for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    out = []
    for entry in pod["spec"].get("resourceClaims") or []:
        name = entry.get("resourceClaimName") or generated.get(entry.get("name"))
        if name and (claim := inv.claims.get((ns, name))) is not None:
            out.append(claim)
    return out


def claims_state(pod: Obj, inv: Inventory) -> tuple[Any, ...]:
    """What a pending pod's reading depends on beyond the pod itself: the devices and the state of its claims."""
    return inv.devices_key, tuple((c.name, c.allocated is not None, c.node, c.deleting)
                                  for c in pod_claim_objects(pod, inv))


def holding_devices(pod: Obj, inv: Inventory) -> int:
    """The devices a bound pod holds through its claims."""
    return held_devices(pod["metadata"]["uid"], pod_claim_objects(pod, inv))


def live_inventory(classes: Iterable[Obj], slices: Iterable[Obj], claims: Iterable[Obj]) -> Inventory:
    """The Inventory of the cluster's DRA objects (list items); when one holds a field trimtab cannot read, the
    claims alone that it can (the API server validated them)."""
    claims = list(claims)
    try:
        return read_inventory([_doc(o) for o in (*classes, *slices, *claims)], live=True)
    except FormatError as exc:
        log.warning("DRA objects not read: %s", exc)
        return read_inventory([_doc(o) for o in claims if _readable(o)], live=True)


class ClaimKeeper:
    """The DRA state of a live scheduler: `inventory(...)` each cycle, `plan` on the cycle's thread, `write` and
    `roll_back` on a writer thread."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self._lock = threading.Lock()
        self._inflight: dict[str, tuple[DeviceId, ...]] = {}  # claim uid -> the devices being allocated to it
        self._created: set[str] = set()  # claims this created that the informer may not show yet
        self._objects: dict[tuple[str, str], Obj] = {}
        self._extended_of: dict[str, Obj] = {}  # pod uid -> the claim made for its extended resources
        self._devices_version: tuple[Any, ...] = ()
        self._devices_key: object = object()

    def inventory(self, classes: Iterable[Obj], slices: Iterable[Obj], claims: Iterable[Obj]) -> Inventory:
        """The cycle's Inventory; its `devices_key` stays while no DeviceClass or ResourceSlice changes."""
        classes, slices, claims = list(classes), list(slices), list(claims)
        inv = live_inventory(classes, slices, claims)
        version = tuple(sorted((o["metadata"].get("uid"), o["metadata"].get("resourceVersion"))
                               for o in (*classes, *slices)))
        if version != self._devices_version:
            self._devices_version, self._devices_key = version, object()
        inv.devices_key = self._devices_key
        self._objects = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in claims}
        self._extended_of = {ref["uid"]: o for o in claims
                             if (o["metadata"].get("annotations") or {}).get(EXTENDED) == "true"
                             for ref in o["metadata"].get("ownerReferences") or []
                             if ref.get("kind") == "Pod" and ref.get("controller")}
        with self._lock:
            allocated = {c.uid for c in inv.claims.values() if c.allocated is not None}
            known = {c.uid for c in inv.claims.values()}
            self._inflight = {u: d for u, d in self._inflight.items() if u not in allocated and (
                u in known or u in self._created or u.startswith("new:"))}
            self._created &= set(self._inflight)
        return inv

    def plan(self, inv: Inventory, pods: list[Obj], nodes: list[str]) -> list[ClaimWrite] | str:
        """The claim writes that binding `pods` to `nodes` needs (devices none else has or is being given): their
        claims', and a claim to create for the extended resources DRA backs on that node; or why they cannot be
        made. The planned devices count as taken from now on (until `roll_back`)."""
        with self._lock:
            taken = inv.in_use() | {d for devices in self._inflight.values() for d in devices}
        writes: list[ClaimWrite] = []
        for pod, node in zip(pods, nodes, strict=True):
            try:
                done = self._plan_pod(inv, pod, node, taken, writes)
            except FormatError as exc:
                return str(exc)
            if done is not None:
                return f"pod {pod['metadata']['namespace']}/{pod['metadata']['name']} on node {node}: {done}"
        with self._lock:
            self._inflight.update((w.key, w.devices) for w in writes if w.devices)
        return writes

    def _plan_pod(self, inv: Inventory, pod: Obj, node: str, taken: set[DeviceId],
                  writes: list[ClaimWrite]) -> str | None:
        """Add one pod's claim writes to `writes` (its devices to `taken`); why they cannot be made, else None."""
        ext = extended_claim(_doc(pod), pod["spec"], "spec", inv,
                             skip=(GPU,) if inv.own_gpus.get(node, 0) > 0 else ()) if inv.classes else None
        resolved = pod_claims(_doc(pod), pod["spec"], pod.get("status") or {}, "spec", inv).claims \
            if pod["spec"].get("resourceClaims") else ()
        planned = {w.claim["metadata"].get("uid"): w.node for w in writes if w.allocation is not None}
        unallocated = []
        for claim in (c for _, c, _ in resolved if c is not None):
            on = claim.node if claim.allocated is not None else planned.get(claim.uid)
            if on is None:
                unallocated.append(claim)
                continue
            if on and on != node:
                return f"ResourceClaim {claim.namespace}/{claim.name} is allocated on node {on}"
            writes.append(ClaimWrite(self._objects[(claim.namespace, claim.name)], None, pod, node))
        if (stale := self._extended_of.get(pod["metadata"]["uid"])) is not None:
            writes.append(ClaimWrite(stale, None, pod, node, stale=True))  # its devices stay taken meanwhile
        specs = [c.spec for c in unallocated] + ([ext.spec] if ext else [])
        result = allocate(inv, specs, node, taken)
        if isinstance(result, str):
            return result
        for claim, alloc in zip([*unallocated, None], result, strict=False):
            devices = tuple(d.id for _, d in alloc.results)
            taken.update(devices)
            if claim is None and ext is not None:
                writes.append(ClaimWrite(claim_manifest(pod, ext), alloc.status(ext.spec, inv, node), pod, node,
                                         devices, ext.mappings))
            elif claim is not None:
                writes.append(ClaimWrite(self._objects[(claim.namespace, claim.name)],
                                         alloc.status(claim.spec, inv, node), pod, node, devices))
        return None

    def write(self, writes: list[ClaimWrite]) -> list[Obj]:
        """Write each claim (finalizer, then allocation and reservation); the claims as written, in order. Raises
        the API's error at the first refusal, after rolling back those written."""
        for w in (w for w in writes if w.stale):
            try:
                self.api.delete_claim(w.claim)
            except Exception as exc:  # gone already, or it goes with its pod
                log.info("deleting the stale ResourceClaim %s failed: %r", w.claim["metadata"]["name"], exc)
        writes = [w for w in writes if not w.stale]
        written: list[Obj] = []
        latest: dict[str, Obj] = {}  # a claim written for an earlier pod of the gang, as written
        try:
            for w in writes:
                if w.mappings and not w.created:
                    self._create(w)
                uid = w.claim["metadata"].get("uid", "")
                written.append(self._write_one(w, latest.get(uid, w.claim)))
                latest[uid] = written[-1]
                if w.mappings:
                    pod = w.pod["metadata"]
                    self.api.set_extended_claim(pod["namespace"], pod["name"], w.claim["metadata"]["name"], w.mappings)
        except Exception:
            for w in writes[len(written):]:
                if w.created:  # created, then refused its status: it goes too
                    self.roll_back([w], [w.claim])
            self.roll_back(writes[:len(written)], written)
            self.forget(writes[len(written):])
            raise
        return written

    def _create(self, w: ClaimWrite) -> None:
        """Create the claim for a pod's extended resources; its devices stay in flight under its new uid."""
        before = w.key
        w.claim, w.created = self.api.create_claim(w.claim), True
        with self._lock:
            self._inflight[w.key] = self._inflight.pop(before, w.devices)
            self._created.add(w.key)

    def _write_one(self, w: ClaimWrite, claim: Obj) -> Obj:
        if w.allocation is not None and FINALIZER not in (claim["metadata"].get("finalizers") or []):
            claim = {**claim, "metadata": {**claim["metadata"],
                                           "finalizers": [*(claim["metadata"].get("finalizers") or []), FINALIZER]}}
            claim = self.api.update_claim(claim)
        status = dict(claim.get("status") or {})
        if w.allocation is not None:
            if status.get("allocation"):
                raise RuntimeError(f"claim {claim['metadata']['name']} got allocated elsewhere in the meantime")
            status["allocation"] = w.allocation
        pod = w.pod["metadata"]
        status["reservedFor"] = [*(status.get("reservedFor") or []),
                                 {"resource": "pods", "name": pod["name"], "uid": pod["uid"]}]
        return self.api.update_claim({**claim, "status": status}, status=True)

    def roll_back(self, writes: list[ClaimWrite], written: list[Obj]) -> None:
        """Undo claim writes of a gang whose binding failed: its pods leave `reservedFor`, and a claim this
        allocated and no one else reserves is deallocated (as kube-scheduler's Unreserve and PostFilter do)."""
        writes = [w for w in writes if not w.stale]
        last: dict[str, tuple[Obj, set[str], bool]] = {}  # claim uid -> as last written, pods to drop, allocated
        for w in writes:
            if w.created:  # one this made for a pod's extended resources goes, as kube-scheduler's Unreserve does
                try:
                    self.api.delete_claim(next((c for c in written if c["metadata"]["uid"] == w.key), w.claim))
                except Exception as exc:  # it goes with its pod anyway (its owner)
                    log.warning("deleting ResourceClaim %s failed: %r", w.claim["metadata"]["name"], exc)
        for w, claim in zip(writes, written, strict=True):
            if w.created:
                continue
            uid = claim["metadata"].get("uid", "")
            _, pods, allocated = last.get(uid, (claim, set(), False))
            last[uid] = (claim, pods | {w.pod["metadata"]["uid"]}, allocated or w.allocation is not None)
        for claim, pods, allocated in last.values():
            status = dict(claim.get("status") or {})
            status["reservedFor"] = [r for r in status.get("reservedFor") or [] if r.get("uid") not in pods] or None
            if allocated and not status["reservedFor"]:
                status["allocation"] = None
            try:
                self.api.update_claim({**claim, "status": status}, status=True)
            except Exception as exc:  # the claim controller clears it once the pod is gone
                log.warning("rolling back ResourceClaim %s failed: %r", claim["metadata"]["name"], exc)
        self.forget(writes)

    def forget(self, writes: list[ClaimWrite]) -> None:
        """The allocations of `writes` are no longer in flight."""
        with self._lock:
            for w in writes:
                self._inflight.pop(w.key, None)
                self._created.discard(w.key)


def _readable(obj: Obj) -> bool:
    try:
        read_inventory([_doc(obj)], live=True)
    except FormatError:
        return False
    return True
