"""The simulator's commands: simulate, compare, demo, report, tune, policies.

Thin: they parse specs, call the library and print Rich tables; all behaviour lives in the rooms above."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trimtab.cli.common import console, errors, fail, write_json

if TYPE_CHECKING:
    from trimtab.formats.k8s import Manifests
    from trimtab.model import Job, Node
    from trimtab.profile import Profile
    from trimtab.sim.run import SimConfig

commands = typer.Typer()

DEMO_CLUSTER = "2r8x8"
DEMO_WORKLOAD = "synthetic:jobs=2000,seed=1,load=1.3,max_duration_s=43200"  # overloaded: the policies differ
DEMO_FAULTS = "node-mtbf=7d,node-mttr=2h,job-fail=0.02"  # drawn from the run's seed: advise's seeds vary them
DEMO_POLICIES = "steady,fifo,fifo-backfill,sjf,srtf,las,qssf,drf,priority"
DEMO_ADVISED = "fifo"  # the baseline the demo's advise diagnoses

ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="Shape (56x8, 4x8:v100, 7r8x8), YAML or spec file.")]
WorkloadOpt = Annotated[str, typer.Option(
    "--workload", "-w", help="Trace path ([tiresias:|philly:|gavel:|csv:]PATH), pollux:PATH[,elastic] "
    "or synthetic[:k=v,..].")]
SeedOpt = Annotated[int, typer.Option(help="Seed of the run (and of a synthetic workload that names none).")]
CheckpointOpt = Annotated[float, typer.Option("--checkpoint-s",
                                              help="Checkpoint interval; 0: preemption loses nothing.")]
RestartOpt = Annotated[float, typer.Option("--restart-s", help="Restart cost of a resumed attempt, seconds.")]
EvictOpt = Annotated[float, typer.Option("--evict-s", help="Seconds a preempted job's GPUs take to come free (its "
                                                           "pods terminating); a job started on them waits.")]
WindowOpt = Annotated[float, typer.Option("--window-s", help="Width of the metric windows, seconds.")]
TimingOpt = Annotated[bool, typer.Option("--timing/--no-timing",
                                         help="Record the scheduler's wall-clock cost (not reproducible).")]
FaultsOpt = Annotated[str, typer.Option(
    "--faults", help="Faults: YAML path or inline, e.g. node-mtbf=7d,node-mttr=2h,gpu-mtbf=30d,job-fail=0.02,seed=1.")]
SpeedOpt = Annotated[str, typer.Option(
    "--speed", help="Run-time models: topology, gpus=PATH (throughput table), data[,cache-gb=..]; default reference.")]
LoadOpt = Annotated[float, typer.Option("--load", help="Arrival-rate factor (1.5: jobs arrive 1.5x as fast).")]
BurstOpt = Annotated[list[str] | None, typer.Option("--burst", help="Burst FACTORx@START+LENGTH, e.g. 3x@10h+1h.")]
ManifestsOpt = Annotated[Path | None, typer.Option(
    "--manifests", "-m", help="Kubernetes manifests (file or folder): nodes, quotas, priorities and workloads; "
    "--cluster may add nodes.")]
FromClusterOpt = Annotated[bool, typer.Option(
    "--from-cluster", help="Replay a live Kubernetes cluster's pending pods (the twin: nodes, running pods kept on "
    "their nodes, PodGroups, quotas, priority classes) under --policy.")]
KubeconfigOpt = Annotated[str | None, typer.Option(help="Kubeconfig of --from-cluster; default: in-cluster.")]
PodDurationOpt = Annotated[float, typer.Option(
    "--pod-duration-s", help="Run time of a pod with no trimtab.io/duration annotation (--from-cluster).")]


def load_inputs(cluster: str, workload: str, seed: int) -> tuple[list[Node], list[Job]]:
    """The cluster's nodes and the workload's jobs from their command-line specs; what the trace reader skipped
    is printed on stderr."""
    from trimtab.formats.cluster import load_cluster
    from trimtab.formats.traces import load_trace
    from trimtab.sim.workload import parse_workload_spec, synthetic

    nodes = load_cluster(cluster)
    if workload == "synthetic" or workload.startswith("synthetic:"):
        params: dict[str, Any] = {"seed": seed, "cluster_gpus": sum(n.capacity.gpus for n in nodes)}
        params.update(parse_workload_spec(workload))
        return nodes, synthetic(**params)
    notes: list[str] = []
    jobs = load_trace(workload, notes=notes)
    _warn(notes)
    return nodes, jobs


def load_inputs_with_manifests(cluster: str, workload: str, manifests: Path | None,
                               seed: int) -> tuple[list[Node], list[Job], Manifests | None]:
    """Nodes and jobs from `--cluster` and `--workload`, or from manifests (plus any nodes of `--cluster`), with
    the manifests read (None without). The reader's warnings are printed on stderr."""
    if manifests is None:
        if not cluster or not workload:
            raise ValueError("give --cluster and --workload, or --manifests")
        return *load_inputs(cluster, workload, seed), None
    from trimtab.formats.cluster import load_cluster
    from trimtab.formats.k8s import load_manifests

    if workload:
        raise ValueError("--workload cannot be combined with --manifests (the manifests hold the workload)")
    m = load_manifests(manifests)
    _warn(m.warnings)
    nodes = m.nodes + (load_cluster(cluster) if cluster else [])
    if not nodes:
        raise ValueError(f"{manifests}: no Node manifests; add nodes with --cluster")
    return nodes, m.jobs, m


