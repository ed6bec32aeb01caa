"""Data locality in the simulator: datasets with a size, an LRU cache per node, loads over the node link and the
rack uplink with shared bandwidth, prefetches, and the network-utilisation meter.

Owns the cache contents and the in-flight loads; the world asks it how long a job's data takes to arrive."""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from trimtab.cluster import ClusterState
from trimtab.model import Job


@dataclass(frozen=True, slots=True)
class DataConfig:
    """Assumptions of the locality model (all labelled assumptions; override per run).

    cache_gb: local cache per node (NVMe) for datasets. node_link_gb_s: a node's share of the path to storage
    (10 Gbit/s class effective read rate, 1.25 GB/s). uplink_gb_s: a rack's uplink towards storage (25 Gbit/s
    class effective, 3.1 GB/s): loads of many nodes of a rack share it. datasets / dataset_min_gb / dataset_max_gb:
    when a job names no dataset, it reads one of `datasets` datasets (popularity Zipf 1.1, by a hash of its id and
    the seed), whose size is log-uniform in [min, max] GB."""

    cache_gb: float = 1000.0
    node_link_gb_s: float = 1.25
    uplink_gb_s: float = 3.1
    datasets: int = 40
    dataset_min_gb: float = 20.0
    dataset_max_gb: float = 600.0
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.cache_gb, self.node_link_gb_s, self.uplink_gb_s) <= 0 or self.datasets < 1:
            raise ValueError("data model: cache_gb, node_link_gb_s, uplink_gb_s must be > 0 and datasets >= 1")


def assign_datasets(jobs: Sequence[Job], config: DataConfig) -> list[Job]:
    """Jobs with a dataset: those that name one keep it; the others get one drawn from a Zipf popularity by a hash
    of (seed, job id), so the assignment does not depend on job order or policy."""
    rng = np.random.default_rng([config.seed, 7])
    sizes = np.exp(rng.uniform(np.log(config.dataset_min_gb), np.log(config.dataset_max_gb), config.datasets))
    weights = 1.0 / np.arange(1, config.datasets + 1) ** 1.1
    cdf = np.cumsum(weights / weights.sum())
    out: list[Job] = []
    for job in jobs:
        if job.dataset:
            out.append(job)
            continue
        u = (zlib.crc32(f"{config.seed}/{job.id}".encode()) & 0xFFFFFFFF) / 2**32
        k = min(int(np.searchsorted(cdf, u, side="right")), config.datasets - 1)
        out.append(replace(job, dataset=f"ds{k:03d}", dataset_gb=float(round(sizes[k], 1))))
    return out


class NetMeter:
    """Utilisation of each network link over time: `change(t, link, d)` adds `d` (1: the link at 100%) to `link`
    from `t` on. `mean(first, end, links)` averages over [first, end] and over `links` links, each link's load
    capped at 100% (offered traffic beyond a link's capacity does not count twice)."""

    def __init__(self) -> None:
        self._t: list[float] = []
        self._link: list[int] = []
        self._d: list[float] = []

    def change(self, time_s: float, link: int, delta: float) -> None:
        if delta:
            self._t.append(time_s)
            self._link.append(link)
            self._d.append(delta)

    def mean(self, first_s: float, end_s: float, links: int) -> float:
        if not self._t or end_s <= first_s or links <= 0:
            return 0.0
        t = np.clip(np.array(self._t), first_s, end_s)
        link = np.array(self._link)
        order = np.lexsort((t, link))
        t, link, d = t[order], link[order], np.array(self._d)[order]
        level = np.cumsum(d)
        starts = np.r_[0, np.flatnonzero(np.diff(link)) + 1]
        offset = np.zeros(t.size)
        offset[starts] = level[starts] - d[starts]
        level -= np.maximum.accumulate(np.where(np.isin(np.arange(t.size), starts), offset, -np.inf))
        nxt = np.r_[t[1:], end_s]
        last = np.r_[starts[1:] - 1, t.size - 1]
        nxt[last] = end_s
        busy = float((np.clip(level, 0.0, 1.0) * (nxt - t)).sum())
        return busy / ((end_s - first_s) * links)


