"""Profiles and the plugin registry: which plugins run at each extension point, with their arguments.

A profile comes from YAML or a built-in name and is checked when it loads; `profile_for_manifests` composes the
policy objects of Kubernetes manifests onto one, with a warning for each that it cannot honour. A profile names a
plugin by its registered name, as `package.module:Class`, or by the name an installed package gives it under the
entry-point group `trimtab.plugins`; the Registry resolves all three."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from importlib import resources
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trimtab.formats import yaml_document
from trimtab.policy import Plugin

if TYPE_CHECKING:
    from trimtab.formats.k8s import Manifests

PluginFactory = Callable[..., Plugin]


ENTRY_POINT_GROUP = "trimtab.plugins"
"""The entry-point group under which an installed package names its plugins (`name = package.module:Class`)."""

HOW_TO_NAME = ("a plugin of one's own is named package.module:Class (its module importable: installed, or its folder "
               f"on PYTHONPATH), or by the name its installed package gives it in the entry-point group "
               f"{ENTRY_POINT_GROUP}")


class Registry:
    """Plugin factories by name. No global state: a Registry is built explicitly (see `plugins.default_registry`).

    A name the registry does not hold is resolved when a profile first uses it (`factory`): `package.module:Class`
    imports that class, and any other name is looked up among the entry points of the group `trimtab.plugins` of
    the installed packages. So `simulate`, `compare`, `tune` and the servers, which all build their plugins from a
    profile through a Registry, accept plugins of one's own alike. Registered names win over entry points."""

    def __init__(self, factories: Mapping[str, PluginFactory] | None = None) -> None:
        self._factories: dict[str, PluginFactory] = dict(factories or {})
        self._resolved: dict[str, PluginFactory] = {}  # plugins of one's own, by the name a profile gave them

    def register(self, name: str, factory: PluginFactory) -> None:
        if name in self._factories:
            raise ValueError(f"plugin {name!r} is already registered")
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def factory(self, name: str) -> PluginFactory:
        """The factory of `name`: registered, else imported (`package.module:Class`), else an installed entry
        point; a resolved one is kept. A ValueError, which the loaders of profiles show as it is, when none is
        found, when the module cannot be imported, or when the name leads to something other than a Plugin class."""
        found = self._factories.get(name) or self._resolved.get(name)
        if found is None:
            found = _import_plugin(name) if ":" in name else _entry_point_plugin(name)
            if found is None:
                installed = sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
                raise ValueError(f"unknown plugin {name!r}; built in: {', '.join(self.names())}"
                                 + (f"; installed: {', '.join(installed)}" if installed else "")
                                 + f"; {HOW_TO_NAME}")
            if not (isinstance(found, type) and issubclass(found, Plugin)):
                raise ValueError(f"plugin {name!r} is {found!r}, not a subclass of trimtab.Plugin")
            self._resolved[name] = found
        return found

    def create(self, name: str, args: Mapping[str, Any]) -> Plugin:
        factory = self.factory(name)
        try:
            plugin = factory(**args)
        except TypeError as exc:
            raise ValueError(f"plugin {name!r}: bad arguments {dict(args)}: {exc}") from exc
        plugin.name = name  # type: ignore[misc]
        return plugin


def _import_plugin(ref: str) -> object:
    """What `package.module:Class` names, the module imported."""
    module_name, _, attribute = ref.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"plugin {ref!r}: name a plugin of one's own as package.module:Class")
    try:
        found: object = importlib.import_module(module_name)
    except Exception as exc:  # the user's module: whatever its import raises is reported with the plugin's name
        raise ValueError(f"plugin {ref!r}: cannot import {module_name}: {type(exc).__name__}: {exc} (is its "
                         "package installed, or its folder on PYTHONPATH?)") from exc
    for part in attribute.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise ValueError(f"plugin {ref!r}: module {module_name} has no {attribute}")
    return found


