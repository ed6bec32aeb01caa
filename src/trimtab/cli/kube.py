"""The kube room's command: `trimtab kube`, the scheduler of a Kubernetes cluster's pods that name it.

Imports lightkube and the scheduler only when the command runs (the `kube` extra)."""

from __future__ import annotations

import logging
import signal
import socket
import threading
import uuid
from typing import Annotated

import typer

from trimtab.cli.common import errors, fail

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
        api = KubeApi.connect(kubeconfig, scheduler_name)
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
    scheduler = KubeScheduler(api, profile, resync_s=resync_s)
    if endpoints:
        host, _, port = endpoints.rpartition(":")
        try:
            serve_endpoints(KubeMetrics(scheduler), scheduler, host or "127.0.0.1", int(port))
        except (ValueError, OSError) as exc:
            fail(f"--endpoints {endpoints}: {exc}")
    errors.print(f"trimtab kube: scheduling pods with schedulerName {scheduler_name} under policy {profile.name}")
    scheduler.run(stop, leader)