class DataModel:
    """Per-node LRU caches and in-flight loads. A load of G GB to node i runs at its fair share of the node link
    and of its rack's uplink at the moment it starts: rate = min(node_link / (loads on the node + 1), uplink /
    (loads in the rack + 1)). The rate is then fixed for the load (a simplification: loads that start later do not
    slow one already running, but are slowed by it). A dataset is in the cache from the moment its load starts
    (space is reserved then; least recently used datasets are evicted to make room)."""

    def __init__(self, cluster: ClusterState, config: DataConfig, meter: NetMeter | None = None) -> None:
        self.cluster = cluster
        self.config = config
        self.meter = meter
        n = len(cluster)
        self.caches: list[OrderedDict[str, float]] = [OrderedDict() for _ in range(n)]
        self.used_gb = np.zeros(n)
        self.ready_s: list[dict[str, float]] = [{} for _ in range(n)]  # dataset -> when its load ends
        self._node_loads: list[list[float]] = [[] for _ in range(n)]  # end times of loads on each node
        self._rack_loads: list[list[float]] = [[] for _ in range(len(cluster.racks))]
        self._masks: dict[str, np.ndarray] = {}
        self.loads = 0
        self.loaded_gb = 0.0
        self.prefetches = 0

    def cached_mask(self, dataset: str) -> np.ndarray:
        """Nodes whose cache holds `dataset` (or is loading it): a view, do not modify."""
        mask = self._masks.get(dataset)
        if mask is None:
            mask = self._masks[dataset] = np.zeros(len(self.cluster), dtype=bool)
        return mask

    def delay_s(self, dataset: str, size_gb: float, nodes: Sequence[int], now_s: float) -> float:
        """Seconds from `now_s` until `dataset` is on every node of `nodes`, starting the loads that are needed."""
        if not dataset or size_gb <= 0:
            return 0.0
        return max(self._ensure(dataset, size_gb, int(i), now_s) for i in nodes)

    def prefetch(self, dataset: str, size_gb: float, node: int, now_s: float) -> None:
        """Load `dataset` onto `node` ahead of a job that is likely to run there: nothing if it is already there,
        or if anything is loading in the node's rack (a prefetch never slows the load of a job holding GPUs)."""
        if dataset and size_gb > 0 and dataset not in self.caches[node] and self._rack_idle(node, now_s):
            self.prefetches += 1
            self._ensure(dataset, size_gb, node, now_s)

    def _ensure(self, dataset: str, size_gb: float, node: int, now_s: float) -> float:
        cache = self.caches[node]
        if dataset in cache:
            cache.move_to_end(dataset)
            return max(self.ready_s[node].get(dataset, now_s) - now_s, 0.0)
        rate = self.rate_gb_s(node, now_s)
        duration = size_gb / rate
        end = now_s + duration
        self._node_loads[node].append(end)
        self._rack_loads[int(self.cluster.rack_idx[node])].append(end)
        self._insert(node, dataset, size_gb)
        self.ready_s[node][dataset] = end
        self.loads += 1
        self.loaded_gb += size_gb
        if self.meter is not None:
            uplink = len(self.cluster) + int(self.cluster.rack_idx[node])  # links: nodes first, then racks
            for link, share in ((node, rate / self.config.node_link_gb_s), (uplink, rate / self.config.uplink_gb_s)):
                self.meter.change(now_s, link, share)
                self.meter.change(end, link, -share)
        return duration

    def rate_gb_s(self, node: int, now_s: float) -> float:
        """The rate a load starting now on `node` gets (its fair share of the node link and the rack uplink)."""
        on_node = self._node_loads[node]
        on_node[:] = [e for e in on_node if e > now_s]
        in_rack = self._rack_loads[int(self.cluster.rack_idx[node])]
        in_rack[:] = [e for e in in_rack if e > now_s]
        return min(self.config.node_link_gb_s / (len(on_node) + 1), self.config.uplink_gb_s / (len(in_rack) + 1))

    def _rack_idle(self, node: int, now_s: float) -> bool:
        self.rate_gb_s(node, now_s)  # drops the loads that are over
        return not self._rack_loads[int(self.cluster.rack_idx[node])]

    def _insert(self, node: int, dataset: str, size_gb: float) -> None:
        cache = self.caches[node]
        while cache and self.used_gb[node] + size_gb > self.config.cache_gb:
            old, old_gb = cache.popitem(last=False)
            self.used_gb[node] -= old_gb
            self.ready_s[node].pop(old, None)
            self.cached_mask(old)[node] = False
        if size_gb > self.config.cache_gb:
            return  # streamed, never cached
        cache[dataset] = size_gb
        self.used_gb[node] += size_gb
        self.cached_mask(dataset)[node] = True