def load_profile(policy: str, manifests: Manifests | None) -> Profile:
    """The profile a run uses: `policy` with the manifests' policy objects composed onto it (ResourceQuotas are
    admission under every policy); what the policy cannot honour of them is printed on stderr."""
    from trimtab.profile import Profile, profile_for_manifests

    profile = Profile.load(policy)
    if manifests is None:
        return profile
    profile, warnings = profile_for_manifests(profile, manifests)
    _warn(warnings)
    return profile


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        errors.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False, soft_wrap=True)


def _summary_table(groups: dict[str, list[dict[str, Any]]]) -> Table:
    """The summary of each policy (the mean over its seeds), best value per column marked."""
    from trimtab.report.table import COLUMNS, best_per_column, mean_summary

    summaries = {name: mean_summary(seeds) for name, seeds in groups.items()}
    best = best_per_column(summaries)
    table = Table(show_lines=False, header_style="bold")
    table.add_column("policy")
    for col in COLUMNS:
        table.add_column(col.label, justify="right")
    for name, s in summaries.items():
        cells = [f"[bold green]{col.format(s.get(col.key))}[/]" if name in best[col.key]
                 else col.format(s.get(col.key)) for col in COLUMNS]
        table.add_row(name, *cells)
    return table


def _print_verdict(groups: dict[str, list[dict[str, Any]]], baseline: str | None) -> None:
    """The report's verdict (runs by policy, one per seed) as lines under the table."""
    from trimtab.report.verdict import default_baseline, finding_text, verdict

    baseline = baseline or default_baseline(list(groups))
    console.print(f"[bold]verdict[/bold] against {escape(baseline)} (--baseline POLICY to change):")
    for finding in verdict(groups, baseline):
        console.print(f"  {escape(finding_text(finding, baseline))}", highlight=False, soft_wrap=True)


