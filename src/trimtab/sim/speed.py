"""How long a job runs in the simulator given where it was placed: the run-time model seam and its models.

Owns the spread of a gang (NVLink island, node, rack, cross-rack) and its slowdown, and GPU-model throughputs."""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Protocol

import numpy as np

from trimtab.cluster import Allocation, ClusterState
from trimtab.formats import yaml_document
from trimtab.model import Job


class SpeedModel(Protocol):
    def slowdown(self, job: Job, alloc: Allocation, cluster: ClusterState) -> float:
        """Wall seconds per reference second of progress for `job` placed at `alloc` (1.0: reference speed;
        2.0: half speed). Must be > 0."""
        ...


class ReferenceSpeed:
    """Every job runs at its reference duration wherever it is placed (the assumption of Tiresias's simulator)."""

    def slowdown(self, job: Job, alloc: Allocation, cluster: ClusterState) -> float:
        return 1.0


# ------------------------------------------------------------------------------------------------ topology


class Spread(IntEnum):
    """How widely a gang is spread, tightest first."""

    ISLAND = 0  # one node, inside one NVLink island
    NODE = 1  # one node, over several islands (PCIe / inter-socket hops)
    RACK = 2  # several nodes under one top-of-rack switch
    CROSS_RACK = 3  # several racks (through the aggregation layer)


# Extra wall time per reference second, for a fully communication-bound job (sensitivity 1), by spread.
# ASSUMPTIONS, not measurements: the order of magnitude follows Tiresias (NSDI'19, section 2.3: consolidation
# matters much for models with large tensors such as VGG, little for ResNet) and Gandiva (OSDI'18, intra- vs
# inter-server placement), which report slowdowns of up to about 2x for communication-heavy models spread over
# servers; no number here is taken from either paper. Override with TopologySpeed(penalty=...).
DEFAULT_SPREAD_PENALTY: Mapping[Spread, float] = {
    Spread.ISLAND: 0.0, Spread.NODE: 0.1, Spread.RACK: 0.4, Spread.CROSS_RACK: 0.8,
}

# Communication sensitivity (0: compute-bound, 1: communication-bound) by job-type pattern, first match wins.
# ASSUMPTION, following the qualitative ranking in Tiresias section 2.3 (VGG, large language and translation
# models with big embedding / fully connected layers are sensitive; ResNets and small models less so).
DEFAULT_SENSITIVITY: tuple[tuple[str, float], ...] = (
    (r"vgg|alexnet|transformer|bert|gpt|lm\b|lstm|translation", 1.0),
    (r"resnet-?50|resnet50|inception|deepspeech", 0.5),
    (r"resnet-?18|cifar|a3c|recommendation|cyclegan|mnist", 0.2),
)
DEFAULT_UNKNOWN_SENSITIVITY = 0.5  # a trace without job types (Philly): mid-way, an assumption


def spread_of(alloc: Allocation, cluster: ClusterState, island_gpus: int) -> Spread:
    """The spread of an allocation. Inside a node the GPUs are assumed packed into islands (the simulator does not
    track GPU indices), so k GPUs on one node stay in one island when k <= `island_gpus`."""
    if len(alloc.nodes) > 1:
        racks = cluster.rack_idx[alloc.nodes]
        return Spread.CROSS_RACK if (racks != racks[0]).any() else Spread.RACK
    if island_gpus > 0 and alloc.gpus > island_gpus:
        return Spread.NODE
    return Spread.ISLAND


@dataclass(frozen=True)
class TopologySpeed:
    """slowdown = 1 + sensitivity(job type) x penalty(spread). A single-GPU job is never slowed.

    `island_gpus`: GPUs per NVLink island (4: two islands per 8-GPU node, as on PCIe-switch servers; an
    assumption). `sensitivity`: (regex on the lower-cased job type, value) pairs, first match wins."""

    island_gpus: int = 4
    penalty: Mapping[Spread, float] = field(default_factory=lambda: dict(DEFAULT_SPREAD_PENALTY))
    sensitivity: Sequence[tuple[str, float]] = DEFAULT_SENSITIVITY
    unknown_sensitivity: float = DEFAULT_UNKNOWN_SENSITIVITY
    _cache: dict[str, float] = field(default_factory=dict, compare=False, repr=False)

    def sensitivity_of(self, job_type: str) -> float:
        value = self._cache.get(job_type)
        if value is None:
            text = job_type.lower()
            value = next((s for pattern, s in self.sensitivity if re.search(pattern, text)),
                         self.unknown_sensitivity)
            self._cache[job_type] = value
        return value

    def slowdown(self, job: Job, alloc: Allocation, cluster: ClusterState) -> float:
        if alloc.gpus <= 1:
            return 1.0
        spread = spread_of(alloc, cluster, self.island_gpus)
        return 1.0 + self.sensitivity_of(job.job_type) * self.penalty[spread]


