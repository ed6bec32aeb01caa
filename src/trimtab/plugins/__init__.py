"""Built-in policies, one small module per concern, and the default Registry that names them.

Each module lists its plugins in a `PLUGINS` mapping; `default_registry()` gathers them (no import-time state)."""

from __future__ import annotations

from trimtab.plugins import (
    affinity,
    backfill,
    elastic,
    filters,
    fragmentation,
    gang,
    health,
    locality,
    order,
    place,
    preempt,
    score,
    tenancy,
)
from trimtab.profile import Registry

MODULES = (order, filters, place, preempt, backfill, health, locality, tenancy, score, fragmentation, affinity,
           gang, elastic)


def default_registry() -> Registry:
    """A fresh Registry with every built-in plugin."""
    registry = Registry()
    for module in MODULES:
        for name, factory in module.PLUGINS.items():
            registry.register(name, factory)
    return registry


__all__ = ["MODULES", "default_registry"]
