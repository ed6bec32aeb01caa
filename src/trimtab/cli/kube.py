"""The kube room's command: `trimtab kube`, the scheduler of a Kubernetes cluster's pods that name it; and the
twin's reading and table for `trimtab simulate --from-cluster`.

Imports lightkube and the scheduler only when the command runs (the `kube` extra)."""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from trimtab.cli.common import console, errors, fail

if TYPE_CHECKING:
    from trimtab.kube.twin import ClusterTwin

commands = typer.Typer()


@commands.command("kube")
def kube_cmd(
    kubeconfig: Annotated[str | None, typer.Option(help="Kubeconfig file; default: the pod's service account "
                                                   "(in-cluster).")] = None,
    scheduler_name: Annotated[str, typer.Option(help="Schedule the pods whose spec.schedulerName is this.")]
    = "trimtab",
    policy: Annotated[str, typer.Option(help="Built-in policy name or profile YAML.")] = "steady",
    resync_s: Annotated[float, typer.Option(help="Run a cycle at least this often, in seconds.")] = 5.0,
    leader_elect: Annotated[bool, typer.Option(help="Bind only while holding the Lease (run several replicas).")]
    = True,
    lease_namespace: Annotated[str, typer.Option(help="Namespace of the Lease named after --scheduler-name.")]
    = "kube-system",
    endpoints: Annotated[str, typer.Option(help="host:port of /healthz, /readyz and /metrics; '' for none.")]
    = "127.0.0.1:10269",
    kube_api_qps: Annotated[float, typer.Option(help="At most this many API requests a second, as kube-scheduler's "
                                                "flag of the name; 0: no limit.")] = 0.0,
    kube_api_burst: Annotated[int, typer.Option(help="Requests allowed in a burst above --kube-api-qps.")] = 0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every warning and API failure.")] = False,
) -> None:
    """Schedule the pods of a Kubernetes cluster that opt in with `schedulerName: trimtab`: bind them through
    pods/binding, gangs (PodGroup, Volcano) all or nothing, and say why a pod waits (PodScheduled=False)."""
    try:
        from trimtab.kube.api import KubeApi
        from trimtab.kube.leader import LeaderElector
        from trimtab.kube.live import KubeScheduler
        from trimtab.kube.metrics import KubeMetrics, serve_endpoints
    except ImportError as exc:
        fail(f"trimtab kube needs the kube extra (pip install 'trimtab[kube]'): {exc}")
    from trimtab.formats import FormatError
    from trimtab.profile import Profile

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for chatty in ("httpx", "httpx2"):  # a line per request would bury what matters
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        profile = Profile.load(policy)
        api = KubeApi.connect(kubeconfig, scheduler_name, kube_api_qps, kube_api_burst)
    except (FormatError, ValueError, OSError) as exc:
        fail(str(exc))
    except Exception as exc:  # lightkube's ConfigError: no kubeconfig and not in a pod
        fail(f"cannot configure the Kubernetes client: {exc}")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    leader = None
    if leader_elect:
        identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        leader = LeaderElector(api, identity, namespace=lease_namespace, name=scheduler_name).start()
        api.fence = leader.holds  # no write once the Lease may have passed to another replica
    scheduler = KubeScheduler(api, profile, resync_s=resync_s,
                              credit_at=(lease_namespace, f"{scheduler_name}-credit"))
    if endpoints:
        host, _, port = endpoints.rpartition(":")
        try:
            serve_endpoints(KubeMetrics(scheduler), scheduler, host or "127.0.0.1", int(port))
        except (ValueError, OSError) as exc:
            fail(f"--endpoints {endpoints}: {exc}")
    errors.print(f"trimtab kube: scheduling pods with schedulerName {scheduler_name} under policy {profile.name}")
    scheduler.run(stop, leader)


def load_cluster_twin(kubeconfig: str | None, pod_duration_s: float) -> ClusterTwin:
    """The twin of the cluster `kubeconfig` reaches (`simulate --from-cluster`), read now; fails with a clear
    message when the kube extra is missing or the cluster cannot be read. The pending pods the reader refuses are
    printed on stderr (they are not replayed)."""
    try:
        from trimtab.kube.api import KubeApi
        from trimtab.kube.twin import cluster_twin, read_cluster
    except ImportError as exc:
        fail(f"--from-cluster needs the kube extra (pip install 'trimtab[kube]'): {exc}")
    try:
        objects = read_cluster(KubeApi.connect(kubeconfig, "trimtab-twin"))
    except Exception as exc:  # no kubeconfig, the server unreachable or refusing: nothing to replay
        fail(f"cannot read the cluster{f' of {kubeconfig}' if kubeconfig else ''}: {exc}")
    twin = cluster_twin(objects, time.time(), pod_duration_s)
    for pod, message in twin.not_replayed:
        errors.print(f"[yellow]warning:[/yellow] pending pod {escape(pod)} not replayed: {escape(message)}",
                     highlight=False, soft_wrap=True)
    if not twin.nodes:
        fail("the cluster has no Ready node trimtab can model: nothing to replay on")
    return twin


def print_twin_placements(twin: ClusterTwin, run: dict[str, Any]) -> None:
    """Where and when the replay placed each pending job: seconds after the snapshot, the nodes of its first run
    (a node named once per pod), and the pods it stands for; `-` for a job the replay never started."""
    from trimtab.kube.twin import PENDING_AT_S

    by_id = {job["id"]: job for job in run["jobs"]}
    pending = len(twin.jobs) - twin.running
    table = Table("job", "pods", "start_s", "nodes", title=f"replay of the pending work ({pending} jobs; "
                  f"{twin.running} running pods kept on their nodes)")
    for job in twin.jobs[twin.running:]:
        runs = by_id[job.id]["runs"]
        start = f"{max(runs[0]['start'] - PENDING_AT_S, 0.0):.0f}" if runs else "-"
        nodes = ", ".join(node for node, count in zip(runs[0]["nodes"], runs[0]["node_tasks"], strict=True)
                          for _ in range(count)) if runs else "-"
        table.add_row(job.id, str(len(twin.pods_of.get(job.id, ()))), start, nodes)
    console.print(table)
