"""The serve room's client commands (`submit`, `jobs`, `job`, `cancel`, `logs`, `nodes`, `queues`, `token ...`);
the daemon's own command, `serve`, is in cli/daemon.py.

Client commands find the server and token from flags, TRIMTAB_SERVER / TRIMTAB_TOKEN, or the config file; each
takes `--json` for machine-readable output. They load only the HTTP client, never the server's code."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from trimtab.cli.common import console, errors, fail, print_json
from trimtab.model import parse_gpu_range

if TYPE_CHECKING:
    from trimtab.serve.http.client import Client

ServerOpt = Annotated[str | None, typer.Option("--server", help="Server URL (env TRIMTAB_SERVER).")]
TokenOpt = Annotated[str | None, typer.Option("--token", help="Bearer token (env TRIMTAB_TOKEN).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]

commands = typer.Typer()
token_app = typer.Typer(help="Tenant tokens (admin).", no_args_is_help=True)
commands.add_typer(token_app, name="token")


def _client(server: str | None, token: str | None) -> Client:
    from trimtab.serve.http.client import Client, resolve

    try:
        return Client(resolve(server, token))
    except ValueError as exc:  # a config file that cannot be read, a server that is no URL
        fail(str(exc), 2, errors)


def _call(fn: Any, *args: Any) -> Any:
    from trimtab.serve.errors import ServeError

    try:
        return fn(*args)
    except ServeError as exc:
        where = f" [{exc.field}]" if exc.field else ""
        fail(f"{exc.detail}{where}" + (f" (HTTP {exc.status})" if exc.status else ""), 1, errors)


def _gpus(milli: float) -> str:
    """Thousandths of a GPU as a number of GPUs: 500 -> "0.5", 2000 -> "2"."""
    return f"{milli / 1000:g}"


def _per_task(job: dict[str, Any]) -> str:
    """What each task of a job asks for: "2 GPUs", or a share of one GPU, "0.5 GPU"."""
    milli = job.get("gpu_milli") or 0
    return f"{_gpus(milli)} GPU" if milli else f"{job['gpus_per_task']} GPUs"


def _gpus_column(job: dict[str, Any]) -> str:
    """A job's GPUs in `trimtab jobs`: whole GPUs of all tasks ("4"), or its share ("0.5 GPU", "2 x 0.5 GPU" for a
    gang of shares: shares of distinct GPUs do not add up to whole ones)."""
    if not job.get("gpu_milli"):
        return str(job["gpus"])
    return f"{job['tasks']} x {_per_task(job)}" if job["tasks"] > 1 else _per_task(job)


def _gpu_map(devices: list[dict[str, Any]]) -> str:
    """One line per GPU: its id and every job on it, a share with its fraction ("0: 12 (0.5), 13 (0.25)"), a
    whole GPU with its job alone ("1: 14"), an idle one "-"; another tenant's job (-1 from the API) as "other"."""
    lines = []
    for d in devices:
        holders = d.get("jobs")
        if holders is None:  # a server from before GPU shares: one job per GPU
            holders = [] if d["job_id"] is None else [{"job_id": d["job_id"], "milli": 1000}]
        names = []
        for h in holders:
            name = "other" if h["job_id"] == -1 else str(h["job_id"])
            names.append(name if h["milli"] >= 1000 else f"{name} ({_gpus(h['milli'])})")
        lines.append(f"{d['id']}: {', '.join(names) or '-'}")
    return "\n".join(lines)


def _ago(t_s: float | None) -> str:
    if t_s is None:
        return "-"
    s = max(0.0, time.time() - t_s)
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.1f}h"


