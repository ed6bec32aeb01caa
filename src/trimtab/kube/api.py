"""The seam to the Kubernetes API server: the kinds trimtab watches and the writes a scheduler makes.

Owns KubeApi: list and watch of a kind as plain dicts (the shape the manifest reader reads) and the Lease, over
lightkube; the writes (pods/binding, the PodScheduled condition, Events, the Eviction API) as JSON bodies on the
light write path (wire.py). Everything else in trimtab.kube speaks to the cluster through it, so a test can stand
a fake in its place."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from lightkube import ALL_NS, Client, KubeConfig
from lightkube.core.resource import Resource
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.batch_v1 import Job
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node, Pod, ResourceQuota
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice
from lightkube.resources.scheduling_v1 import PriorityClass

from trimtab.kube.wire import Wire


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind trimtab watches: its lightkube resource, and the apiVersion/kind its list items are given (list
    responses leave them out; the reader needs them)."""

    name: str
    resource: type[Resource]
    api_version: str
    kind: str
    namespaced: bool


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("nodes", Node, "v1", "Node", False),
    Kind("pods", Pod, "v1", "Pod", True),
    Kind("priorityclasses", PriorityClass, "scheduling.k8s.io/v1", "PriorityClass", False),
    Kind("namespaces", Namespace, "v1", "Namespace", False),
    Kind("resourcequotas", ResourceQuota, "v1", "ResourceQuota", True),
    Kind("jobs", Job, "batch/v1", "Job", True),
    Kind("workloadpodgroups", create_namespaced_resource("scheduling.k8s.io", "v1beta1", "PodGroup", "podgroups"),
         "scheduling.k8s.io/v1beta1", "PodGroup", True),
    Kind("podgroups", create_namespaced_resource("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups"),
         "scheduling.x-k8s.io/v1alpha1", "PodGroup", True),
    Kind("volcanopodgroups", create_namespaced_resource("scheduling.volcano.sh", "v1beta1", "PodGroup",
                                                        "podgroups"),
         "scheduling.volcano.sh/v1beta1", "PodGroup", True),
    Kind("volcanoqueues", create_global_resource("scheduling.volcano.sh", "v1beta1", "Queue", "queues"),
         "scheduling.volcano.sh/v1beta1", "Queue", False),
    Kind("jobsets", create_namespaced_resource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
         "jobset.x-k8s.io/v1alpha2", "JobSet", True),
    Kind("pytorchjobs", create_namespaced_resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
         "kubeflow.org/v1", "PyTorchJob", True),
    Kind("rayclusters", create_namespaced_resource("ray.io", "v1", "RayCluster", "rayclusters"),
         "ray.io/v1", "RayCluster", True),
    Kind("leaderworkersets", create_namespaced_resource("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet",
                                                        "leaderworkersets"),
         "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", True),
    Kind("deviceclasses", DeviceClass, "resource.k8s.io/v1", "DeviceClass", False),
    Kind("resourceslices", ResourceSlice, "resource.k8s.io/v1", "ResourceSlice", False),
    Kind("resourceclaims", ResourceClaim, "resource.k8s.io/v1", "ResourceClaim", True),
)}


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of a failed API call, whatever error type carries it: lightkube's ApiError (a JSON Status
    body), or the HTTP client's status error for any other body, such as the plain-text `404 page not found` the
    API server answers for a group it does not serve; None for a failure with no answer (unreachable, cut)."""
    code = getattr(getattr(exc, "status", None), "code", None)
    if not isinstance(code, int) or not code:
        code = getattr(getattr(exc, "response", None), "status_code", None)
    return code if isinstance(code, int) and code else None


class NotLeading(RuntimeError):
    """A write refused by this replica itself: it does not hold the Lease now (KubeApi.fence)."""


class Unanswered(RuntimeError):
    """A binding that failed, whose pod could not be read back within READBACK_S: it may have landed."""


READBACK_S = 30.0  # how long a failed binding's pod is read again, to learn whether it landed after all


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class RateLimit:
    """client-go's client-side limit as kube-scheduler's `--kube-api-qps` / `--kube-api-burst` set it: a token
    bucket refilled at `qps` tokens a second holding at most `burst`; every request takes one, waiting for it.
    `qps` 0: no limit. Shared by the threads of one client (informers, leader election, the cycle)."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps, self.burst = qps, max(burst, 1)
        self._tokens, self._at = float(self.burst), time.monotonic()
        self._lock = threading.Lock()

    def take(self) -> None:
        if self.qps <= 0:
            return
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.qps) - 1.0
            self._at = now
            wait_s = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait_s:
            time.sleep(wait_s)


