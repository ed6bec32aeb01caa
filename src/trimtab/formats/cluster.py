"""Cluster readers: shapes like "7r8x8+4x8:k80", Tiresias cluster-spec CSVs and trimtab's YAML node groups.

Owns the naming of nodes and racks, the rack and GPU-model labels, and the default CPU/memory of a shape's node."""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from trimtab.formats import FormatError, _CsvTable, _open_text, _parse_int, yaml_documents
from trimtab.model import Node, Resources, Taint
from trimtab.units import parse_quantity

RACK_LABEL = "trimtab.io/rack"
GPU_MODEL_LABEL = "trimtab.io/gpu-model"

# Assumption for shapes, which give GPUs only: 8 CPU cores and 64 GiB of memory per GPU, about the ratio of an
# AWS p3.16xlarge (8 V100, 64 vCPUs, 488 GiB). See docs/formats.md.
SHAPE_CPU_MILLI_PER_GPU = 8_000
SHAPE_MEM_MIB_PER_GPU = 64 * 1024

_SHAPE_TERM = re.compile(r"(?:(?P<racks>\d+)r)?(?P<nodes>\d+)x(?P<gpus>\d+)(?::(?P<model>[A-Za-z0-9][\w.-]*))?")
_SHAPE_FORMS = (
    "accepted forms: NxG (N nodes of G GPUs, e.g. 56x8), NxG:MODEL (e.g. 4x8:v100), RrNxG (R racks of N nodes, "
    "e.g. 7r8x8), terms joined by '+' (e.g. 4x8:v100+4x8:k80), or a file: tiresias:PATH, yaml:PATH, "
    "*.csv (Tiresias cluster spec), *.yaml"
)


def load_cluster(spec: str | Path) -> list[Node]:
    """Read a cluster description and return its nodes, named node-0000, node-0001, ... unless the input names them.

    `spec` is one of:
    - a shape: "56x8" (56 nodes of 8 GPUs), "4x8:v100" (with a GPU model), "7r8x8" (7 racks of 8 nodes of 8
      GPUs), terms joined by "+" ("4x8:v100+4x8:k80"). Each term without racks is one rack of its own; racks are
      numbered rack-0, rack-1, ... across terms. CPU and memory per node: SHAPE_*_PER_GPU x GPUs (an assumption).
    - "tiresias:PATH" or a CSV with Tiresias's header (num_switch,num_node_p_switch,num_gpu_p_node,
      num_cpu_p_node,mem_p_node): one rack per switch; CPUs are cores, memory is GB (read as GiB).
    - "yaml:PATH" or a *.yaml / *.yml file: node groups, see docs/formats.md.
    A "shape:" prefix forces a shape; without a prefix an existing file is read and anything else is a shape.

    Every node carries the label trimtab.io/rack, and trimtab.io/gpu-model when its model is known.
    Raises FormatError naming the file, line and field of a bad value, or listing the accepted forms of a shape."""
    text = str(spec)
    head, sep, rest = text.partition(":")
    if sep and head == "shape":
        return _parse_shape(rest)
    if sep and head == "tiresias":
        return _read_tiresias(Path(rest), rest)
    if sep and head == "yaml":
        return _read_yaml(Path(rest), rest)
    if sep and head == "openb":  # Alibaba openb node list: see formats/openb.py
        from trimtab.formats.openb import load_openb_nodes

        return load_openb_nodes(rest)
    path = Path(text)
    if path.is_file():
        if path.suffix in (".yaml", ".yml"):
            return _read_yaml(path, text)
        with _open_text(path, text) as stream:
            first = stream.readline()
        if "num_switch" in first:
            return _read_tiresias(path, text)
        raise FormatError(
            text,
            "cannot tell the cluster format: not a .yaml file and no Tiresias header "
            "(num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node); "
            "prefix the path with 'tiresias:' or 'yaml:'",
            line=1,
        )
    if "/" in text or "\\" in text or path.suffix in (".csv", ".yaml", ".yml"):
        raise FormatError(text, "no such file")
    return _parse_shape(text)


class _Namer:
    """Builds nodes in order: default names node-NNNN by position (NNNN as wide as the count needs, at least 4),
    rack and GPU-model labels on top of the caller's labels."""

    def __init__(self, total_nodes: int) -> None:
        self.width = max(4, len(str(max(total_nodes - 1, 0))))
        self.nodes: list[Node] = []

    def add(
        self,
        *,
        capacity: Resources,
        gpu_model: str,
        rack: str,
        name: str | None = None,
        labels: dict[str, str] | None = None,
        taints: tuple[Taint, ...] = (),
    ) -> None:
        merged = dict(labels or {})
        merged[RACK_LABEL] = rack
        if gpu_model:
            merged[GPU_MODEL_LABEL] = gpu_model
        self.nodes.append(
            Node(
                name=name or f"node-{len(self.nodes):0{self.width}d}",
                capacity=capacity,
                gpu_model=gpu_model,
                rack=rack,
                labels=MappingProxyType(merged),
                taints=taints,
            )
        )