@commands.command("simulate")
def simulate_cmd(cluster: ClusterOpt = "", workload: WorkloadOpt = "",
                 policy: Annotated[str, typer.Option("--policy", "-p",
                                                     help="Built-in name or profile YAML.")] = "steady",
                 seed: SeedOpt = 0, out: Annotated[Path | None, typer.Option(help="Write the run as JSON.")] = None,
                 checkpoint_s: CheckpointOpt = 600.0, restart_s: RestartOpt = 30.0, window_s: WindowOpt = 3600.0,
                 timing: TimingOpt = True, faults: FaultsOpt = "", speed: SpeedOpt = "", load: LoadOpt = 1.0,
                 burst: BurstOpt = None, manifests: ManifestsOpt = None, from_cluster: FromClusterOpt = False,
                 kubeconfig: KubeconfigOpt = None, pod_duration_s: PodDurationOpt = 3600.0,
                 evict_s: EvictOpt = 0.0) -> None:
    """Replay a workload on a cluster under one policy and print the summary metrics."""
    from trimtab.cli.kube import load_cluster_twin, print_twin_placements
    from trimtab.sim.run import SimConfig, simulate

    twin = load_cluster_twin(kubeconfig, pod_duration_s) if from_cluster else None
    try:
        if twin is not None:
            nodes, jobs, read = twin.nodes, twin.jobs, twin.manifests
        else:
            nodes, jobs, read = load_inputs_with_manifests(cluster, workload, manifests, seed)
        profile = load_profile(policy, read)
        cluster = cluster or str(manifests or "the live cluster")
        config = SimConfig(seed=seed, checkpoint_s=checkpoint_s, restart_s=restart_s, window_s=window_s,
                           timing=timing, faults=faults, speed=speed, load=load, bursts=tuple(burst or ()),
                           evict_s=evict_s)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    t0 = time.perf_counter()
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total} jobs"), TimeElapsedColumn(),
                  console=console, transient=True, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task(f"{profile.name}", total=len(jobs))
        try:
            result = simulate(nodes, jobs, profile, config,
                              progress=lambda done, total: bar.update(task, completed=done))
        except ValueError as exc:
            fail(str(exc))
    wall = time.perf_counter() - t0
    result = {"cluster": cluster, "workload": workload, **result}
    table = Table("metric", "value", title=f"{profile.name} on {cluster}: {len(jobs)} jobs in {wall:.1f} s")
    for key, value in result["summary"].items():
        if isinstance(value, dict):  # tenants.<namespace>, lost_gpu_hours.<cause>: one row each
            for name, fields in value.items():
                table.add_row(f"{key}.{name}", "  ".join(f"{k}={'-' if v is None else v}" for k, v in fields.items())
                              if isinstance(fields, dict) else str(fields))
            continue
        table.add_row(key, "-" if value is None else str(value))
    for name, gpu_s in result.get("reservations", {}).get("unused_gpu_s", {}).items():
        table.add_row(f"reservation.{name}.unused_gpu_s", str(gpu_s))
    console.print(table)
    if twin is not None:
        print_twin_placements(twin, result)
    if out:
        write_json(result, out)
        console.print(f"run written to {out}")


BaselineOpt = Annotated[str | None, typer.Option(
    "--baseline", help="The policy the report's verdict measures against (default: fifo if it ran, else the first).")]
ReportWindowOpt = Annotated[float | None, typer.Option(
    "--window-s", help="Width of the windows over time, seconds (default: sized to the run, at most 48 windows).")]


