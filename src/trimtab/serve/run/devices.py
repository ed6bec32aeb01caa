"""The device book: which GPU, or share of one, each live task holds, by device id; and what a task holding a
share is told about it (its CUDA MPS limits)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from trimtab.cluster import GPU_MILLI
from trimtab.model import Node
from trimtab.serve.run.attempts import Run
from trimtab.serve.run.gpus import Device, Inventory


class DeviceBook:
    """What live processes hold, by device id, tasks of stopped attempts still draining included. The scheduler's
    ClusterState decides placement by GPU index; this book decides when an attempt may launch on the GPUs the
    scheduler chose: once each has room for its share. Device i of a node is the scheduler's GPU index i on it.

    The daemon's loop is the only writer (`hold` when a task launches or is adopted, `release` when the executor
    reports it gone), so no GPU is ever given to two tasks beyond GPU_MILLI."""

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.device_ids: dict[str, tuple[str, ...]] = {}
        self.device_index: dict[str, dict[str, int]] = {}
        self.held_milli: dict[str, dict[str, int]] = {}
        self.runs: dict[str, Run] = {}  # every task that may still hold its GPUs, current attempt or not
        for node in inventory.nodes:
            self._book_node(node.name)

    def _book_node(self, name: str) -> None:
        ids = self.device_ids[name] = tuple(d.id for d in self.inventory.devices[name])
        self.device_index[name] = {d: i for i, d in enumerate(ids)}
        self.held_milli[name] = dict.fromkeys(ids, 0)

    def add_nodes(self, nodes: list[Node], found: Inventory) -> None:
        """Nodes that joined after the start, with their devices as `found` lists them."""
        devices = dict(self.inventory.devices)
        for node in nodes:
            devices[node.name] = found.devices[node.name]
        self.inventory = Inventory((*self.inventory.nodes, *nodes), devices, self.inventory.source)
        for node in nodes:
            self._book_node(node.name)

    def gpu_index(self, node: str, gpu: str) -> int:
        """The scheduler's index of device `gpu` of `node`; raises if this server does not have it."""
        index = self.device_index[node].get(gpu)
        if index is None:
            raise RuntimeError(f"the store records GPU {gpu} on node {node}, which this server does not have")
        return index

    def has_room(self, wanted: Counter[tuple[str, str]], milli: int) -> bool:
        """Whether every (node, device) in `wanted` has room for `milli` as many times as it is wanted."""
        return all(self.held_milli[name][gpu] + milli * times <= GPU_MILLI for (name, gpu), times in wanted.items())

    def hold(self, run: Run) -> None:
        """Book the run's share of its GPUs; no GPU is ever booked beyond 1000 milli."""
        held = self.held_milli[run.node]
        for gpu in run.gpu_ids:
            if gpu not in held:
                raise RuntimeError(f"node {run.node} has no GPU {gpu}")
            if held[gpu] + run.milli > GPU_MILLI:
                raise RuntimeError(f"GPU {gpu} of node {run.node} holds {held[gpu]} milli; refusing to add "
                                   f"{run.milli} more")
        for gpu in run.gpu_ids:
            held[gpu] += run.milli
        self.runs[run.run_id] = run
        run.attempt.live[run.run_id] = run

    def release(self, run_id: str) -> Run | None:
        """The task is gone: its GPUs are free again. None for a task this book does not hold."""
        run = self.runs.pop(run_id, None)
        if run is not None:
            held = self.held_milli[run.node]
            for gpu in run.gpu_ids:
                held[gpu] -= run.milli
        return run

    def share_env(self, node: str, gpu: str, milli: int) -> dict[str, str]:
        """MPS limits of a task holding `milli` of one GPU: its share of the GPU's threads, as a whole percent
        (rounded down, at least 1), and of its memory (left out when the GPU's memory is unknown). The task sees
        one GPU, which CUDA numbers 0 inside it: MPS reads the device in CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
        ("<device>=<limit>[,...]") as the client's device ordinal."""
        env = {"TRIMTAB_GPU_MILLI": str(milli), "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, milli // 10))}
        memory_mib = self.inventory.devices[node][self.device_index[node][gpu]].memory_mib
        if memory_mib:
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={memory_mib * milli // GPU_MILLI}M"
        return env

    def devices_json(self) -> dict[str, list[dict[str, Any]]]:
        """The GPUs of each node for the API: `jobs` every job holding it with its share (one whole-GPU job, or
        shares), `job_id` the first of them (None: idle), `milli_allocated` their sum."""
        holders: dict[tuple[str, str], list[dict[str, int]]] = {}
        for run in self.runs.values():
            for gpu in run.gpu_ids:
                holders.setdefault((run.node, gpu), []).append({"job_id": run.attempt.job_id, "milli": run.milli})
        return {node: [_device_json(d, holders.get((node, d.id), [])) for d in devices]
                for node, devices in self.inventory.devices.items()}


def _device_json(device: Device, holders: list[dict[str, int]]) -> dict[str, Any]:
    return {"id": device.id, "model": device.model, "memory_mib": device.memory_mib,
            "job_id": holders[0]["job_id"] if holders else None, "jobs": holders,
            "milli_allocated": sum(h["milli"] for h in holders)}