# --- shapes -------------------------------------------------------------------------------------------------


def _parse_shape(shape: str) -> list[Node]:
    """Nodes of a shape string (see load_cluster); a term that does not parse is a FormatError listing the forms."""
    terms: list[tuple[int, int, int, str]] = []  # (racks, nodes per rack, GPUs per node, model)
    for term in shape.split("+"):
        match = _SHAPE_TERM.fullmatch(term.strip())
        if not match:
            what = f"term {term.strip()!r} is not a shape" if "+" in shape else "not a shape or an existing file"
            raise FormatError(f"cluster spec {shape!r}", f"{what}; {_SHAPE_FORMS}")
        racks, nodes, gpus = int(match["racks"] or 1), int(match["nodes"]), int(match["gpus"])
        if min(racks, nodes, gpus) < 1:
            raise FormatError(f"cluster spec {shape!r}", f"term {term.strip()!r} has a count of 0; counts must be >= 1")
        terms.append((racks, nodes, gpus, match["model"] or ""))
    namer = _Namer(sum(racks * nodes for racks, nodes, _, _ in terms))
    rack_index = 0
    for racks, nodes, gpus, model in terms:
        capacity = Resources(gpus=gpus, cpu_milli=gpus * SHAPE_CPU_MILLI_PER_GPU, mem_mib=gpus * SHAPE_MEM_MIB_PER_GPU)
        for _ in range(racks):
            for _ in range(nodes):
                namer.add(capacity=capacity, gpu_model=model, rack=f"rack-{rack_index}")
            rack_index += 1
    return namer.nodes


# --- Tiresias cluster spec ----------------------------------------------------------------------------------

_TIRESIAS_COLUMNS = ("num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node", "mem_p_node")
_TIRESIAS_COUNTS = ("num_switch", "num_node_p_switch")  # must be >= 1; the per-node quantities may be 0


def _read_tiresias(path: Path, source: str) -> list[Node]:
    """Tiresias's cluster_spec.csv / nXgY.csv: per row, num_switch racks of num_node_p_switch nodes, each with
    num_gpu_p_node GPUs, num_cpu_p_node CPU cores and mem_p_node GB (Tiresias README: "128 CPU cores, 256 GB
    memory"), read as GiB. Several rows add racks in order. GPU model unknown ("")."""
    groups: list[tuple[int, int, Resources]] = []
    with _open_text(path, source) as stream:
        table = _CsvTable(stream, source, _TIRESIAS_COLUMNS)
        col = table.col
        for line, row in table:
            switches, per_switch, gpus, cores, mem_gb = (
                _parse_int(row[col[name]].strip(), source, line, name, 1 if name in _TIRESIAS_COUNTS else 0)
                for name in _TIRESIAS_COLUMNS
            )
            capacity = Resources(gpus=gpus, cpu_milli=cores * 1000, mem_mib=mem_gb * 1024)
            groups.append((switches, per_switch, capacity))
    if not groups:
        raise FormatError(source, "no cluster row after the header", line=2)
    namer = _Namer(sum(switches * per_switch for switches, per_switch, _ in groups))
    rack_index = 0
    for switches, per_switch, capacity in groups:
        for _ in range(switches):
            for _ in range(per_switch):
                namer.add(capacity=capacity, gpu_model="", rack=f"rack-{rack_index}")
            rack_index += 1
    return namer.nodes


# --- YAML node groups ---------------------------------------------------------------------------------------

def _cpu_milli(value: object) -> int:
    """CPU cores as in Kubernetes: 64, 0.5, "64", "500m" -> millicores (a whole number of them)."""
    try:
        milli = parse_quantity(value) * 1000
    except ValueError:
        milli = Fraction(-1)
    if milli < 0 or milli.denominator != 1:
        raise ValueError(f"expected CPU cores like 64, 0.5 or '500m', got {value!r}")
    return int(milli)