@commands.command("submit")
def submit_cmd(
    args: Annotated[list[str] | None, typer.Argument(help="FILE.yaml / FILE.json, or -- COMMAND ARGS...")] = None,
    gpus: Annotated[str | None, typer.Option(
        help="Whole GPUs per task [default: 1], or MIN-MAX: an elastic job of one-GPU tasks, resized within the "
             "range while it runs (it starts at MIN, or at --tasks).")] = None,
    target_gpu_util: Annotated[float | None, typer.Option(
        "--target-gpu-util", help="An elastic job's target GPU utilisation (0..1]: it is resized within its "
                                  "range toward it.")] = None,
    gpu_milli: Annotated[int | None, typer.Option(
        "--gpu-milli", help="Instead of whole GPUs, a share of one GPU per task, in thousandths (1 to 999; "
                            "500: half a GPU), run under MPS limits.")] = None,
    tasks: Annotated[int | None, typer.Option(help="Tasks in the gang [default: 1].")] = None,
    name: Annotated[str, typer.Option(help="Job name.")] = "",
    tenant: Annotated[str | None, typer.Option(help="Tenant (admin token only).")] = None,
    priority_class: Annotated[str | None, typer.Option(help="low, normal, high or system.")] = None,
    retries: Annotated[int, typer.Option(help="Failed attempts allowed before the job fails.")] = 0,
    workdir: Annotated[str | None, typer.Option(help="Working directory of the tasks.")] = None,
    server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False,
) -> None:
    """Submit a job: a manifest file, or a command after `--`."""
    if not args:
        fail("give a FILE.yaml or a command after --", 2, errors)
    assert args is not None
    path = Path(args[0])
    is_file = len(args) == 1 and path.suffix in (".yaml", ".yml", ".json")
    if is_file and not path.is_file():
        fail(f"{path}: no such file" if not path.exists() else f"{path}: not a file", 2, errors)
    if gpu_milli is not None:  # checked here for a clear message; the server checks again
        if is_file:
            fail("--gpu-milli applies to a command after --; a manifest asks for a share with the annotation "
                 'trimtab.io/gpu-milli: "500", a JSON job with "gpu_milli": 500', 2, errors)
        if not 1 <= gpu_milli <= 999:
            fail(f"--gpu-milli is a share of one GPU in thousandths, 1 to 999, not {gpu_milli} (whole GPUs: "
                 "--gpus N)", 2, errors)
        if gpus not in (None, "0"):
            fail("give --gpus (whole GPUs) or --gpu-milli (a share of one GPU), not both", 2, errors)
    client = _client(server, token)
    if is_file:
        text = path.read_text()
        if path.suffix == ".json":
            try:
                body = json.loads(text)
            except json.JSONDecodeError as exc:
                fail(f"{path}: malformed JSON: {exc}", 2, errors)
            job = _call(client.submit_job, body)
        else:
            job = _call(client.submit_manifest, text)
    else:
        spec: dict[str, Any] = {"command": list(args), **_gpus_spec(gpus, tasks), "name": name, "retries": retries}
        if gpu_milli is not None:
            spec.update(gpus=0, gpu_milli=gpu_milli)
        for key, value in (("tenant", tenant), ("priority_class", priority_class), ("workdir", workdir),
                           ("target_gpu_util", target_gpu_util)):
            if value is not None:
                spec[key] = value
        job = _call(client.submit_job, spec)
    if as_json:
        print_json({"id": job["id"], "state": job["state"]})
    else:
        console.print(f"job {job['id']} submitted ({job['state']})")


def _gpus_spec(gpus: str | None, tasks: int | None) -> dict[str, Any]:
    """The GPU fields of a command's job from --gpus (N, or MIN-MAX for an elastic job) and --tasks."""
    if gpus is None or gpus.strip().isdigit():
        return {"gpus": 1 if gpus is None else int(gpus), "tasks": 1 if tasks is None else tasks}
    try:
        low, high = parse_gpu_range(gpus)
    except ValueError as exc:
        fail(f"--gpus: {exc}", 2, errors)
    return {"gpus": 1, "tasks": low if tasks is None else tasks, "min_tasks": low, "max_tasks": high}


def _show(answer: Any, as_json: bool, render: Callable[[Any], None]) -> None:
    """Print the server's answer to a client command: as it came with `--json`, else laid out by `render`."""
    if as_json:
        print_json(answer)
    else:
        render(answer)


def _print_jobs(jobs: list[dict[str, Any]]) -> None:
    table = Table("id", "name", "tenant", "state", "GPUs", "attempts", "submitted", "reason")
    for j in jobs:
        table.add_row(str(j["id"]), j["name"], j["tenant"], j["state"], _gpus_column(j), str(j["attempts"]),
                      _ago(j["submit_s"]) + " ago", j["reason"])
    console.print(table)


def _print_job(job: dict[str, Any]) -> None:
    console.print(f"job {job['id']} {job['name']!r} of {job['tenant']}: [bold]{job['state']}[/bold] "
                  f"{job['reason']}", highlight=False)
    console.print(f"command: {' '.join(job['command'])}; {job['tasks']} x {_per_task(job)}; "
                  f"attempts {job['attempts']}, retries allowed {job['retries']}", highlight=False)
    if job.get("min_tasks") is not None:
        target = f", target GPU utilisation {job['target_gpu_util']:g}" if job["target_gpu_util"] else ""
        console.print(f"elastic: {job['min_tasks']} to {job['max_tasks']} tasks, resized {job['resizes']} times"
                      f"{target}", highlight=False)
    table = Table("attempt", "rank", "node", "GPUs", "state", "exit", "outcome", "started")
    for r in job["runs"]:
        table.add_row(str(r["attempt"]), str(r["rank"]), r["node"], ",".join(r["gpus"]), r["state"],
                      "-" if r["exit_code"] is None else str(r["exit_code"]), r["outcome"],
                      _ago(r["start_s"]) + " ago")
    console.print(table)


def _print_why(why: dict[str, Any]) -> None:
    if why["state"] != "pending":
        reason = f": {why['reason']}" if why["reason"] else ""
        console.print(f"job {why['id']} is {why['state']}{reason} (not waiting)", highlight=False)
        return
    console.print(f"job {why['id']} waits ({why['cause']}): {why['reason']}", highlight=False)
    if why["hint"]:
        console.print(f"to start: {why['hint']}", highlight=False)


