"""What the batch/v1 Job controller does with an evicted pod of a Job, read from the Job's spec as a
model.PodBackoff: its backoffLimit (or backoffLimitPerIndex) and the podFailurePolicy rule an eviction meets.
The rules and their sources: docs/kubernetes.md."""

from __future__ import annotations

from typing import Any

from trimtab.formats.k8s.documents import Doc, int_field, list_field
from trimtab.model import PodBackoff

BACKOFF_LIMIT = 6  # Kubernetes's default spec.backoffLimit of a batch/v1 Job (without backoffLimitPerIndex)
DISRUPTION = "DisruptionTarget"  # the pod condition an eviction (preemption) sets


def pod_backoff(doc: Doc, spec: dict[str, Any]) -> PodBackoff:
    """The Job controller's rule for this Job's evicted pods (see the module)."""
    record = f"{doc.namespace}/{doc.name}"
    per_index = spec.get("backoffLimitPerIndex") is not None
    if per_index:
        limit = int_field(doc, spec["backoffLimitPerIndex"], "spec.backoffLimitPerIndex", 0)
    else:
        limit = int_field(doc, spec.get("backoffLimit", BACKOFF_LIMIT), "spec.backoffLimit", 0)
    action = _eviction_action(doc, spec.get("podFailurePolicy"))
    if action == "Ignore":
        return PodBackoff(record, limit, per_index, counts=False)
    if action in ("FailJob", "FailIndex"):
        return PodBackoff(record, 0, per_index or action == "FailIndex")
    return PodBackoff(record, limit, per_index)


def _eviction_action(doc: Doc, policy: object) -> str:
    """The action of the first podFailurePolicy rule whose onPodConditions match an evicted pod (its
    DisruptionTarget condition True); "Count" when none does. Rules on exit codes are not matched: an evicted
    pod's exit code is not known ahead."""
    if policy is None:
        return "Count"
    if not isinstance(policy, dict):
        raise doc.error("spec.podFailurePolicy", "must be a mapping with rules")
    for i, rule in enumerate(list_field(doc, policy.get("rules"), "spec.podFailurePolicy.rules")):
        path = f"spec.podFailurePolicy.rules[{i}]"
        if not isinstance(rule, dict):
            raise doc.error(path, "a rule must be a mapping")
        action = rule.get("action")
        if action not in ("Ignore", "FailJob", "FailIndex", "Count"):
            raise doc.error(f"{path}.action", f"expected Ignore, FailJob, FailIndex or Count, got {action!r}")
        for j, cond in enumerate(list_field(doc, rule.get("onPodConditions"), f"{path}.onPodConditions")):
            if not isinstance(cond, dict):
                raise doc.error(f"{path}.onPodConditions[{j}]", "a condition must be a mapping")
            if cond.get("type") == DISRUPTION and str(cond.get("status", "True")) == "True":
                return str(action)
    return "Count"