def _mem_mib(value: object) -> int:
    """Memory as a Kubernetes quantity with a unit: "512Gi", "64G", "1024Mi" -> MiB, rounded down.

    A bare number is refused: Kubernetes reads it as bytes, which is rarely what a cluster file means."""
    text = value.strip() if isinstance(value, str) else ""
    try:
        size_bytes = parse_quantity(text) if text[-1:].isalpha() else None
    except ValueError:
        size_bytes = None
    if size_bytes is None:
        raise ValueError(f"expected memory with a unit like '512Gi', '64G' or '1024Mi', got {value!r}")
    return int(size_bytes // 2**20)


_CpuMilli = Annotated[int, BeforeValidator(_cpu_milli)]
_MemMib = Annotated[int, BeforeValidator(_mem_mib)]


class _TaintDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class _NodeGroupDoc(BaseModel):
    """One group of identical nodes. `cpu` and `memory` hold millicores and MiB once validated."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, min_length=1)
    count: int = Field(default=1, ge=1, strict=True)
    gpus: int = Field(ge=0, strict=True)
    gpu_model: str = ""
    cpu: _CpuMilli | None = None
    memory: _MemMib | None = None
    rack: str = Field(default="rack-0", min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[_TaintDoc] = Field(default_factory=list)


class _ClusterDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    nodes: list[_NodeGroupDoc] = Field(min_length=1)


def _read_yaml(path: Path, source: str) -> list[Node]:
    """trimtab's cluster YAML: `nodes:` (or a bare list) of node groups, validated strictly (unknown keys are
    errors). A group named N with count > 1 gives N-0, N-1, ...; cpu/memory default to the shape assumption."""
    with _open_text(path, source) as stream:
        text = stream.read()
    documents = yaml_documents(text, source)
    if len(documents) > 1:
        raise FormatError(source, f"expected one YAML document, got {len(documents)}", line=documents[1][1])
    document = documents[0][2] if documents else None
    bare_list = isinstance(document, list)
    try:
        cluster = _ClusterDoc.model_validate({"nodes": document} if bare_list else document)
    except ValidationError as exc:
        raise _validation_error(exc, text, source, bare_list) from None

    namer = _Namer(sum(group.count for group in cluster.nodes))
    seen: dict[str, int] = {}
    for index, group in enumerate(cluster.nodes):
        for label, derived in ((RACK_LABEL, group.rack), (GPU_MODEL_LABEL, group.gpu_model)):
            given = group.labels.get(label)
            if given is not None and given != derived:
                raise FormatError(
                    source,
                    f"label {label}={given!r} contradicts the group's {label.split('/')[1]} {derived!r}; "
                    "set the field, not the label",
                    line=_yaml_line(text, ("nodes", index, "labels", label), bare_list),
                    field=f"nodes[{index}].labels",
                )
        capacity = Resources(
            gpus=group.gpus,
            cpu_milli=group.cpu if group.cpu is not None else group.gpus * SHAPE_CPU_MILLI_PER_GPU,
            mem_mib=group.memory if group.memory is not None else group.gpus * SHAPE_MEM_MIB_PER_GPU,
        )
        taints = tuple(Taint(key=t.key, value=t.value, effect=t.effect) for t in group.taints)
        for member in range(group.count):
            name = None
            if group.name is not None:
                name = group.name if group.count == 1 else f"{group.name}-{member}"
            namer.add(
                capacity=capacity,
                gpu_model=group.gpu_model,
                rack=group.rack,
                name=name,
                labels=group.labels,
                taints=taints,
            )
            node_name = namer.nodes[-1].name
            if node_name in seen:
                raise FormatError(
                    source,
                    f"duplicate node name {node_name!r} (also from nodes[{seen[node_name]}])",
                    line=_yaml_line(text, ("nodes", index, "name"), bare_list),
                    field=f"nodes[{index}].name",
                )
            seen[node_name] = index
    return namer.nodes


def _validation_error(exc: ValidationError, text: str, source: str, bare_list: bool) -> FormatError:
    """The first pydantic error as a FormatError with the YAML line and a field path like nodes[0].gpus."""
    errors = exc.errors()
    first = errors[0]
    loc: tuple[Any, ...] = tuple(first["loc"])
    field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".") or "document"
    message = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = f"unknown field (known: {_known_fields(loc)})"
    elif first["type"] == "model_type" and not loc:
        message = "expected a mapping with a 'nodes' list, or a list of node groups"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return FormatError(source, message, line=_yaml_line(text, loc, bare_list), field=field)


def _known_fields(loc: Sequence[Any]) -> str:
    if len(loc) >= 4 and loc[2] == "taints":
        model: type[BaseModel] = _TaintDoc
    elif len(loc) >= 2 and loc[0] == "nodes":
        model = _NodeGroupDoc
    else:
        model = _ClusterDoc
    return ", ".join(model.model_fields)


def _yaml_line(text: str, loc: Sequence[Any], bare_list: bool) -> int | None:
    """The 1-based line of the YAML node at `loc` (or of its nearest existing ancestor); None if unparsable."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    if node is None:
        return None
    path = list(loc[1:]) if bare_list and loc and loc[0] == "nodes" else list(loc)
    for part in path:
        child = None
        if isinstance(node, yaml.MappingNode):
            child = next((value for key, value in node.value if key.value == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            child = node.value[part]
        if child is None:
            break
        node = child
    return node.start_mark.line + 1