@commands.command("compare")
def compare_cmd(cluster: ClusterOpt = "", workload: WorkloadOpt = "",
                policies: Annotated[str, typer.Option(help="Comma-separated names or YAML paths.")] = DEMO_POLICIES,
                out_dir: Annotated[Path | None, typer.Option(help="Write <policy>.json and index.html here.")] = None,
                seed: SeedOpt = 0,
                seeds: Annotated[str, typer.Option(help="Several seeds, comma-separated (e.g. 1,2,3): each policy "
                                                        "runs once per seed; tables and verdict give the mean and "
                                                        "the range.")] = "",
                checkpoint_s: CheckpointOpt = 600.0, restart_s: RestartOpt = 30.0, evict_s: EvictOpt = 0.0,
                window_s: Annotated[float | None, typer.Option(
                    "--window-s", help="Width of the metric windows (throughput CV; default 3600) and of the "
                    "report's windows (default: sized to the run), seconds.")] = None,
                timing: TimingOpt = True,
                workers: Annotated[int | None, typer.Option(help="Parallel runs (default: local cores).")] = None,
                faults: FaultsOpt = "", speed: SpeedOpt = "", load: LoadOpt = 1.0, burst: BurstOpt = None,
                manifests: ManifestsOpt = None, baseline: BaselineOpt = None,
                ray: Annotated[str | None, typer.Option("--ray", help="Run the simulations as tasks on the Ray "
                                                                      "cluster at this address.")] = None) -> None:
    """Run several policies on the same cluster and workload; print one table (best value per column marked) and
    the verdict against a baseline; with --out-dir, write the runs and the HTML report."""
    from trimtab.sim.run import SimConfig

    try:
        seed_list = [int(x) for x in seeds.split(",") if x.strip()] or [seed]
    except ValueError:
        fail(f"--seeds {seeds}: give whole numbers separated by commas, e.g. 1,2,3")
    try:
        windows = {} if window_s is None else {"window_s": window_s}
        config = SimConfig(seed=seed_list[0], checkpoint_s=checkpoint_s, restart_s=restart_s, evict_s=evict_s,
                           timing=timing, faults=faults, speed=speed, load=load, bursts=tuple(burst or ()), **windows)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    _compare(cluster, workload, [p.strip() for p in policies.split(",") if p.strip()], out_dir, config, workers,
             manifests, ray, Comparison(seed_list, baseline, window_s))


@dataclass(frozen=True)
class Comparison:
    """How `_compare` repeats and reports: the seeds each policy runs with, the verdict's baseline (None: the
    default), the report's window (None: sized to the run)."""

    seeds: list[int]
    baseline: str | None = None
    window_s: float | None = None


def _compare(cluster: str, workload: str, policies: list[str], out_dir: Path | None, config: SimConfig,
             workers: int | None, manifests: Path | None = None, ray_address: str | None = None,
             how: Comparison | None = None) -> dict[str, list[dict[str, Any]]]:
    """Run every policy once per seed; returns the runs by policy (one per seed, in seed order)."""
    from trimtab.report import write_report
    from trimtab.sim.compare import compare

    how = how or Comparison([config.seed])
    groups: dict[str, list[dict[str, Any]]] = {}
    t0 = time.perf_counter()
    for seed in how.seeds:
        try:
            nodes, jobs, read = load_inputs_with_manifests(cluster, workload, manifests, seed)
            profiles = [load_profile(p, read) for p in policies]
            names = [p.name for p in profiles]
            if how.baseline is not None and how.baseline not in names:
                raise ValueError(f"--baseline {how.baseline}: not one of the policies ({', '.join(names)})")
        except (ValueError, OSError) as exc:
            fail(str(exc))
        with console.status(f"simulating {len(profiles)} policies on {len(jobs)} jobs (seed {seed})..."):
            try:
                runs = compare(nodes, jobs, profiles, replace(config, seed=seed), workers=workers,
                               ray_address=ray_address)
            except ValueError as exc:
                fail(str(exc))
        for name, run in runs.items():
            groups.setdefault(name, []).append(run)
    wall = time.perf_counter() - t0
    cluster, workload = cluster or str(manifests), workload or str(manifests)
    seeds_note = f", {len(how.seeds)} seeds" if len(how.seeds) > 1 else ""
    title = f"{len(jobs)} jobs of {workload} on {cluster} ({sum(n.capacity.gpus for n in nodes)} GPUs){seeds_note}"
    table = _summary_table({name: [r["summary"] for r in seeds] for name, seeds in groups.items()})
    table.title = f"{title}: {wall:.1f} s"
    console.print(table)
    _print_verdict(groups, how.baseline)
    if out_dir:
        for name, seeds in groups.items():
            for seed, run in zip(how.seeds, seeds, strict=True):
                stem = name if len(how.seeds) == 1 else f"{name}.seed{seed}"
                write_json({"cluster": cluster, "workload": workload, **run}, out_dir / f"{stem}.json")
        index = write_report(groups, out_dir, title="trimtab: policy comparison", subtitle=title,
                             baseline=how.baseline, window_s=how.window_s)
        console.print(f"runs and report written to {out_dir} ({index})")
    return groups


