"""The `trimtab` command line: simulate, compare, demo, policies.

Thin: it parses specs, calls the library and prints Rich tables; all behaviour lives in the rooms above it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trimtab.framework import Profile
from trimtab.model import Job, Node
from trimtab.report import COLUMNS, best_per_column, write_report
from trimtab.sim.run import SimConfig, compare, simulate

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="trimtab: a GPU-cluster scheduler that keeps throughput steady, and its simulator.")
console = Console(width=None if sys.stdout.isatty() else 200)

DEMO_CLUSTER = "2r8x8"
DEMO_WORKLOAD = "synthetic:jobs=3000,seed=1,load=0.9"
DEMO_POLICIES = "fifo,fifo-backfill,sjf,srtf,las,priority"

ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="Shape (56x8, 4x8:v100, 7r8x8), YAML or spec file.")]
WorkloadOpt = Annotated[str, typer.Option(
    "--workload", "-w", help="Trace path ([tiresias:|philly:|gavel:|csv:]PATH) or synthetic[:k=v,..].")]
SeedOpt = Annotated[int, typer.Option(help="Seed of the run (and of a synthetic workload that names none).")]
CheckpointOpt = Annotated[float, typer.Option("--checkpoint-s",
                                              help="Checkpoint interval; 0: preemption loses nothing.")]
RestartOpt = Annotated[float, typer.Option("--restart-s", help="Restart cost of a resumed attempt, seconds.")]
WindowOpt = Annotated[float, typer.Option("--window-s", help="Width of the metric windows, seconds.")]
TimingOpt = Annotated[bool, typer.Option("--timing/--no-timing",
                                         help="Record the scheduler's wall-clock cost (not reproducible).")]


def load_inputs(cluster: str, workload: str, seed: int) -> tuple[list[Node], list[Job]]:
    """The cluster's nodes and the workload's jobs from their command-line specs."""
    from trimtab.sim.workload import parse_workload_spec, synthetic
    from trimtab.spec.cluster import load_cluster
    from trimtab.spec.traces import load_trace

    nodes = load_cluster(cluster)
    if workload == "synthetic" or workload.startswith("synthetic:"):
        params: dict[str, Any] = {"seed": seed, "cluster_gpus": sum(n.capacity.gpus for n in nodes)}
        params.update(parse_workload_spec(workload))
        return nodes, synthetic(**params)
    return nodes, load_trace(workload)


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(2)


def _write_json(data: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")


def _summary_table(summaries: dict[str, dict[str, Any]]) -> Table:
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


@app.command("simulate")
def simulate_cmd(cluster: ClusterOpt, workload: WorkloadOpt,
                 policy: Annotated[str, typer.Option("--policy", "-p", help="Built-in name or profile YAML.")] = "las",
                 seed: SeedOpt = 0, out: Annotated[Path | None, typer.Option(help="Write the run as JSON.")] = None,
                 checkpoint_s: CheckpointOpt = 600.0, restart_s: RestartOpt = 30.0, window_s: WindowOpt = 3600.0,
                 timing: TimingOpt = True) -> None:
    """Replay a workload on a cluster under one policy and print the summary metrics."""
    try:
        nodes, jobs = load_inputs(cluster, workload, seed)
        profile = Profile.load(policy)
        config = SimConfig(seed=seed, checkpoint_s=checkpoint_s, restart_s=restart_s, window_s=window_s,
                           timing=timing)
    except (ValueError, OSError) as exc:
        _fail(str(exc))
    t0 = time.perf_counter()
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total} jobs"), TimeElapsedColumn(),
                  console=console, transient=True, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task(f"{profile.name}", total=len(jobs))
        try:
            result = simulate(nodes, jobs, profile, config,
                              progress=lambda done, total: bar.update(task, completed=done))
        except ValueError as exc:
            _fail(str(exc))
    wall = time.perf_counter() - t0
    result = {"cluster": cluster, "workload": workload, **result}
    table = Table("metric", "value", title=f"{profile.name} on {cluster}: {len(jobs)} jobs in {wall:.1f} s")
    for key, value in result["summary"].items():
        table.add_row(key, "-" if value is None else str(value))
    console.print(table)
    if out:
        _write_json(result, out)
        console.print(f"run written to {out}")


@app.command("compare")
def compare_cmd(cluster: ClusterOpt, workload: WorkloadOpt,
                policies: Annotated[str, typer.Option(help="Comma-separated names or YAML paths.")] = DEMO_POLICIES,
                out_dir: Annotated[Path | None, typer.Option(help="Write <policy>.json and index.html here.")] = None,
                seed: SeedOpt = 0, checkpoint_s: CheckpointOpt = 600.0, restart_s: RestartOpt = 30.0,
                window_s: WindowOpt = 3600.0, timing: TimingOpt = True,
                workers: Annotated[int | None, typer.Option(help="Parallel runs (default: local cores).")] = None,
                ) -> None:
    """Run several policies on the same cluster and workload; print one table, best value per column marked."""
    _compare(cluster, workload, [p.strip() for p in policies.split(",") if p.strip()], out_dir,
             SimConfig(seed=seed, checkpoint_s=checkpoint_s, restart_s=restart_s, window_s=window_s,
                       timing=timing), workers)


def _compare(cluster: str, workload: str, policies: list[str], out_dir: Path | None, config: SimConfig,
             workers: int | None) -> dict[str, dict[str, Any]]:
    try:
        nodes, jobs = load_inputs(cluster, workload, config.seed)
        profiles = [Profile.load(p) for p in policies]
    except (ValueError, OSError) as exc:
        _fail(str(exc))
    t0 = time.perf_counter()
    with console.status(f"simulating {len(profiles)} policies on {len(jobs)} jobs..."):
        try:
            runs = compare(nodes, jobs, profiles, config, workers=workers)
        except ValueError as exc:
            _fail(str(exc))
    wall = time.perf_counter() - t0
    title = f"{len(jobs)} jobs of {workload} on {cluster} ({sum(n.capacity.gpus for n in nodes)} GPUs)"
    table = _summary_table({name: run["summary"] for name, run in runs.items()})
    table.title = f"{title}: {wall:.1f} s"
    console.print(table)
    if out_dir:
        for name, run in runs.items():
            _write_json({"cluster": cluster, "workload": workload, **run}, out_dir / f"{name}.json")
        index = write_report(runs, out_dir, title="trimtab: policy comparison", subtitle=title)
        console.print(f"runs and report written to {out_dir} ({index})")
    return runs


@app.command("demo")
def demo_cmd(out_dir: Annotated[Path, typer.Option(help="Where the report goes.")] = Path("trimtab-report")) -> None:
    """The built-in synthetic workload on a built-in cluster: compare the built-in policies, write a report."""
    console.print(f"[bold]trimtab demo[/bold]: {DEMO_WORKLOAD} on {DEMO_CLUSTER}, policies {DEMO_POLICIES}")
    _compare(DEMO_CLUSTER, DEMO_WORKLOAD, DEMO_POLICIES.split(","), out_dir, SimConfig(seed=1), None)


@app.command("report")
def report_cmd(runs: Annotated[list[Path], typer.Argument(help="Run files written by simulate --out or compare.")],
               out: Annotated[Path, typer.Option("--out", "-o", help="Directory of the report.")] = Path("report"),
               ) -> None:
    """Write the HTML report (and its PNG figures) for one or more run files."""
    loaded: dict[str, dict[str, Any]] = {}
    for path in runs:
        try:
            run = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            _fail(f"{path}: cannot read a run file: {exc}")
        if not isinstance(run, dict) or not {"summary", "series", "jobs"} <= set(run):
            _fail(f"{path}: not a run file (needs summary, series and jobs)")
        name = str(run.get("policy") or path.stem)
        while name in loaded:
            name += "'"
        loaded[name] = run
    console.print(_summary_table({name: run["summary"] for name, run in loaded.items()}))
    index = write_report(loaded, out, title="trimtab report", subtitle=", ".join(str(p) for p in runs))
    console.print(f"report written to {index}")


@app.command("policies")
def policies_cmd() -> None:
    """List the built-in policies."""
    table = Table("policy", "description")
    for name in Profile.builtin_names():
        table.add_row(name, Profile.load(name).description)
    console.print(table)


def _register_rooms() -> None:
    from trimtab import cli_bench, cli_serve

    for room in (cli_serve, cli_bench):
        room.register(app)


_register_rooms()

if __name__ == "__main__":  # pragma: no cover
    app()