def _print_nodes(data: dict[str, Any]) -> None:
    table = Table("node", "model", "GPUs", "allocated", "GPU map")
    for n in data["nodes"]:
        table.add_row(n["name"], n["gpu_model"] or "virtual", str(n["gpus"]), str(n["gpus_allocated"]),
                      _gpu_map(n["devices"]))
    console.print(table)
    identity = data.get("identity")
    if identity is not None:
        console.print(f"identity: {identity['detail']}; GPU pinning: {identity['gpu_pinning']}", highlight=False)


def _print_queues(data: dict[str, Any]) -> None:
    table = Table("tenant", "pending", "running", "GPUs held", "quota")
    for q in data["queues"]:
        table.add_row(q["tenant"], str(q["pending"]), str(q["running"]), f"{q['gpus_held']:g}",
                      "-" if q["quota_gpus"] is None else str(q["quota_gpus"]))
    console.print(table)
    console.print(f"{data['gpus_allocated']} of {data['gpus_total']} GPUs allocated")


@commands.command("jobs")
def jobs_cmd(state: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
             limit: Annotated[int, typer.Option(help="At most this many.")] = 1000,
             server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List jobs (a tenant token sees its own)."""
    _show(_call(_client(server, token).jobs, state, limit), as_json, _print_jobs)


@commands.command("job")
def job_cmd(job_id: int, server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Show one job and its runs."""
    _show(_call(_client(server, token).job, job_id), as_json, _print_job)


@commands.command("why")
def why_cmd(job_id: int, server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Why a job waits, and what would let it start."""
    _show(_call(_client(server, token).why, job_id), as_json, _print_why)


@commands.command("cancel")
def cancel_cmd(job_id: int, server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Cancel a job (a running one gets SIGTERM, then SIGKILL after the grace period)."""
    _show(_call(_client(server, token).cancel, job_id), as_json, lambda result: console.print(
        f"job {job_id}: {'cancelled' if result['state'] == 'cancelled' else 'cancelling'}"))


@commands.command("logs")
def logs_cmd(job_id: int, follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing.")] = False,
             rank: Annotated[int, typer.Option(help="Task rank.")] = 0,
             attempt: Annotated[int | None, typer.Option(help="Attempt (default: the latest).")] = None,
             server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Print a task's output (stdout and stderr); -f follows it until the job ends."""
    client = _client(server, token)
    offset, chunks, reading = 0, [], attempt
    while True:
        data, offset, done, read, latest = _call(client.logs, job_id, offset, rank, reading)
        if read:
            reading = read
        if as_json:
            chunks.append(data.decode(errors="replace"))
        else:
            sys.stdout.write(data.decode(errors="replace"))
            sys.stdout.flush()
        if not follow or done:
            break
        if not data:
            if attempt is None and latest > (reading or 0):  # a retry started: follow the new attempt
                if reading and not as_json:
                    sys.stdout.write(f"--- attempt {latest} ---\n")
                reading, offset = latest, 0
                continue
            time.sleep(0.5)
    if as_json:
        print_json({"id": job_id, "rank": rank, "log": "".join(chunks), "offset": offset})


@commands.command("nodes")
def nodes_cmd(server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Nodes and their GPUs, with every job on each GPU and its share."""
    _show(_call(_client(server, token).nodes), as_json, _print_nodes)


@commands.command("queues")
def queues_cmd(server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Pending and running jobs per tenant, with GPUs held and quotas."""
    _show(_call(_client(server, token).queues), as_json, _print_queues)


@token_app.command("create")
def token_create(tenant: Annotated[str, typer.Option(help="The tenant the token acts for.")],
                 quota_gpus: Annotated[int | None, typer.Option(help="Set the tenant's GPU quota.")] = None,
                 name: Annotated[str, typer.Option(help="A label for the token.")] = "",
                 server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Create a token for a tenant; it is printed once."""
    _show(_call(_client(server, token).create_token, tenant, quota_gpus, name), as_json, lambda result: console.print(
        f"token for tenant {tenant} (shown once): {result['token']}", highlight=False))


def _print_tokens(tokens: list[dict[str, Any]]) -> None:
    table = Table("id", "tenant", "name", "created", "last used")
    for t in tokens:
        table.add_row(str(t["id"]), "(admin)" if t["admin"] else t["tenant"], t["name"], _ago(t["created_s"]) + " ago",
                      "never" if t["last_used_s"] is None else _ago(t["last_used_s"]) + " ago")
    console.print(table)


@token_app.command("list")
def token_list(server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List the tokens (never their secrets): id, tenant, name, when created and last used."""
    _show(_call(_client(server, token).tokens), as_json, _print_tokens)


@token_app.command("revoke")
def token_revoke(token_id: Annotated[int, typer.Argument(help="The token's id (`trimtab token list`).")],
                 server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Revoke a tenant token: requests with it get 401 from now on."""
    _show(_call(_client(server, token).revoke_token, token_id), as_json, lambda result: console.print(
        f"token {token_id} of tenant {result['tenant']} revoked", highlight=False))