@commands.command("demo")
def demo_cmd(out_dir: Annotated[Path, typer.Option(help="Where the report goes.")] = Path("trimtab-report"),
             advise: Annotated[bool, typer.Option("--advise/--no-advise", help="Then advise on fifo.")] = True,
             ) -> None:
    """The built-in synthetic workload on a built-in cluster, with faults: compare the built-in policies and write a
    report, then advise on fifo: its bottleneck, the strategies tried, the measured fix."""
    from trimtab.cli.advise import advise_on
    from trimtab.sim.run import SimConfig

    config = SimConfig(seed=1, faults=DEMO_FAULTS)
    console.print(f"[bold]trimtab demo[/bold]: {DEMO_WORKLOAD} on {DEMO_CLUSTER}, faults {DEMO_FAULTS}, "
                  f"policies {DEMO_POLICIES}")
    _compare(DEMO_CLUSTER, DEMO_WORKLOAD, DEMO_POLICIES.split(","), out_dir, config, None)
    if advise:
        console.print(f"[bold]trimtab advise[/bold] on {DEMO_ADVISED}: where do its GPU-hours go, and what fixes it?")
        advise_on(DEMO_CLUSTER, DEMO_WORKLOAD, DEMO_ADVISED, config, out_dir / "advice")


@commands.command("report")
def report_cmd(runs: Annotated[list[Path], typer.Argument(help="Run files written by simulate --out or compare; "
                                                                "runs of one policy with different seeds are "
                                                                "taken together.")],
               out: Annotated[Path, typer.Option("--out", "-o", help="Directory of the report.")] = Path("report"),
               baseline: BaselineOpt = None, window_s: ReportWindowOpt = None) -> None:
    """Write the HTML report (and its PNG figures) for one or more run files: the verdict against a baseline, the
    summary table, small multiples over time, node table and heat map."""
    from trimtab.report import write_report

    groups: dict[str, list[dict[str, Any]]] = {}
    for path in runs:
        run = _read_run(path)
        name = str(run.get("policy") or path.stem)
        seed = run.get("config", {}).get("seed")
        while name in groups and (seed is None or seed in [r.get("config", {}).get("seed") for r in groups[name]]):
            name += "'"
        groups.setdefault(name, []).append(run)
    summaries = {name: [r["summary"] for r in seeds] for name, seeds in groups.items()}
    try:
        index = write_report(groups, out, title="trimtab report", subtitle=", ".join(str(p) for p in runs),
                             baseline=baseline, window_s=window_s)
    except ValueError as exc:
        fail(str(exc))
    console.print(_summary_table(summaries))
    _print_verdict(groups, baseline)
    console.print(f"report written to {index}")


def _read_run(path: Path) -> dict[str, Any]:
    try:
        run = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        fail(f"{path}: cannot read a run file: {exc}")
    if not isinstance(run, dict) or not {"summary", "series", "jobs"} <= set(run):
        fail(f"{path}: not a run file (needs summary, series and jobs)")
    return run


