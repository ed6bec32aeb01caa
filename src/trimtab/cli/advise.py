"""The advise command: name the bottleneck of a run, try the strategies that answer it, prove the fix.

Thin: it reads the inputs (specs, a run file, manifests or a live server's history), calls sim/advise.py and
writes what it found (the recommended profile as YAML, a Markdown and an HTML record)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from trimtab.cli.common import console, errors, fail, print_json
from trimtab.cli.sim import (
    BurstOpt,
    CheckpointOpt,
    ClusterOpt,
    FaultsOpt,
    LoadOpt,
    ManifestsOpt,
    RestartOpt,
    SeedOpt,
    SpeedOpt,
    WindowOpt,
    WorkloadOpt,
    load_inputs_with_manifests,
    load_profile,
)

if TYPE_CHECKING:
    from trimtab.model import Job, Node
    from trimtab.profile import Profile
    from trimtab.sim.run import SimConfig

commands = typer.Typer()

Inputs = tuple["list[Node]", "list[Job]", "Profile", "SimConfig", "dict[str, Any] | None"]


@commands.command("advise")
def advise_cmd(cluster: ClusterOpt = "", workload: WorkloadOpt = "",
               policy: Annotated[str, typer.Option("--policy", "-p", help="The current profile (built-in name or "
                                                   "YAML); default: the run's or server's, else steady.")] = "",
               run: Annotated[Path | None, typer.Option("--run", help="A run file (simulate --out, compare "
                                                        "--out-dir): diagnose it, replay its jobs.")] = None,
               manifests: ManifestsOpt = None,
               server: Annotated[str | None, typer.Option(help="A live trimtab serve: advise on its jobs' "
                                                          "history (GET /v1/jobs, /v1/nodes).")] = None,
               token: Annotated[str | None, typer.Option(help="Token for --server (an admin token sees every "
                                                         "tenant's jobs).")] = None,
               seeds: Annotated[int, typer.Option(help="Seeds each candidate runs over.")] = 3,
               causes: Annotated[int, typer.Option(help="How many of the largest causes get candidates.")] = 3,
               tune_share: Annotated[float, typer.Option(help="Share of the jobs (by submission) that choose; "
                                                              "the rest is held out to check.")] = 0.7,
               workers: Annotated[int | None, typer.Option(help="Parallel runs (default: the cores).")] = None,
               ray: Annotated[str | None, typer.Option(help="Run the what-ifs as tasks on this Ray cluster.")] = None,
               out: Annotated[Path, typer.Option(help="Where the recommended profile (YAML) and the record "
                                                      "(advise.md, advise.html) go.")] = Path("advice"),
               as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document (progress goes to "
                                                                    "stderr).")] = False,
               seed: SeedOpt = 0, checkpoint_s: CheckpointOpt = 600.0, restart_s: RestartOpt = 30.0,
               window_s: WindowOpt = 3600.0, faults: FaultsOpt = "", speed: SpeedOpt = "", load: LoadOpt = 1.0,
               burst: BurstOpt = None) -> None:
    """Establish the baseline, rank the causes of lost GPU-hours, try the strategies that answer the largest ones
    (several seeds, in parallel), check the best on held-out jobs and write the recommended profile."""
    from trimtab.sim.advise import AdviseConfig
    from trimtab.sim.run import SimConfig

    say = errors.print if as_json else console.print
    try:
        config = SimConfig(seed=seed, checkpoint_s=checkpoint_s, restart_s=restart_s, window_s=window_s,
                           faults=faults, speed=speed, load=load, bursts=tuple(burst or ()), timing=False)
        settings = AdviseConfig(causes=causes, seeds=seeds, tune_share=tune_share, workers=workers,
                                ray_address=ray)
        if server is not None:
            inputs = _from_server(server, token, policy, window_s)
        elif run is not None:
            inputs = _from_run(run, cluster, policy)
        else:
            nodes, jobs, read = load_inputs_with_manifests(cluster, workload, manifests, seed)
            inputs = (nodes, jobs, load_profile(policy or "steady", read), config, None)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    _advise(inputs, settings, out, as_json, say)


def advise_on(cluster: str, workload: str, policy: str, config: SimConfig, out: Path, seeds: int = 2,
              causes: int = 2) -> None:
    """The loop on cluster and workload specs, progress and results on the console (the demo's second half)."""
    from dataclasses import replace

    from trimtab.profile import Profile
    from trimtab.sim.advise import AdviseConfig

    try:
        nodes, jobs, _ = load_inputs_with_manifests(cluster, workload, None, config.seed)
        inputs = (nodes, jobs, Profile.load(policy), replace(config, timing=False), None)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    _advise(inputs, AdviseConfig(causes=causes, seeds=seeds), out, False, console.print)


def _advise(inputs: Inputs, settings: Any, out: Path, as_json: bool, say: Any) -> None:
    """Run the loop with progress lines, write the profile and the record, print the result."""
    import yaml

    from trimtab.report.losses import write_record
    from trimtab.sim.advise import advise

    nodes, jobs, profile, config, baseline = inputs
    t0 = time.perf_counter()
    try:
        advice = advise(nodes, jobs, profile, config, settings, baseline=baseline,
                        progress=lambda line: say(f"[{time.perf_counter() - t0:5.1f} s] {line}", highlight=False,
                                                  markup=False, soft_wrap=True))
    except ValueError as exc:
        fail(str(exc))
    profile_yaml = yaml.safe_dump(advice.profile.model_dump(exclude_defaults=True), sort_keys=False)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "recommended.yaml"
    path.write_text(profile_yaml)
    document = advice.document
    document["recommended"]["path"] = str(path)
    md, page = write_record(document, advice.steps, advice.baseline, profile_yaml, out)
    document["recommended"]["record"] = [str(md), str(page)]
    if as_json:
        print_json(document)
        return
    console.print(_causes_table(document))
    rec = document["recommended"]
    console.print(f"bottleneck: {rec['bottleneck'] or 'none'}; recommended: {rec['profile']} "
                  f"({'beats' if rec['improved'] else 'nothing beat'} {profile.name} on held-out jobs), written to "
                  f"{path}; record: {md}, {page}", highlight=False)


def _causes_table(document: dict[str, Any]) -> Table:
    table = Table("cause", "GPU-h lost", "scheduler's doing", title="where the baseline's GPU-hours went")
    for c in document["causes"]:
        table.add_row(c["cause"], f"{c['gpu_hours']:,.1f}", "yes" if c["scheduler"] else "no (load)")
    return table


def _from_run(path: Path, cluster: str, policy: str) -> Inputs:
    """A run file: its records are the baseline and its jobs the inputs; its config the assumptions."""
    from trimtab.formats.cluster import load_cluster
    from trimtab.profile import Profile
    from trimtab.sim.advise import baseline_of_records, jobs_of_records
    from trimtab.sim.run import SimConfig

    try:
        run = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read a run file: {exc}") from exc
    if not isinstance(run, dict) or not {"summary", "series", "jobs"} <= set(run):
        raise ValueError(f"{path}: not a run file (needs summary, series and jobs)")
    spec = cluster or run.get("cluster")
    if not spec:
        raise ValueError(f"{path}: the run file names no cluster; give --cluster")
    config = dict(run.get("config") or {})
    config["bursts"] = tuple(config.get("bursts") or ())
    nodes = load_cluster(spec)
    if "lost_gpu_hours" not in run["summary"]:  # a run file from before the loss accounting: count from its records
        counted = baseline_of_records(run["jobs"], nodes, float(run["series"].get("window_s", 3600.0)))
        run = {**run, "summary": {**run["summary"], **counted["summary"]}, "series": counted["series"]}
    return (nodes, jobs_of_records(run["jobs"]), Profile.load(policy or run.get("policy") or "steady"),
            SimConfig(**{**config, "timing": False}), run)


def _from_server(server: str, token: str | None, policy: str, window_s: float) -> Inputs:
    """A live server's nodes and its jobs' history (every page of GET /v1/jobs) as records; its policy unless
    --policy names one."""
    from trimtab.model import Node, Resources
    from trimtab.profile import Profile
    from trimtab.serve.errors import ServeError
    from trimtab.serve.http.client import Client, resolve
    from trimtab.sim.advise import baseline_of_records, history_records, jobs_of_records
    from trimtab.sim.run import SimConfig

    client = Client(resolve(server, token))
    try:
        nodes_doc = client.nodes()
        api_jobs: list[dict[str, Any]] = []
        while page := client.jobs(limit=1000, after_id=api_jobs[-1]["id"] if api_jobs else 0):
            api_jobs += page
    except ServeError as exc:
        raise ValueError(f"server {server}: {exc}") from None
    finally:
        client.close()
    nodes = [Node(n["name"], Resources(gpus=int(n["gpus"])), gpu_model=n.get("gpu_model", ""))
             for n in nodes_doc["nodes"]]
    records = history_records(api_jobs)
    baseline = baseline_of_records(records, nodes, window_s, now_s=time.time())
    baseline["policy"] = nodes_doc.get("policy", "")
    return (nodes, jobs_of_records(records), Profile.load(policy or nodes_doc.get("policy") or "steady"),
            SimConfig(timing=False, window_s=window_s), baseline)
