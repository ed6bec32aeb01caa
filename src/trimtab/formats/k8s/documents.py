"""The documents of a manifest set: YAML files or text split into documents, and the field helpers every kind uses.

Owns Doc (one document, with its error and warning helpers), the splitting of YAML into documents, and the value
parsers that turn a document's fields into numbers, mappings and lists, each error naming the document and field."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from trimtab.formats import FILE_YAML, FormatError, YamlLimits, yaml_documents
from trimtab.units import parse_duration_s, parse_quantity, shown

GPU = "nvidia.com/gpu"


@dataclass(slots=True)
class Doc:
    """One manifest document: where it is (`source`, e.g. "f.yaml document 3 (line 9) Pod x"), its data and
    identity. `error` builds the FormatError naming a field; `warn` records a warning; `check_keys` warns about
    (and records in `unknown`) the fields no reader uses, which a strict caller may refuse instead."""

    source: str
    data: dict[str, Any]
    kind: str
    api: str
    name: str
    namespace: str
    warnings: list[str]
    unknown: list[FormatError]

    def error(self, field_path: str, problem: str) -> FormatError:
        return FormatError(self.source, problem, field=field_path)

    def warn(self, field_path: str, problem: str) -> None:
        self.warnings.append(f"{self.source}, field {field_path}: {problem}")

    def ignore(self, field_path: str, problem: str) -> None:
        """Something no reader uses (an unknown field or kind, a resource not modelled): a warning, also kept for
        strict callers."""
        self.unknown.append(self.error(field_path, problem))
        self.warn(field_path, f"{problem}, ignored")

    def check_keys(self, mapping: Mapping[str, Any], path: str, known: Iterable[str]) -> None:
        known_set = set(known)
        for key in mapping:
            if key not in known_set:
                self.ignore(f"{path}.{key}" if path else key, "unknown field")


def documents_of_path(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(source, data) of every document of a file, or of every .yaml/.yml file under a folder (sorted)."""
    if not path.exists():
        raise FormatError(str(path), "no such file or folder")
    files = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
    if path.is_dir() and not files:
        raise FormatError(str(path), "no .yaml or .yml files in this folder")
    out: list[tuple[str, dict[str, Any]]] = []
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise FormatError(str(file), f"cannot read: {exc.strerror or exc}") from None
        out += documents_of_text(text, str(file))
    return out


def documents_of_text(text: str, source: str, limits: YamlLimits = FILE_YAML) -> list[tuple[str, dict[str, Any]]]:
    """(source, data) of every non-empty document of `text`; each source names `source`, the document's number
    and its first line. Raises YamlSyntaxError for text that is not YAML, FormatError for text over `limits` or a
    document that is not a mapping."""
    out: list[tuple[str, dict[str, Any]]] = []
    for index, line, data in yaml_documents(text, source, limits):
        if data is None:
            continue
        if not isinstance(data, dict):
            raise FormatError(source, f"document {index} is not a mapping", line=line)
        out.append((f"{source} document {index} (line {line})", data))
    return out


def int_field(doc: Doc, value: object, path: str, minimum: int) -> int:
    """A count (replicas, parallelism, ...): a YAML integer, as Kubernetes has it; "2" and true are refused."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise doc.error(path, f"expected an integer >= {minimum}, got {shown(value)}")
    return value


def str_map(doc: Doc, value: object, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise doc.error(path, "must be a mapping of strings")
    return {str(k): "" if v is None else str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


def mapping(doc: Doc, value: Any, path: str) -> dict[str, Any]:
    """A mapping field; absent (None) is an empty one."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise doc.error(path, "must be a mapping")
    return value


def list_field(doc: Doc, value: Any, path: str) -> list[Any]:
    """A list field; absent (None) is an empty one."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise doc.error(path, "must be a list")
    return value


def quantity(doc: Doc, value: object, path: str) -> Fraction:
    try:
        return parse_quantity(value)
    except ValueError as exc:
        raise doc.error(path, str(exc)) from None


def gpus(doc: Doc, value: object, path: str) -> int:
    q = quantity(doc, value, path)
    if q.denominator != 1:
        raise doc.error(path, f"{GPU} must be a whole number of GPUs, got {value!r}")
    return int(q)


def seconds(doc: Doc, value: object, path: str) -> float:
    """A finite duration (`2h`, `90s`, `3600`) in seconds."""
    try:
        duration_s = parse_duration_s(value)
    except ValueError as exc:
        raise doc.error(path, str(exc)) from None
    if duration_s == float("inf"):
        raise doc.error(path, f"duration {value!r} must be a finite time")
    return duration_s


def annotation_seconds(doc: Doc, annotations: Mapping[str, str], key: str) -> float | None:
    """The duration an annotation states (None when absent)."""
    return seconds(doc, annotations[key], f"metadata.annotations[{key}]") if key in annotations else None
