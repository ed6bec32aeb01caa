"""Kubernetes manifests as users write them for the default scheduler, Volcano and the coscheduling plugin.

Owns the one Kubernetes reader: Node, Pod, batch/v1 Job, Volcano Job, PodGroup, Volcano Queue, ResourceQuota,
PriorityClass and trimtab Reservation documents become nodes, jobs (with what the live service runs) and the
policy settings of a cluster. Used by `simulate --manifests`, `trimtab submit` and the API."""

from __future__ import annotations

from pathlib import Path

from trimtab.formats.k8s.documents import documents_of_path, documents_of_text
from trimtab.formats.k8s.job_backoff import BACKOFF_LIMIT
from trimtab.formats.k8s.policy_objects import PriorityClass, QueueSpec, Quota, ReservationSpec
from trimtab.formats.k8s.reader import Manifests, read_documents
from trimtab.formats.k8s.workloads import Container, Launch, PodRun


def load_manifests(path_or_text: str | Path, *, text: bool = False) -> Manifests:
    """Read every document of a file, of every .yaml/.yml file under a folder, or of `path_or_text` itself when
    `text` is True (see read_documents for what is refused). Raises FormatError naming the document and field."""
    if text:
        return read_documents(documents_of_text(str(path_or_text), "<manifests>"))
    return read_documents(documents_of_path(Path(path_or_text)))


__all__ = [
    "BACKOFF_LIMIT",
    "Container",
    "Launch",
    "Manifests",
    "PodRun",
    "PriorityClass",
    "QueueSpec",
    "Quota",
    "ReservationSpec",
    "documents_of_text",
    "load_manifests",
    "read_documents",
]
