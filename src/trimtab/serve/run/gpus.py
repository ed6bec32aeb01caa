"""The GPUs the daemon may hand out: discovered with NVML (models, memory, MIG instances) when a driver is present,
or declared (`--gpus N`, a cluster file) as virtual GPUs for machines without one and for tests.

Owns `Inventory`: the scheduler's Nodes plus, per node, the device ids that CUDA_VISIBLE_DEVICES names."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from typing import Any

from trimtab.model import Node, Resources


@dataclass(frozen=True, slots=True)
class Device:
    """One schedulable GPU: a whole GPU (id = its index) or a MIG instance (id = its MIG UUID). `memory_mib` 0:
    unknown (a virtual GPU whose model name does not state it)."""

    id: str
    model: str
    memory_mib: int
    uuid: str = ""


@dataclass(frozen=True, slots=True)
class Inventory:
    """Nodes for the scheduler and each node's devices, in the order they are handed out. `source` says where
    they came from ("nvml", "virtual", or the cluster file) and is printed at start."""

    nodes: tuple[Node, ...]
    devices: dict[str, tuple[Device, ...]]
    source: str

    def describe(self) -> str:
        parts = []
        for node in self.nodes:
            devs = self.devices[node.name]
            model = node.gpu_model or "virtual"
            parts.append(f"{node.name}: {len(devs)} x {model}")
        return f"{self.source}: " + "; ".join(parts)


def _host_resources(gpus: int) -> Resources:
    cpus = os.cpu_count() or 1
    try:
        mem_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    except (ValueError, OSError):
        mem_mib = 0
    return Resources(gpus=gpus, cpu_milli=cpus * 1000, mem_mib=int(mem_mib))


_MODEL_MEMORY = re.compile(r"(\d+)\s*gi?b", re.IGNORECASE)


def model_memory_mib(model: str) -> int:
    """The memory a GPU model's name states ("A100-80GB", "h100-80gb": 80 GiB), or 0 when it states none. Used
    for virtual GPUs only; NVML reports the real amount."""
    match = _MODEL_MEMORY.search(model)
    return int(match.group(1)) * 1024 if match else 0


def _virtual_devices(count: int, model: str) -> tuple[Device, ...]:
    return tuple(Device(str(i), model, model_memory_mib(model)) for i in range(count))


def virtual(gpus: int, model: str = "") -> Inventory:
    """`gpus` virtual GPUs on one node named after this host (ids 0..gpus-1)."""
    if gpus < 0:
        raise ValueError(f"--gpus must be >= 0, got {gpus}")
    name = socket.gethostname() or "local"
    node = Node(name, _host_resources(gpus), gpu_model=model)
    return Inventory((node,), {name: _virtual_devices(gpus, model)}, "virtual")


def from_cluster_file(spec: str) -> Inventory:
    """The nodes of a cluster spec (shape or file, as `trimtab simulate --cluster` reads it) as virtual GPUs:
    every task still runs on this machine; the nodes only shape placement. A GPU's memory is what its model name
    states, if it does (`1x1:h100-80gb`)."""
    from trimtab.formats.cluster import load_cluster

    nodes = load_cluster(spec)
    devices = {n.name: _virtual_devices(n.capacity.gpus, n.gpu_model) for n in nodes}
    return Inventory(tuple(nodes), devices, f"cluster {spec}")


def nvml_devices() -> list[Device] | None:
    """This machine's GPUs from NVML, a GPU in MIG mode listed as its MIG instances; None without a driver."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: no usable GPU here
        return None
    try:
        devices: list[Device] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            model = _text(pynvml.nvmlDeviceGetName(handle))
            memory_mib = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // (1 << 20)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            migs = _mig_instances(pynvml, handle, model)
            devices.extend(migs or [Device(str(index), model, memory_mib, uuid)])
        return devices
    finally:
        pynvml.nvmlShutdown()


def _mig_instances(pynvml: Any, handle: Any, model: str) -> list[Device]:
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # not MIG-capable
        return []
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return []
    found: list[Device] = []
    for i in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
        except Exception:  # an empty slot
            continue
        uuid = _text(pynvml.nvmlDeviceGetUUID(mig))
        memory_mib = int(pynvml.nvmlDeviceGetMemoryInfo(mig).total) // (1 << 20)
        found.append(Device(uuid, f"{model} MIG", memory_mib, uuid))
    return found


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def discover(gpus: int | None = None, cluster: str | None = None) -> Inventory:
    """The inventory to serve: a cluster file if given, else `gpus` virtual GPUs if given, else NVML, else a
    node with no GPU (CPU-only jobs still run)."""
    if cluster is not None:
        return from_cluster_file(cluster)
    if gpus is not None:
        return virtual(gpus)
    found = nvml_devices()
    if not found:
        inv = virtual(0)
        return Inventory(inv.nodes, inv.devices, "no GPU driver found (use --gpus N for virtual GPUs)")
    models = sorted({d.model for d in found})
    model = models[0] if len(models) == 1 else ""
    name = socket.gethostname() or "local"
    node = Node(name, _host_resources(len(found)), gpu_model=model)
    return Inventory((node,), {name: tuple(found)}, "nvml")