def _entry_point_plugin(name: str) -> object:
    """What the installed entry point `name` of the group `trimtab.plugins` names (None: there is none)."""
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
        try:
            return ep.load()
        except Exception as exc:  # an installed package's code: reported with the entry point that names it
            raise ValueError(f"plugin {name!r}: cannot load {ep.value} (entry point of the group "
                             f"{ENTRY_POINT_GROUP}): {type(exc).__name__}: {exc}") from exc
    return None


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
    # kube-scheduler's node filters, whatever the policy (each free for a job with nothing to check)
    filter: list[PluginRef] = Field(
        default_factory=lambda: ["gpu-model", "node-selector", "node-affinity", "taints", "pod-affinity"])
    score: dict[str, float] = Field(default_factory=dict)
    place: PluginRef = "pack"
    preempt: list[PluginRef] = Field(default_factory=list)
    backfill: list[PluginRef] = Field(default_factory=list)
    resize: list[PluginRef] = Field(default_factory=list)  # elastic jobs grown or shrunk (docs/elastic.md)
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

    def enabled(self, point: str) -> set[str]:
        """The names of the plugins enabled at `point` (admit, order, filter, score, place, preempt, backfill,
        resize)."""
        refs = getattr(self, point)
        return {_split_ref(ref)[0] for ref in ([refs] if point == "place" else refs)}

    def with_admission(self, name: str, args: Mapping[str, Any]) -> Profile:
        """A copy in which plugin `name` admits, with `args` merged into its arguments (`args` wins). A profile
        that admits with `name` already keeps it where it is; otherwise it admits first, so the policy's own
        admission runs unchanged after it. The one way a limit that holds whatever the policy joins a profile:
        the ResourceQuotas of manifests (`profile_for_manifests`) and the serve daemon's tenant GPU quotas."""
        composed = self.with_args({name: args})
        if name in self.enabled("admit"):
            return composed
        return composed.model_copy(update={"admit": [name, *self.admit]})

    def with_score(self, name: str, weight: float) -> Profile:
        """A copy that scores with plugin `name` at `weight`, unless the profile names that scorer already (at
        whatever weight, 0 included: its choice stands). How a preference of the manifests that every profile
        honours joins one (`profile_for_manifests`: PreferNoSchedule taints)."""
        if name in self.score:
            return self
        return self.model_copy(update={"score": {**self.score, name: weight}})

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
        data = yaml_document(text, f"profile {source}")  # a FormatError (a ValueError) names the file and line
        if not isinstance(data, dict):
            raise ValueError(f"profile {source}: expected a mapping at the top level")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"profile {source}: {fields}") from exc


# ------------------------------------------------------------------------------------------------- manifests


TAINT_TOLERATION_WEIGHT = 3.0  # kube-scheduler's default weight of its TaintToleration score


def profile_for_manifests(profile: Profile, manifests: Manifests) -> tuple[Profile, list[str]]:
    """`profile` with the policy objects of `manifests` composed onto it, and a warning for each object (or field
    of one) that the profile cannot honour, naming the document and the field. Called wherever manifests meet a
    profile (`simulate` and `compare` with `--manifests`); the caller runs the returned profile and shows the
    warnings.

    ResourceQuotas are admission under every profile, as the API server enforces them whatever scheduler runs:
    their hard limits go to the `quota` plugin, which admits first when the profile does not admit with it (then
    with hard limits only). So is the gang rule of a PodGroup or Volcano Job whose minimum is below its pods: the
    `min-member` plugin admits first, holding the pods beyond the minimum until their gang has started. Nodes'
    PreferNoSchedule taints are scored under every profile, as kube-scheduler's TaintToleration scorer does
    whatever the policy: the `taint-preference` scorer joins a profile that does not name it, at Kubernetes's
    weight (it is 0 on every node of a cluster without such taints, so it is added only where one has them:
    elsewhere it would change nothing and cost a score per placement). What a policy chooses stays with the
    profiles that choose it: Volcano Queues' weights, capability, borrowing and reclaim (`quota` admission and
    preemption, `drf` order), Reservations (`reservation`), priority classes (`priority` order, priority
    preemption); the built-in profiles all filter taints, node and pod affinity (kube-scheduler's filters), and a
    user profile without those filters or the affinity scorers gets a warning."""
    composed = profile.with_args(manifests.profile_args())
    if manifests.quotas and "quota" not in profile.enabled("admit"):
        composed = composed.with_admission("quota", {"queues": []})  # hard limits only: shares are a policy's
    if any(job.after is not None for job in manifests.jobs):
        composed = composed.with_admission("min-member", {})
    if any(taint.effect == "PreferNoSchedule" for node in manifests.nodes for taint in node.taints):
        composed = composed.with_score("taint-preference", TAINT_TOLERATION_WEIGHT)
    return composed, _policy_warnings(profile, manifests) + _workload_warnings(profile, manifests)


