"""The run-time models of a simulated run, built from the `--speed` mini-language: which SpeedModel sets run
times, and the data model and network meter beside it. Owns the grammar of `--speed` and the model assembly."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trimtab.cluster import Allocation, ClusterState
from trimtab.model import Job
from trimtab.sim.data import DataConfig, DataModel, NetMeter
from trimtab.sim.speed import CompositeSpeed, GpuModelSpeed, GpuThroughputs, ReferenceSpeed, SpeedModel, TopologySpeed

_DATA_KEYS = {"cache-gb": "cache_gb", "node-link-gb-s": "node_link_gb_s", "uplink-gb-s": "uplink_gb_s",
              "datasets": "datasets", "dataset-min-gb": "dataset_min_gb", "dataset-max-gb": "dataset_max_gb"}


def parse_speed(spec: str) -> tuple[set[str], dict[str, str]]:
    """The enabled models and the key=value settings of a `--speed` spec: comma-separated `topology`, `data`,
    `reference` (the default, nothing enabled), `gpus=PATH` and settings (island-gpus, reference-gpu, and the data
    model's cache-gb, node-link-gb-s, uplink-gb-s, datasets, dataset-min-gb, dataset-max-gb)."""
    names: set[str] = set()
    settings: dict[str, str] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item or item == "reference":
            continue
        key, eq, value = (p.strip() for p in item.partition("="))
        if eq:
            settings[key] = value
            if key == "gpus":
                names.add("gpus")
        elif key in ("topology", "data"):
            names.add(key)
        else:
            raise ValueError(f"speed {spec!r}: unknown model {key!r} (topology, gpus=PATH, data, "
                             "reference, or key=value settings)")
    known = {"gpus", "island-gpus", "reference-gpu", *(_DATA_KEYS)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"speed {spec!r}: unknown setting(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(known))}")
    if "gpus" in settings and not settings["gpus"]:
        raise ValueError("speed gpus=PATH needs a throughput table path")
    return names, settings


def data_config(spec: str, seed: int) -> DataConfig | None:
    """The data model's assumptions when the `--speed` spec enables `data`, else None."""
    names, settings = parse_speed(spec)
    if "data" not in names:
        return None
    kwargs: dict[str, Any] = {"seed": seed}
    for key, name in _DATA_KEYS.items():
        if key in settings:
            kwargs[name] = int(settings[key]) if name == "datasets" else float(settings[key])
    return DataConfig(**kwargs)


@dataclass(slots=True)
class RunModels:
    """What sets a run's times: `speed` (slowdown per placement), `topology` (when enabled: also the gangs'
    communication sensitivity), `data` (dataset loads) and `meter` (link use, with data or topology), and
    `gpu_speeds` (a job's relative speed per GPU model, with a throughput table: what placement plugins see)."""

    speed: SpeedModel
    topology: TopologySpeed | None = None
    meter: NetMeter | None = None
    data: DataModel | None = None
    gpu_speeds: Callable[[Job], np.ndarray] | None = None


def build_models(spec: str, seed: int, cluster: ClusterState, given: SpeedModel | None = None) -> RunModels:
    """The models a `--speed` spec names, on `cluster`; `given`, if any, replaces the speed models it names."""
    names, settings = parse_speed(spec)
    models: list[SpeedModel] = []
    built = RunModels(ReferenceSpeed())
    if "topology" in names:
        built.topology = TopologySpeed(island_gpus=int(settings.get("island-gpus", 4)))
        models.append(built.topology)
    if "gpus" in names:
        table = GpuThroughputs.load(settings["gpus"], settings.get("reference-gpu", "v100"))
        models.append(GpuModelSpeed(table))
        built.gpu_speeds = _gpu_speeds(table, cluster.gpu_models)
    built.speed = given or (models[0] if len(models) == 1 else CompositeSpeed(models) if models else ReferenceSpeed())
    dcfg = data_config(spec, seed)
    if dcfg is not None or built.topology is not None:
        built.meter = NetMeter()
    if dcfg is not None:
        built.data = DataModel(cluster, dcfg, built.meter)
    return built


def _gpu_speeds(table: GpuThroughputs, gpu_models: Sequence[str]) -> Callable[[Job], np.ndarray]:
    cache: dict[tuple[str, int], np.ndarray] = {}

    def gpu_speeds(job: Job) -> np.ndarray:
        key = (job.job_type, job.tasks)
        if key not in cache:
            cache[key] = table.speeds(job.job_type, job.tasks, gpu_models)
        return cache[key]

    return gpu_speeds


class ScalingSpeed:
    """The SpeedModel of a job with its own scaling model (`Job.scaling`: elastic jobs, Pollux's workloads): its
    duration is its run time on its own GPU count packed on the fewest nodes of the cluster, and an allocation
    runs at the model's throughput there relative to that reference. So a resize changes the job's rate of
    progress, and a gang spread over more nodes than it needs runs at the throughput the model gives it."""

    def slowdown(self, job: Job, alloc: Allocation, cluster: ClusterState) -> float:
        assert job.scaling is not None
        per_node = int(cluster.cap_gpus.max())
        reference = job.scaling.throughput(job.gpus, math.ceil(job.gpus / per_node))
        return reference / job.scaling.throughput(alloc.gpus, len(alloc.nodes))