@commands.command("tune")
def tune_cmd(cluster: ClusterOpt, workload: WorkloadOpt,
             policy: Annotated[str, typer.Option("--policy", "-p", help="The profile to tune.")] = "steady",
             objective: Annotated[str, typer.Option(help="Metrics to lower (or raise, for utilisation and "
                                                         "fairness), comma-separated.")] = "p99_jct_s,goodput_cv",
             budget: Annotated[int, typer.Option(help="Candidates to try.")] = 16,
             tune_share: Annotated[float, typer.Option(help="Share of the jobs (by submission) tuned on; the "
                                                            "rest is held out.")] = 0.7,
             out: Annotated[Path, typer.Option(help="Where the tuned profile (YAML) goes, if it beats the base on "
                                                    "the held-out jobs.")] = Path("tuned.yaml"),
             force: Annotated[bool, typer.Option("--force", help="Write the tuned profile even when it does not "
                                                                 "beat the base on the held-out jobs.")] = False,
             seed: SeedOpt = 0, checkpoint_s: CheckpointOpt = 600.0, restart_s: RestartOpt = 30.0,
             faults: FaultsOpt = "", load: LoadOpt = 1.0,
             workers: Annotated[int | None, typer.Option(help="Parallel runs (default: local cores).")] = None,
             ray: Annotated[str | None, typer.Option("--ray", help="Run the simulations as tasks on the Ray "
                                                                   "cluster at this address.")] = None,
             ) -> None:
    """Search a profile's numeric parameters on part of a workload; report the result on the held-out part."""
    from trimtab.metrics import SUMMARY_KEYS
    from trimtab.profile import Profile
    from trimtab.sim.run import SimConfig
    from trimtab.sim.tune import tune

    metrics = [m.strip() for m in objective.split(",") if m.strip()]
    unknown = [m for m in metrics if m not in SUMMARY_KEYS]
    if unknown or not metrics:
        fail(f"--objective: unknown metric(s) {', '.join(unknown) or '(none given)'}; "
              f"choose from {', '.join(SUMMARY_KEYS)}")
    try:
        nodes, jobs = load_inputs(cluster, workload, seed)
        base = Profile.load(policy)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    try:
        config = SimConfig(seed=seed, checkpoint_s=checkpoint_s, restart_s=restart_s, timing=False, faults=faults,
                           load=load)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    with console.status(f"tuning {base.name}: {budget} candidates on {len(jobs)} jobs..."):
        try:
            result = tune(nodes, jobs, base, metrics, budget, config, seed=seed, tune_share=tune_share,
                          workers=workers, ray_address=ray)
        except ValueError as exc:
            fail(str(exc))
    table = Table("part", "profile", *metrics, "score (1 = base)",
                  title=f"tuning {base.name}: {result['tune_jobs']} jobs tuned on, {result['held_out_jobs']} held out")
    for part in ("tune", "held_out"):
        for which in ("base", "tuned"):
            values = result[part][which]
            score = "1.000" if which == "base" else f"{result[part]['score']:.3f}"
            table.add_row(part, which, *("-" if values[m] is None else f"{values[m]:.4g}" for m in metrics), score)
    console.print(table)
    _write_tuned(result, out, force)


def _write_tuned(result: dict[str, Any], out: Path, force: bool) -> None:
    """Write the tuned profile to `out` if it beat the base on the held-out jobs (or `force`), else say why not."""
    import yaml

    held_score = result["held_out"]["score"]
    if not result["improved"] and not force:
        kept = f"; {out} is left as it was" if out.exists() else ""
        console.print(f"nothing written: the tuned profile scores {held_score:.4f} on the held-out jobs, no better "
                      f"than {result['base']} (1.0000){kept}. --force writes it anyway.", highlight=False)
        return
    profile = {k: v for k, v in result["tuned_profile"].items() if v not in ([], {}, "")}
    out.write_text(yaml.safe_dump(profile, sort_keys=False))
    worse = "" if result["improved"] else f", though it scores {held_score:.4f} on the held-out jobs (base: 1.0000)"
    console.print(f"tuned profile written to {out}{worse} (use it with --policy {out})", highlight=False)


@commands.command("policies")
def policies_cmd() -> None:
    """List the built-in policies."""
    from trimtab.profile import Profile

    table = Table("policy", "description")
    for name in Profile.builtin_names():
        table.add_row(name, Profile.load(name).description)
    console.print(table)