class KubeApi:
    """One API client for one scheduler. Calls raise lightkube's ApiError, or its HTTP client's status error
    for an answer that is no JSON Status (read either with `status_code`: 404 kind or object absent, 409 conflict
    such as a pod already bound, 410 a watch's resourceVersion too old, 429 an eviction a PodDisruptionBudget
    refuses), or httpx, OSError or http.client errors when the server cannot be reached; callers decide what
    each means to them.

    Three rate limits of `qps` / `burst` each, as kube-scheduler builds three clients from its kubeconfig: `limit`
    for the watches and the writes that change the cluster, `event_limit` for Events and `lease_limit` for leader
    election, so that neither Events nor a burst of bindings ever delays a Lease renewal.

    `fence` (None: none), asked right before every write but the Lease's own: False refuses the write with
    NotLeading, so a replica that lost the Lease (paused past it, say) writes nothing more."""

    def __init__(self, client: Client, wire: Wire, scheduler_name: str, qps: float = 0, burst: int = 0) -> None:
        self.client, self.wire = client, wire
        self.scheduler_name = scheduler_name
        self.limit, self.event_limit, self.lease_limit = (RateLimit(qps, burst) for _ in range(3))
        self._manager = f"?fieldManager={scheduler_name}"
        self.fence: Callable[[], bool] | None = None

    @classmethod
    def connect(cls, kubeconfig: str | None, scheduler_name: str, qps: float = 0, burst: int = 0) -> KubeApi:
        """From a kubeconfig file, or from the pod's service account when `kubeconfig` is None; at most `qps`
        requests a second in bursts of `burst` on each of the three limits (RateLimit; 0: no limit)."""
        config = (KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_service_account()).get()
        if config is None:
            raise ValueError(f"kubeconfig {kubeconfig or '(in-cluster)'}: no current context")
        return cls(Client(config=config, field_manager=scheduler_name), Wire.from_config(config), scheduler_name,
                   qps, burst)

    # ------------------------------------------------------------------------------------------- reads

    def list(self, kind: Kind) -> tuple[list[dict[str, Any]], str]:
        """Every object of `kind` as dicts, and the collection's resourceVersion to watch from."""
        self.limit.take()
        found = self.client.list(kind.resource, namespace=ALL_NS) if kind.namespaced \
            else self.client.list(kind.resource)
        items = [self._plain(kind, obj) for obj in found]
        return items, found.resourceVersion  # set once iterated, an empty collection included

    def watch(self, kind: Kind, resource_version: str, timeout_s: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, object) from `resource_version` on, until the server ends the watch after `timeout_s`.
        A version too old raises ApiError 410: the caller lists again."""
        self.limit.take()
        args: dict[str, Any] = {"namespace": ALL_NS} if kind.namespaced else {}
        watch = self.client.watch(kind.resource, resource_version=resource_version, server_timeout=timeout_s,
                                  **args)
        for event, obj in watch:
            yield event, self._plain(kind, obj)

    @staticmethod
    def _plain(kind: Kind, obj: Any) -> dict[str, Any]:
        data: dict[str, Any] = obj.to_dict()
        data["apiVersion"], data["kind"] = kind.api_version, kind.kind
        return data

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Lease as a dict, or None when there is none."""
        self.lease_limit.take()
        try:
            return self.client.get(Lease, name, namespace=namespace).to_dict()  # type: ignore[no-any-return]
        except Exception as exc:
            if status_code(exc) == 404:
                return None
            raise

    def write_lease(self, namespace: str, name: str, spec: dict[str, Any], resource_version: str | None) -> None:
        """Create the Lease (`resource_version` None) or replace the version read; 409 when another wrote first."""
        self.lease_limit.take()
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if resource_version is None:
            self.client.create(Lease.from_dict({"metadata": meta, "spec": spec}))
        else:
            meta["resourceVersion"] = resource_version
            self.client.replace(Lease.from_dict({"metadata": meta, "spec": spec}))

    def read_config(self, namespace: str, name: str, key: str) -> str | None:
        """Key `key` of ConfigMap `name` (None: no such ConfigMap or key)."""
        self.lease_limit.take()
        try:
            config = self.client.get(ConfigMap, name, namespace=namespace)
        except Exception as exc:
            if status_code(exc) == 404:
                return None
            raise
        return (config.data or {}).get(key)

    def write_config(self, namespace: str, name: str, key: str, text: str) -> None:
        """Set key `key` of ConfigMap `name` (a merge patch; created when there is none). Fenced."""
        self.lease_limit.take()
        self._fenced()
        body = {"data": {key: text}}
        try:
            self.wire.send("PATCH", f"/api/v1/namespaces/{namespace}/configmaps/{name}{self._manager}", body,
                           "application/merge-patch+json")
        except Exception as exc:
            if status_code(exc) != 404:
                raise
            self.wire.send("POST", f"/api/v1/namespaces/{namespace}/configmaps{self._manager}", {
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, **body})

    # ------------------------------------------------------------------------------------------- writes

    def _fenced(self) -> None:
        """Raise NotLeading when the fence says this replica does not lead now (after the rate limit's wait)."""
        if self.fence is not None and not self.fence():
            raise NotLeading(f"{self.scheduler_name}: not holding the Lease, so not writing")

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind a pod through pods/binding. A binding that fails is read back, since it may have landed with its
        answer lost (a cut connection; a resend the API server refuses with 409 as a second binding): it returns
        when the pod is bound to `node`, raises the binding's error when it is not, and Unanswered when the pod
        cannot be read within READBACK_S."""
        self.limit.take()
        self._fenced()
        try:
            self.wire.send("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding{self._manager}", {
                "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
        except Exception as exc:
            if self._bound_to(namespace, name, uid, exc) != node:
                raise

    def _bound_to(self, namespace: str, name: str, uid: str, failure: Exception) -> str | None:
        """The node pod `uid` is bound to ("" none, None the pod is gone), read until the API server answers."""
        deadline_s, pause_s = time.monotonic() + READBACK_S, 0.2
        while True:
            self.limit.take()
            try:
                pod = self.client.get(Pod, name, namespace=namespace)
                return (pod.spec.nodeName or "") if pod.metadata.uid == uid else None
            except Exception as exc:
                if status_code(exc) == 404:
                    return None
                if time.monotonic() + pause_s > deadline_s:
                    raise Unanswered(f"binding {namespace}/{name} failed ({failure!r}) and the pod could not be "
                                     f"read back ({exc!r})") from failure
            time.sleep(pause_s)
            pause_s = min(2 * pause_s, 2.0)

    def update_claim(self, claim: dict[str, Any], status: bool = False) -> dict[str, Any]:
        """Replace a ResourceClaim (its status with `status`) as read: its resourceVersion is the precondition
        (409 when it changed meanwhile). The claim as written, with its new resourceVersion."""
        self.limit.take()
        self._fenced()
        meta = claim["metadata"]
        path = f"/apis/resource.k8s.io/v1/namespaces/{meta['namespace']}/resourceclaims/{meta['name']}"
        answer = self.wire.send("PUT", path + ("/status" if status else "") + self._manager, claim)
        return answer if isinstance(answer, dict) else claim

    def create_claim(self, claim: dict[str, Any]) -> dict[str, Any]:
        """Create a ResourceClaim (one with `generateName` gets its name from the server); the claim as created."""
        self.limit.take()
        self._fenced()
        path = f"/apis/resource.k8s.io/v1/namespaces/{claim['metadata']['namespace']}/resourceclaims"
        answer = self.wire.send("POST", path + self._manager, claim)
        if not isinstance(answer, dict):
            raise RuntimeError(f"creating a ResourceClaim in {claim['metadata']['namespace']}: no object answered")
        return answer

    def delete_claim(self, claim: dict[str, Any]) -> None:
        """Delete a ResourceClaim this scheduler created, its finalizers removed first (as kube-scheduler deletes
        the claim it made for a pod whose binding failed)."""
        if claim["metadata"].get("finalizers"):
            claim = self.update_claim({**claim, "metadata": {**claim["metadata"], "finalizers": []}})
        self.limit.take()
        self._fenced()
        meta = claim["metadata"]
        self.wire.send("DELETE", f"/apis/resource.k8s.io/v1/namespaces/{meta['namespace']}/resourceclaims/"
                                 f"{meta['name']}", {"kind": "DeleteOptions", "apiVersion": "v1"})

    def set_extended_claim(self, namespace: str, name: str, claim_name: str,
                           mappings: tuple[tuple[str, str, str], ...]) -> None:
        """Name in the pod's `status.extendedResourceClaimStatus` the claim made for its extended resources, and
        which request serves each (container, resource)."""
        self._patch_status(namespace, name, {"extendedResourceClaimStatus": {
            "resourceClaimName": claim_name,
            "requestMappings": [{"containerName": c, "resourceName": r, "requestName": q} for c, r, q in mappings]}})

    def set_queue_allocated(self, name: str, allocated: dict[str, str]) -> None:
        """Merge `allocated` into a Volcano Queue's `status.allocated`."""
        self.limit.take()
        self._fenced()
        self.wire.send("PATCH", f"/apis/scheduling.volcano.sh/v1beta1/queues/{name}/status{self._manager}",
                       {"status": {"allocated": allocated}}, "application/merge-patch+json")

    def evict(self, namespace: str, name: str) -> None:
        """Evict through the Eviction API, so PodDisruptionBudgets hold (429 when one refuses)."""
        self.limit.take()
        self._fenced()
        self.wire.send("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction{self._manager}", {
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}})

    def mark_unschedulable(self, namespace: str, name: str, message: str) -> None:
        """Set the pod's PodScheduled condition to False, reason Unschedulable, as kube-scheduler does."""
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                     "lastTransitionTime": now_rfc3339(), "lastProbeTime": None}
        self._patch_status(namespace, name, {"conditions": [condition]})

    def nominate(self, namespace: str, name: str, node: str) -> None:
        """Set a preemptor's status.nominatedNodeName while its victims terminate."""
        self._patch_status(namespace, name, {"nominatedNodeName": node})

    def _patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.limit.take()
        self._fenced()
        self.wire.send("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status{self._manager}",
                       {"status": status}, "application/strategic-merge-patch+json")

    def record_event(self, pod: dict[str, Any], reason: str, message: str, warning: bool = False) -> None:
        """A core/v1 Event about `pod` (what `kubectl describe pod` lists under Events)."""
        self.event_limit.take()
        self._fenced()
        meta = pod["metadata"]
        stamp = now_rfc3339()
        self.wire.send("POST", f"/api/v1/namespaces/{meta['namespace']}/events{self._manager}", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta.get("uid")},
            "reason": reason, "message": message, "type": "Warning" if warning else "Normal",
            "source": {"component": self.scheduler_name}, "firstTimestamp": stamp, "lastTimestamp": stamp,
            "count": 1, "reportingComponent": self.scheduler_name})
