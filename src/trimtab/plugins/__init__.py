"""Built-in policies, one small module per kind, and the default Registry that names them.

A profile refers to plugins by these names; `default_registry()` builds a fresh Registry (no import-time state)."""

from __future__ import annotations

from trimtab.framework import Registry
from trimtab.plugins.backfill import Strict
from trimtab.plugins.filters import GpuModel, NodeSelector
from trimtab.plugins.order import Fifo, Las, Priority, Sjf, Srtf
from trimtab.plugins.place import Pack
from trimtab.plugins.preempt import LowerOrder, LowerPriority


def default_registry() -> Registry:
    """A Registry with every built-in plugin."""
    return Registry({
        "fifo": Fifo,
        "sjf": Sjf,
        "srtf": Srtf,
        "las": Las,
        "priority": Priority,
        "gpu-model": GpuModel,
        "node-selector": NodeSelector,
        "pack": Pack,
        "lower-order": LowerOrder,
        "lower-priority": LowerPriority,
        "strict": Strict,
    })


__all__ = ["default_registry"]
