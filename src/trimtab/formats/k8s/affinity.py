"""Where a pod may run: required and preferred node affinity, inter-pod affinity and anti-affinity, tolerations.

Owns the readers of a pod spec's `affinity` and `tolerations`, with Kubernetes's validation and null semantics."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from trimtab.formats.k8s.documents import Doc, list_field, mapping, str_map
from trimtab.model import LabelSelector, PodAffinity, PodAffinityTerm

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
NodeTerm = tuple[tuple[str, str, tuple[str, ...]], ...]
Toleration = tuple[str, str, str, str]  # (key, operator Equal|Exists, value, effect or "")


@dataclass(frozen=True, slots=True)
class Affinity:
    node_required: tuple[NodeTerm, ...] = ()
    node_preferred: tuple[tuple[int, NodeTerm], ...] = ()
    pods: PodAffinity | None = None


def read_affinity(doc: Doc, affinity: Any, path: str, labels: Mapping[str, str],
                  namespaces: Mapping[str, Mapping[str, str]]) -> Affinity:
    """A pod spec's `affinity`: required and preferred node affinity, and inter-pod affinity and anti-affinity
    (`labels` are the pod's own, for matchLabelKeys; `namespaces` the known namespaces and their labels, for
    namespaceSelector)."""
    if affinity is None:
        return Affinity()
    if not isinstance(affinity, dict):
        raise doc.error(path, "must be a mapping")
    doc.check_keys(affinity, path, ("nodeAffinity", "podAffinity", "podAntiAffinity"))
    na = mapping(doc, affinity.get("nodeAffinity"), f"{path}.nodeAffinity")
    doc.check_keys(na, f"{path}.nodeAffinity", (_REQUIRED, _PREFERRED))
    required = _required_node_affinity(doc, na.get(_REQUIRED), f"{path}.nodeAffinity.{_REQUIRED}")
    preferred = []
    for weight, preference, ppath in _weighted(doc, na, f"{path}.nodeAffinity", "preference"):
        if not isinstance(preference, dict):
            raise doc.error(ppath, "a preferred scheduling term needs a preference mapping")
        term = _node_selector_term(doc, preference, ppath)
        if term:  # an empty preference matches no node: it changes no score
            preferred.append((weight, term))
    pods: dict[str, list[PodAffinityTerm]] = {"required": [], "preferred": [], "required_anti": [],
                                              "preferred_anti": []}
    for kind, suffix in (("podAffinity", ""), ("podAntiAffinity", "_anti")):
        section = mapping(doc, affinity.get(kind), f"{path}.{kind}")
        doc.check_keys(section, f"{path}.{kind}", (_REQUIRED, _PREFERRED))
        for i, t in enumerate(list_field(doc, section.get(_REQUIRED), f"{path}.{kind}.{_REQUIRED}")):
            pods["required" + suffix].append(_pod_affinity_term(doc, t, f"{path}.{kind}.{_REQUIRED}[{i}]", 0,
                                                                labels, namespaces))
        for weight, term, tpath in _weighted(doc, section, f"{path}.{kind}", "podAffinityTerm"):
            pods["preferred" + suffix].append(_pod_affinity_term(doc, term, tpath, weight, labels, namespaces))
    pod_affinity = PodAffinity(**{k: tuple(v) for k, v in pods.items()}) if any(pods.values()) else None
    return Affinity(required, tuple(preferred), pod_affinity)


def _weighted(doc: Doc, section: Mapping[str, Any], path: str, inner: str) -> Iterator[tuple[int, Any, str]]:
    """(weight, the term under `inner`, the term's path) of each entry of a section's preferred list."""
    for i, entry in enumerate(list_field(doc, section.get(_PREFERRED), f"{path}.{_PREFERRED}")):
        epath = f"{path}.{_PREFERRED}[{i}]"
        if not isinstance(entry, dict):
            raise doc.error(epath, f"must be a mapping with weight and {inner}")
        doc.check_keys(entry, epath, ("weight", inner))
        weight = entry.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise doc.error(f"{epath}.weight", f"must be an integer in the range 1-100, got {weight!r}")
        yield weight, entry.get(inner), f"{epath}.{inner}"


def _required_node_affinity(doc: Doc, required: Any, path: str) -> tuple[NodeTerm, ...]:
    if not required:
        return ()
    rpath = f"{path}.nodeSelectorTerms"
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    if not isinstance(terms, list) or not terms:
        raise doc.error(rpath, "required node affinity needs at least one nodeSelectorTerm")
    out = []
    for i, term in enumerate(terms):
        if not isinstance(term, dict):
            raise doc.error(f"{rpath}[{i}]", "must be a mapping")
        exprs = _node_selector_term(doc, term, f"{rpath}[{i}]")
        if not exprs:
            continue  # an empty term matches no node (Kubernetes); kept out so it cannot widen the OR
        out.append(exprs)
    if not out:
        raise doc.error(rpath, "every nodeSelectorTerm is empty; no node could match")
    return tuple(out)


def _node_selector_term(doc: Doc, term: dict[str, Any], path: str) -> NodeTerm:
    """The ANDed expressions of one node selector term; `matchFields` keys are prefixed `field:`."""
    doc.check_keys(term, path, ("matchExpressions", "matchFields"))
    exprs: list[tuple[str, str, tuple[str, ...]]] = []
    for part, prefix in (("matchExpressions", ""), ("matchFields", "field:")):
        for j, e in enumerate(list_field(doc, term.get(part), f"{path}.{part}")):
            epath = f"{path}.{part}[{j}]"
            if not isinstance(e, dict) or "key" not in e or e.get("operator") not in _OPERATORS:
                raise doc.error(epath, f"needs key and an operator of {', '.join(_OPERATORS)}")
            values = tuple(str(v) for v in list_field(doc, e.get("values"), f"{epath}.values"))
            op = e["operator"]
            _check_values(doc, op, values, f"{epath}.values")
            if op in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
                raise doc.error(f"{epath}.values", f"operator {op} needs exactly one integer value")
            exprs.append((prefix + str(e["key"]), op, values))
    return tuple(exprs)


def _check_values(doc: Doc, op: str, values: tuple[str, ...], path: str) -> None:
    if op in ("In", "NotIn") and not values:
        raise doc.error(path, f"operator {op} needs at least one value")
    if op in ("Exists", "DoesNotExist") and values:
        raise doc.error(path, f"operator {op} takes no values")


def _label_selector(doc: Doc, value: Any, path: str) -> LabelSelector | None:
    """A label selector (None when absent: it then selects nothing, as Kubernetes reads a null selector)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise doc.error(path, "must be a mapping with matchLabels and/or matchExpressions")
    doc.check_keys(value, path, ("matchLabels", "matchExpressions"))
    labels = str_map(doc, value.get("matchLabels"), f"{path}.matchLabels")
    exprs = []
    for j, e in enumerate(list_field(doc, value.get("matchExpressions"), f"{path}.matchExpressions")):
        epath = f"{path}.matchExpressions[{j}]"
        if not isinstance(e, dict) or not e.get("key") or e.get("operator") not in _SELECTOR_OPERATORS:
            raise doc.error(epath, f"needs key and an operator of {', '.join(_SELECTOR_OPERATORS)}")
        doc.check_keys(e, epath, ("key", "operator", "values"))
        op = e["operator"]
        values = tuple(str(v) for v in list_field(doc, e.get("values"), f"{epath}.values"))
        _check_values(doc, op, values, f"{epath}.values")
        exprs.append((str(e["key"]), op, values))
    return LabelSelector(tuple(sorted(labels.items())), tuple(exprs))


def _pod_affinity_term(doc: Doc, term: Any, path: str, weight: int, labels: Mapping[str, str],
                       namespaces: Mapping[str, Mapping[str, str]]) -> PodAffinityTerm:
    """One PodAffinityTerm. matchLabelKeys / mismatchLabelKeys are merged into the selector with the pod's own
    label values (key In / NotIn (value)); a namespaceSelector is resolved against the known namespaces ({} means
    every namespace, also ones no document names)."""
    if not isinstance(term, dict):
        raise doc.error(path, "a pod affinity term must be a mapping")
    doc.check_keys(term, path, ("labelSelector", "namespaces", "namespaceSelector", "topologyKey",
                                "matchLabelKeys", "mismatchLabelKeys"))
    key = term.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise doc.error(f"{path}.topologyKey", "is required: the node label that defines the topology domain "
                        "(e.g. kubernetes.io/hostname, topology.kubernetes.io/zone)")
    selector = _with_label_keys(doc, term, path, _label_selector(doc, term.get("labelSelector"),
                                                                 f"{path}.labelSelector"), labels)
    listed = tuple(str(n) for n in list_field(doc, term.get("namespaces"), f"{path}.namespaces"))
    ns_selector = _label_selector(doc, term.get("namespaceSelector"), f"{path}.namespaceSelector")
    if ns_selector is None:
        return PodAffinityTerm(selector, key, listed or None, weight=weight)
    if ns_selector == LabelSelector():
        return PodAffinityTerm(selector, key, None, all_namespaces=True, weight=weight)
    chosen = set(listed) | {ns for ns, ns_labels in namespaces.items() if ns_selector.matches(ns_labels)}
    return PodAffinityTerm(selector, key, tuple(sorted(chosen)), weight=weight)


def _with_label_keys(doc: Doc, term: dict[str, Any], path: str, selector: LabelSelector | None,
                     labels: Mapping[str, str]) -> LabelSelector | None:
    """The selector with matchLabelKeys (key In (pod's value)) and mismatchLabelKeys (NotIn) merged in."""
    extra: list[tuple[str, str, tuple[str, ...]]] = []
    for field_name, op in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn")):
        keys = [str(k) for k in list_field(doc, term.get(field_name), f"{path}.{field_name}")]
        if keys and selector is None:
            raise doc.error(f"{path}.{field_name}", f"{field_name} cannot be set when labelSelector isn't set")
        taken = {k for k, _ in selector.match_labels} | {k for k, _, _ in selector.match_expressions} \
            if selector is not None else set()
        for k in keys:
            if k in taken:
                raise doc.error(f"{path}.{field_name}", f"key {k!r} is also in labelSelector; the same key may "
                                "not be in both")
            if k in labels:  # a key the pod does not carry is ignored, as Kubernetes does
                extra.append((k, op, (labels[k],)))
    if extra and selector is not None:
        return LabelSelector(selector.match_labels, selector.match_expressions + tuple(extra))
    return selector


def read_tolerations(doc: Doc, value: Any, path: str) -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(list_field(doc, value, path)):
        tpath = f"{path}[{i}]"
        if not isinstance(t, dict):
            raise doc.error(tpath, "must be a mapping")
        doc.check_keys(t, tpath, ("key", "operator", "value", "effect", "tolerationSeconds"))
        op = t.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            raise doc.error(f"{tpath}.operator", f"must be Equal or Exists, got {op!r}")
        key, val, effect = str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or "")
        if op == "Exists" and val:
            raise doc.error(f"{tpath}.value", "a toleration with operator Exists takes no value")
        if not key and op != "Exists":
            raise doc.error(f"{tpath}.key", "an empty key needs operator Exists")
        if effect not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise doc.error(f"{tpath}.effect", f"unknown effect {effect!r}")
        out.append((key, op, val, effect))
    return tuple(out)