# ------------------------------------------------------------------------------------------------ GPU models


class GpuThroughputs:
    """Steps per second of each job type on each GPU model, alone: `rate[(job_type, scale)][model]`.

    `factor(job, model)` = rate on the reference model / rate on `model`: wall seconds per reference second on
    that model. A job type missing from the table runs at the mean factor of the known types on that model; a
    model missing from the table runs at the reference speed."""

    def __init__(self, rates: Mapping[tuple[str, int], Mapping[str, float]], reference: str) -> None:
        self.rates = {k: dict(v) for k, v in rates.items()}
        self.reference = reference
        models = sorted({m for v in self.rates.values() for m in v})
        self.models = models
        mean: dict[str, float] = {}
        for model in models:
            ratios = [v[reference] / v[model] for v in self.rates.values()
                      if v.get(model, 0) > 0 and v.get(reference, 0) > 0]
            mean[model] = float(np.mean(ratios)) if ratios else 1.0
        self._mean_factor = mean

    @classmethod
    def load(cls, path: str | Path, reference: str = "v100") -> GpuThroughputs:
        """Gavel's simulation_throughputs.json ({model: {"('<type>', <scale>)": {"null": steps/s}}}) or a YAML
        table {model: {job_type: steps/s}} (scale 1)."""
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        rates: dict[tuple[str, int], dict[str, float]] = {}
        if path.suffix == ".json":
            table = json.loads(text)
            for model, entries in table.items():
                if "_" in model:  # Gavel's *_unconsolidated variants
                    continue
                for key, entry in entries.items():
                    job_type, scale = ast.literal_eval(key)
                    rate = float(entry["null"])
                    if math.isfinite(rate) and rate > 0:
                        rates.setdefault((str(job_type), int(scale)), {})[model] = rate
        else:
            table = yaml_document(text, str(path))
            if not isinstance(table, dict):
                raise ValueError(f"{path}: expected a mapping {{gpu model: {{job type: steps/s}}}}")
            for model, entries in table.items():
                for job_type, rate in (entries or {}).items():
                    rates.setdefault((str(job_type), 1), {})[str(model)] = float(rate)
        if not rates:
            raise ValueError(f"{path}: no throughputs found")
        return cls(rates, reference)

    def factor(self, job_type: str, scale: int, model: str) -> float:
        entry = self.rates.get((job_type, scale)) or self.rates.get((job_type, 1))
        if entry is None or entry.get(model, 0) <= 0 or entry.get(self.reference, 0) <= 0:
            return self._mean_factor.get(model, 1.0)
        return entry[self.reference] / entry[model]

    def speeds(self, job_type: str, scale: int, models: Sequence[str]) -> np.ndarray:
        """Relative speed (1 / factor) of the job type on each of `models`."""
        return np.array([1.0 / self.factor(job_type, scale, m) for m in models])


@dataclass
class GpuModelSpeed:
    """A gang runs at the pace of its slowest GPU: slowdown = max over its nodes' models of `factor`."""

    table: GpuThroughputs
    _cache: dict[tuple[str, int, int], float] = field(default_factory=dict, repr=False)

    def slowdown(self, job: Job, alloc: Allocation, cluster: ClusterState) -> float:
        worst = 0.0
        for m in np.unique(cluster.model_idx[alloc.nodes]):
            key = (job.job_type, job.tasks, int(m))
            f = self._cache.get(key)
            if f is None:
                f = self.table.factor(job.job_type, job.tasks, cluster.gpu_models[int(m)])
                self._cache[key] = f
            worst = max(worst, f)
        return worst or 1.0


@dataclass
class CompositeSpeed:
    """The product of several models' slowdowns (they are independent factors)."""

    models: Sequence[SpeedModel]

    def slowdown(self, job: Job, alloc: Allocation, cluster: ClusterState) -> float:
        value = 1.0
        for model in self.models:
            value *= model.slowdown(job, alloc, cluster)
        return value
