"""`trimtab serve`: the daemon's command, its flags and their checks; the client commands are in cli/serve.py.

Each flag's type and help is named once at module level, so the command reads as the list of what it takes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trimtab.cli.common import console, errors, fail
from trimtab.serve.defaults import DEFAULT_DATA_DIR, DEFAULT_PORT

commands = typer.Typer()

DataDirOpt = Annotated[Path, typer.Option(help="Database, logs, checkpoints and admin.token.")]
DbOpt = Annotated[str | None, typer.Option(
    help="Database URL (default: SQLite in the data dir), e.g. postgresql+psycopg://user:pw@host/db.")]
GpusOpt = Annotated[int | None, typer.Option(help="Declare N virtual GPUs instead of discovering them.")]
ClusterOpt = Annotated[str | None, typer.Option(help="Cluster shape or file: virtual nodes and GPUs.")]
PolicyOpt = Annotated[str, typer.Option(help="Built-in policy name or profile YAML.")]
HostOpt = Annotated[str, typer.Option(help="Address to bind (loopback by default).")]
PortOpt = Annotated[int, typer.Option(help="Port to bind.")]
GraceOpt = Annotated[float, typer.Option("--grace-s", help="SIGTERM-to-SIGKILL delay of a stop.")]
BackendOpt = Annotated[str, typer.Option(help="local (processes here) or ray (a Ray cluster).")]
RayAddressOpt = Annotated[str | None, typer.Option(
    help="Ray cluster address (backend ray), e.g. 10.0.0.1:6379; default: auto.")]
RayNodeIpOpt = Annotated[str | None, typer.Option(
    help="Address of the Ray node on this machine the server joins through (backend ray; needed only where several "
         "raylets share this machine: choose one you do not expect to lose).")]
PriorityClassesOpt = Annotated[str | None, typer.Option(
    help="Priority classes a tenant may use unless the admin allows others [default: low,normal].")]
TasksPerJobOpt = Annotated[int | None, typer.Option(help="Tasks one job may have; 0: no limit [default: 256].")]
RunningTasksOpt = Annotated[int | None, typer.Option(
    help="Tasks a tenant's running jobs may hold; 0: no limit [default: 512].")]
CpuOpt = Annotated[str | None, typer.Option(
    help="CPU a tenant's running jobs may request, e.g. 32 or 500m [default: none].")]
MemoryOpt = Annotated[str | None, typer.Option(
    help="Memory a tenant's running jobs may request, e.g. 256Gi [default: none].")]
PendingJobsOpt = Annotated[int | None, typer.Option(
    help="Pending jobs a tenant may have; 0: no limit [default: 1000].")]
TaskLogOpt = Annotated[str | None, typer.Option(
    help="What one task's log keeps of its output, e.g. 100Mi, then a line saying it was cut; none: all [default: "
         "1Gi].")]
LogsOpt = Annotated[str | None, typer.Option(
    help="A tenant's logs on disk, e.g. 50Gi: beyond it the logs of its oldest finished jobs are removed; none: no "
         "limit [default: 20Gi].")]
BodyBytesOpt = Annotated[int, typer.Option(min=1, help="Largest request body (413 beyond).")]
BodyTimeoutOpt = Annotated[float, typer.Option(
    "--body-timeout-s", min=0.1, help="Time to send a whole request body (408 beyond).")]
HeaderBytesOpt = Annotated[int, typer.Option(min=1024, help="Largest request line and headers (431 beyond).")]
HeaderTimeoutOpt = Annotated[float, typer.Option(
    "--header-timeout-s", min=0.1, help="Time to send a request line and headers (408 beyond).")]
KeepaliveOpt = Annotated[int, typer.Option(
    "--keepalive-timeout-s", min=1, help="An idle connection is closed after this long.")]
TenantUserOpt = Annotated[list[str] | None, typer.Option(
    help="TENANT=USER: run the tenant's tasks as this Unix user (server run as root; repeatable). Other tenants get a "
         "system user trimtab-<tenant>, created on first use.")]
SharedIdentityOpt = Annotated[bool, typer.Option(
    "--shared-identity", help="Run every task as the server's user even as root: tenants are not isolated from each "
                              "other nor from the server's files.")]
MetricsPublicOpt = Annotated[bool, typer.Option(
    help="Serve /metrics without a token (loopback --host only; else the admin or scrape token).")]


@commands.command("serve")
def serve_cmd(
    data_dir: DataDirOpt = DEFAULT_DATA_DIR, db: DbOpt = None, gpus: GpusOpt = None, cluster: ClusterOpt = None,
    policy: PolicyOpt = "steady", host: HostOpt = "127.0.0.1", port: PortOpt = DEFAULT_PORT,
    grace_s: GraceOpt = 10.0, backend: BackendOpt = "local", ray_address: RayAddressOpt = None,
    ray_node_ip: RayNodeIpOpt = None,
    tenant_priority_classes: PriorityClassesOpt = None, tenant_max_tasks_per_job: TasksPerJobOpt = None,
    tenant_max_running_tasks: RunningTasksOpt = None, tenant_max_cpu: CpuOpt = None,
    tenant_max_memory: MemoryOpt = None, tenant_max_pending_jobs: PendingJobsOpt = None,
    tenant_max_task_log: TaskLogOpt = None, tenant_max_logs: LogsOpt = None,
    max_body_bytes: BodyBytesOpt = 1 << 20, body_timeout_s: BodyTimeoutOpt = 5.0,
    max_header_bytes: HeaderBytesOpt = 16 << 10, header_timeout_s: HeaderTimeoutOpt = 5.0,
    keepalive_timeout_s: KeepaliveOpt = 5, metrics_public: MetricsPublicOpt = False,
    tenant_user: TenantUserOpt = None, shared_identity: SharedIdentityOpt = False,
) -> None:
    """Run the scheduler as a service on this machine's GPUs, with the API and dashboard. The --tenant-* limits
    hold for every tenant the admin sets no others for (PUT /v1/tenants/NAME)."""
    from trimtab.serve.daemon import ServeConfig
    from trimtab.serve.http.server import ServerLost, run_server
    from trimtab.serve.intake.limits import limits_of_flags
    from trimtab.serve.run.identity import parse_tenant_users

    _check_backend(gpus, cluster, backend, ray_address, ray_node_ip)
    if backend == "ray" and tenant_user:
        fail("--tenant-user goes with --backend local: Ray tasks run as the Ray workers' user", 2, errors)
    try:
        limits = limits_of_flags(tenant_priority_classes, tenant_max_tasks_per_job, tenant_max_running_tasks,
                                 tenant_max_cpu, tenant_max_memory, tenant_max_pending_jobs, tenant_max_task_log,
                                 tenant_max_logs)
        users = parse_tenant_users(tenant_user or [])
    except ValueError as exc:
        fail(str(exc), 2, errors)
    config = ServeConfig(data_dir=data_dir, db_url=db, gpus=gpus, cluster=cluster, policy=policy, host=host,
                         port=port, grace_s=grace_s, backend=backend, ray_address=ray_address,
                         ray_node_ip=ray_node_ip, tenant_limits=limits, max_body_bytes=max_body_bytes,
                         body_timeout_s=body_timeout_s, max_header_bytes=max_header_bytes,
                         header_timeout_s=header_timeout_s, keepalive_timeout_s=keepalive_timeout_s,
                         metrics_public=metrics_public, tenant_users=users, shared_identity=shared_identity)
    try:
        run_server(config, say=lambda s: console.print(s, highlight=False, soft_wrap=True))
    except ServerLost as exc:
        fail(str(exc), 3, errors)
    except ValueError as exc:
        fail(str(exc), 2, errors)


def _check_backend(gpus: int | None, cluster: str | None, backend: str, ray_address: str | None,
                   ray_node_ip: str | None) -> None:
    """Exits with status 2 on flags that do not go together."""
    if gpus is not None and cluster is not None:
        fail("give --gpus or --cluster, not both", 2, errors)
    if backend not in ("local", "ray"):
        fail(f"--backend: local or ray, not {backend!r}", 2, errors)
    if backend == "ray" and (gpus is not None or cluster is not None):
        fail("--backend ray takes its nodes and GPUs from the Ray cluster: no --gpus or --cluster", 2, errors)
    if backend != "ray" and (ray_address or ray_node_ip):
        fail("--ray-address and --ray-node-ip go with --backend ray", 2, errors)