def _policy_warnings(profile: Profile, manifests: Manifests) -> list[str]:
    """What the profile cannot honour of the Queues, PriorityClasses, Reservations and Node taints (NoSchedule and
    NoExecute taints, a cordoned node's among them, need the `taints` filter; PreferNoSchedule ones are scored
    under every profile)."""
    admit, order, preempt = profile.enabled("admit"), profile.enabled("order"), profile.enabled("preempt")
    name = profile.name
    shares = "quota" in admit
    out: list[str] = []
    for q in manifests.queues:
        where = f"Queue {q.name}"
        if not shares and "drf" not in order:
            out.append(f"{where}, field spec.weight: ignored, {name} shares no GPUs by queue (no quota admission, "
                       "no drf order)")
        for value, field in ((q.capability_gpus, "capability"), (q.deserved_gpus, "deserved"),
                             (q.guarantee_gpus or None, "guarantee")):
            if value is not None and not shares:
                out.append(f"{where}, field spec.{field}: ignored, {name} does not admit by queue (no quota "
                           "admission)")
        if shares and q.reclaimable and "quota" not in preempt:
            out.append(f"{where}, field spec.reclaimable: ignored, {name} lends idle GPUs but never reclaims them "
                       "(no quota preemption)")
    by_priority = "priority" in order or bool(preempt & {"lower-priority", "guarded"})
    used = {job.priority_class for job in manifests.jobs}
    for pc in manifests.priority_classes.values():
        if pc.name not in used:
            continue
        if not by_priority:
            out.append(f"PriorityClass {pc.name}, field value: ignored, {name} neither orders nor preempts by "
                       "priority")
        if not preempt and pc.preemption_policy == "PreemptLowerPriority":
            out.append(f"PriorityClass {pc.name}, field preemptionPolicy (PreemptLowerPriority): ignored, {name} "
                       "never preempts")
    if "reservation" not in admit | profile.enabled("filter"):
        out += [f"Reservation {r.name}, field spec: ignored, {name} has no reservation plugin"
                for r in manifests.reservations]
    if "taints" not in profile.enabled("filter"):
        out += [f"Node {n.name}, field spec.taints: ignored, {name} has no taints filter"
                for n in manifests.nodes if any(taint.effect != "PreferNoSchedule" for taint in n.taints)]
    return out


def _workload_warnings(profile: Profile, manifests: Manifests) -> list[str]:
    """What the profile cannot honour of the workloads' placement constraints and preferences."""
    filters, scorers = profile.enabled("filter"), profile.enabled("score")
    out: list[str] = []
    for job in manifests.jobs:
        launch = manifests.launches[job.id]
        spec = launch.pods[0].path
        pa = job.pod_affinity
        unhonoured = (
            (bool(job.node_selector) and "node-selector" not in filters, "nodeSelector", "node-selector filter"),
            (bool(job.node_affinity) and "node-affinity" not in filters,
             "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution", "node-affinity filter"),
            (bool(job.node_preferences) and "node-affinity" not in scorers,
             "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution", "node-affinity scorer"),
            (pa is not None and bool(pa.required + pa.required_anti) and "pod-affinity" not in filters,
             "affinity (required pod affinity or anti-affinity)", "pod-affinity filter"),
            (pa is not None and bool(pa.preferred + pa.preferred_anti) and "pod-affinity" not in scorers,
             "affinity (preferred pod affinity or anti-affinity)", "pod-affinity scorer"),
        )
        out += [f"{launch.kind} {job.id}, field {spec}.{field}: ignored, {profile.name} has no {plugin}"
                for ignored, field, plugin in unhonoured if ignored]
    return out
