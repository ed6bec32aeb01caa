"""Profiles and the plugin registry: which plugins run at each extension point, with their arguments.

A profile comes from YAML or a built-in name and is checked when it loads."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trimtab.policy import Plugin

PluginFactory = Callable[..., Plugin]


class Registry:
    """Plugin factories by name. No global state: a Registry is built explicitly (see `plugins.default_registry`)."""

    def __init__(self, factories: Mapping[str, PluginFactory] | None = None) -> None:
        self._factories: dict[str, PluginFactory] = dict(factories or {})

    def register(self, name: str, factory: PluginFactory) -> None:
        if name in self._factories:
            raise ValueError(f"plugin {name!r} is already registered")
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def create(self, name: str, args: Mapping[str, Any]) -> Plugin:
        factory = self._factories.get(name)
        if factory is None:
            raise ValueError(f"unknown plugin {name!r}; known: {', '.join(self.names())}")
        try:
            plugin = factory(**args)
        except TypeError as exc:
            raise ValueError(f"plugin {name!r}: bad arguments {dict(args)}: {exc}") from exc
        plugin.name = name  # type: ignore[misc]
        return plugin


# ------------------------------------------------------------------------------------------------- profile


PluginRef = str | dict[str, dict[str, Any]]


def _split_ref(ref: PluginRef) -> tuple[str, dict[str, Any]]:
    if isinstance(ref, str):
        return ref, {}
    if len(ref) != 1:
        raise ValueError(f"a plugin entry is a name or {{name: {{args}}}}, got {ref!r}")
    ((name, args),) = ref.items()
    return name, dict(args or {})


class Profile(BaseModel):
    """The enabled plugins at each extension point, with arguments and score weights. Loaded from YAML or by
    built-in name (`Profile.load`). A plugin named at several points is one instance (it may share state).
    `args` gives arguments to plugins by name when they are listed by name only."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    admit: list[PluginRef] = Field(default_factory=list)
    order: list[PluginRef] = Field(default_factory=lambda: ["fifo"])
    filter: list[PluginRef] = Field(default_factory=lambda: ["gpu-model", "node-selector"])
    score: dict[str, float] = Field(default_factory=dict)
    place: PluginRef = "pack"
    preempt: list[PluginRef] = Field(default_factory=list)
    backfill: list[PluginRef] = Field(default_factory=list)
    args: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # task consolidation: single-task jobs of one tenant and shape, next to each other in the queue and submitted
    # within this window of the first, are placed as one unit (one placement), then run as separate jobs; 0: off
    consolidate_window_s: float = Field(default=0.0, ge=0.0)
    consolidate_max_jobs: int = Field(default=256, ge=2)

    @field_validator("score")
    @classmethod
    def _weights_positive(cls, value: dict[str, float]) -> dict[str, float]:
        for name, weight in value.items():
            if weight < 0:
                raise ValueError(f"score weight of {name!r} must be >= 0, got {weight}")
        return value

    def with_args(self, args: Mapping[str, Mapping[str, Any]]) -> Profile:
        """A copy whose plugin arguments are merged with `args` (by plugin name; `args` wins). Arguments for
        plugins the profile does not enable are kept but unused."""
        merged = {name: dict(values) for name, values in self.args.items()}
        for name, values in args.items():
            merged[name] = {**merged.get(name, {}), **values}
        return self.model_copy(update={"args": merged})

    @staticmethod
    def builtin_names() -> list[str]:
        folder = resources.files("trimtab") / "profiles"
        return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))

    @classmethod
    def load(cls, name_or_path: str | Path) -> Profile:
        """A built-in profile by name (`las`, `fifo`, ...) or a YAML file by path."""
        text: str
        source = str(name_or_path)
        path = Path(name_or_path)
        if path.suffix in (".yaml", ".yml") or path.exists():
            if not path.exists():
                raise ValueError(f"profile file {source} does not exist")
            text = path.read_text()
        else:
            builtin = resources.files("trimtab") / "profiles" / f"{source}.yaml"
            if not builtin.is_file():
                raise ValueError(f"unknown policy {source!r}; built in: {', '.join(cls.builtin_names())}")
            text = builtin.read_text()
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"profile {source}: not valid YAML: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"profile {source}: expected a mapping at the top level")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"profile {source}: {fields}") from exc
