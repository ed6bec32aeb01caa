"""Where a live job may run: its tolerations, affinity (node and inter-pod) and pod labels, in the shape a Kubernetes
pod spec writes them. That one shape is what a JSON job sends, what the store keeps and what the API shows; it is
read only by the Kubernetes reader's own functions (trimtab.formats.k8s.affinity), so the server and
`simulate --manifests` honour the same rules. A manifest's parsed constraints are written back into that shape
(`tolerations_json`, `affinity_json`) before they are stored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trimtab.formats import FormatError
from trimtab.formats.k8s.affinity import Affinity, NodeTerm, Toleration, read_affinity, read_tolerations
from trimtab.formats.k8s.documents import Doc
from trimtab.model import LabelSelector, PodAffinityTerm

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def read_placement(tolerations: list[dict[str, Any]], affinity: Mapping[str, Any] | None,
                   labels: Mapping[str, str]) -> tuple[tuple[Toleration, ...], Affinity]:
    """The scheduler's form of a job's tolerations and affinity (`labels`: the job's own pod labels, which
    matchLabelKeys refer to). Strict: a field the reader does not know is an error. Called when a submission is
    validated and when a stored job becomes the scheduler's Job. Raises FormatError naming the field
    (`tolerations[0].operator`, `affinity.nodeAffinity...`)."""
    doc = Doc("job", {}, "", "", "", "", [], [])
    parsed = read_tolerations(doc, tolerations, "tolerations")
    # The server knows no namespace labels: a namespaceSelector other than {} (every namespace) selects none.
    read = read_affinity(doc, affinity, "affinity", labels, {})
    if doc.unknown:
        raise doc.unknown[0]
    return parsed, read


def tolerations_json(tolerations: tuple[Toleration, ...]) -> list[dict[str, str]]:
    """Tolerations as a pod spec writes them (empty key, value and effect left out)."""
    return [{name: value for name, value in (("key", key), ("operator", op), ("value", value), ("effect", effect))
             if value} for key, op, value, effect in tolerations]


def affinity_json(affinity: Affinity) -> dict[str, Any] | None:
    """An affinity as a pod spec writes it (None: none). Raises FormatError for a pod affinity term whose
    namespaceSelector selected no namespace, which the Kubernetes shape cannot say without one."""
    out: dict[str, Any] = {}
    node: dict[str, Any] = {}
    if affinity.node_required:
        node[_REQUIRED] = {"nodeSelectorTerms": [_node_term_json(term) for term in affinity.node_required]}
    if affinity.node_preferred:
        node[_PREFERRED] = [{"weight": weight, "preference": _node_term_json(term)}
                            for weight, term in affinity.node_preferred]
    if node:
        out["nodeAffinity"] = node
    pods = affinity.pods
    if pods is not None:
        for kind, required, preferred in (("podAffinity", pods.required, pods.preferred),
                                          ("podAntiAffinity", pods.required_anti, pods.preferred_anti)):
            section: dict[str, Any] = {}
            if required:
                section[_REQUIRED] = [_pod_term_json(term, kind) for term in required]
            if preferred:
                section[_PREFERRED] = [{"weight": term.weight, "podAffinityTerm": _pod_term_json(term, kind)}
                                       for term in preferred]
            if section:
                out[kind] = section
    return out or None


def _node_term_json(term: NodeTerm) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part, fields in (("matchExpressions", False), ("matchFields", True)):
        exprs = [_expression_json(key.removeprefix("field:"), op, values) for key, op, values in term
                 if key.startswith("field:") == fields]
        if exprs:
            out[part] = exprs
    return out


def _expression_json(key: str, op: str, values: tuple[str, ...]) -> dict[str, Any]:
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


def _pod_term_json(term: PodAffinityTerm, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {"topologyKey": term.topology_key}
    if term.selector is not None:
        out["labelSelector"] = _selector_json(term.selector)
    if term.all_namespaces:
        out["namespaceSelector"] = {}
    elif term.namespaces is not None:
        if not term.namespaces:
            raise FormatError("job", "the namespaceSelector selects no namespace: the server knows no namespace "
                              "labels; list the namespaces (tenants), or use {} for all", field=f"affinity.{kind}")
        out["namespaces"] = list(term.namespaces)
    return out


def _selector_json(selector: LabelSelector) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if selector.match_labels:
        out["matchLabels"] = dict(selector.match_labels)
    if selector.match_expressions:
        out["matchExpressions"] = [_expression_json(*expr) for expr in selector.match_expressions]
    return out
