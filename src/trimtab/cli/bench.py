"""The benchmark commands, `trimtab bench ...`: published experiments reproduced on the simulator.

`trimtab bench packing`: the FGD paper's packing experiment (sim/packing.py) with a table, JSON and a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trimtab.cli.common import console, fail, write_json

commands = typer.Typer(no_args_is_help=True, help="Benchmarks and published experiments.")


@commands.command("packing")
def packing_cmd(
    nodes: Annotated[str, typer.Option(help="Cluster: openb:PATH/openb_node_list_all_node.csv, a shape or a file.")],
    pods: Annotated[str, typer.Option(help="Pods: openb:PATH/openb_pod_list_default.csv (or any trace).")],
    inflate: Annotated[float, typer.Option(help="Arrived GPU demand to reach, as a share of GPU capacity.")] = 1.3,
    seeds: Annotated[str, typer.Option(help="Seeds: 42-51, 1,5,7 or 42.")] = "42-51",
    policies: Annotated[str, typer.Option(help="Comma-separated packing policies (score plugins) or YAML paths.")]
    = "best-fit,fgd,steady-pack",
    out: Annotated[Path, typer.Option(help="JSON result; the PNG plot goes beside it (.png).")] = Path("packing.json"),
    workers: Annotated[int | None, typer.Option(help="Parallel runs (default: local cores).")] = None,
) -> None:
    """The FGD paper's packing experiment: GPU allocation ratio against arrived GPU demand, per policy.

    Pods arrive in a seeded random order, inflated until the arrived GPU request reaches INFLATE x capacity;
    pods never leave; a pod that fits nowhere is skipped. Prints the GPU allocation ratio (%) at 100% and at the
    end, writes every 1% curve per seed and as the mean (JSON keys policies.<name>.mean["100"], ...) and a PNG."""
    from trimtab.formats.cluster import load_cluster
    from trimtab.formats.traces import load_trace
    from trimtab.sim.packing import packing_experiment, parse_seeds, plot_packing

    try:
        node_list = load_cluster(nodes)
        pod_list = load_trace(pods)
        seed_list = parse_seeds(seeds)
        names = [p.strip() for p in policies.split(",") if p.strip()]
        with console.status(f"packing {len(pod_list)} pods on {len(node_list)} nodes: {len(names)} policies x "
                             f"{len(seed_list)} seeds"):
            result = packing_experiment(node_list, pod_list, names, seed_list, inflate=inflate, workers=workers)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    result = {"nodes": nodes, "pods": pods, **result}
    top = str(round(inflate * 100))
    table = Table(title=f"GPU allocation ratio (%), mean of {len(seed_list)} seeds: {len(pod_list)} pods, "
                        f"{result['capacity_gpus']} GPUs")
    for col in ("policy", "at 100% arrived", f"at {top}% arrived", "failed pods", "s per run"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for name, data in result["policies"].items():
        table.add_row(name, _fmt(data["mean"].get("100")), _fmt(data["mean"].get(top)), _count(data["failed_mean"]),
                      f"{data['wall_s_mean']:.1f}")
    console.print(table)
    write_json(result, out, readable=True)
    png = out.with_suffix(".png")
    plot_packing(result, png, title=f"{Path(pods.partition(':')[2] or pods).name}, inflate {inflate}")
    console.print(f"written {out} and {png}")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _count(mean: float) -> str:
    """A mean count of pods as people write it: 2589, or 2589.3 when the seeds disagree."""
    return f"{mean:g}"

