"""Readers of Alibaba's openb GPU-sharing trace (cluster-trace-gpu-v2023, the FGD paper): node lists and pod lists.

Owns the mapping of openb's columns onto Node and Job: whole GPUs vs GPU shares, gpu_spec, QoS, times."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from trimtab.formats import FormatError, _CsvTable, _open_text, _parse_int, _parse_seconds
from trimtab.model import Job, Node, Resources

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL = ("gpu_spec", "qos", "creation_time", "deletion_time")
QOS_CLASSES = ("LS", "BE", "Burstable", "Guaranteed")

_RACK_LABEL = "trimtab.io/rack"
_GPU_MODEL_LABEL = "trimtab.io/gpu-model"


def _unique_name(name: str, seen: dict[str, int], source: str, line: int, field: str, what: str) -> str:
    """`name` when it is not empty and not in `seen` (then recorded there with its line); else a FormatError."""
    if not name:
        raise FormatError(source, f"expected a {what} name, got ''", line=line, field=field)
    if name in seen:
        raise FormatError(source, f"duplicate {what} {name!r} (first on line {seen[name]})", line=line, field=field)
    seen[name] = line
    return name


def load_openb_nodes(path: str | Path) -> list[Node]:
    """Nodes of an openb node list (`sn,cpu_milli,memory_mib,gpu,model`), named by `sn`, in file order, all in one
    rack. A node with `gpu = G` has G whole GPUs of `model`; CPU-only nodes (gpu 0, empty model) are kept.

    Raises FormatError naming the file, line and field of a bad value (negative numbers, a duplicate sn, a GPU count
    without a model)."""
    source = str(path)
    nodes: list[Node] = []
    seen: dict[str, int] = {}
    with _open_text(Path(path), source) as stream:
        table = _CsvTable(stream, source, NODE_COLUMNS)
        c = table.col
        for line, row in table:
            name = _unique_name(row[c["sn"]].strip(), seen, source, line, "sn", "node")
            gpus = _parse_int(row[c["gpu"]], source, line, "gpu", 0)
            model = row[c["model"]].strip()
            if gpus and not model:
                raise FormatError(source, f"a node with {gpus} GPUs needs a GPU model", line=line, field="model")
            capacity = Resources(gpus, _parse_int(row[c["cpu_milli"]], source, line, "cpu_milli", 0),
                                 _parse_int(row[c["memory_mib"]], source, line, "memory_mib", 0))
            labels = {_RACK_LABEL: "rack-0", **({_GPU_MODEL_LABEL: model} if model else {})}
            nodes.append(Node(name, capacity, gpu_model=model if gpus else "", labels=MappingProxyType(labels)))
    if not nodes:
        raise FormatError(source, "no nodes")
    return nodes


def load_openb_pods(path: str | Path) -> list[Job]:
    """Jobs of an openb pod list, one single-task job per pod, in file order (not sorted by time).

    `num_gpu` N with `gpu_milli` 1000 asks for N whole GPUs; `num_gpu` 1 with `gpu_milli` < 1000 asks for that share
    of one GPU; `num_gpu` 0 asks for CPU and memory only. `gpu_spec` ("V100M16|V100M32", empty: any) becomes
    `gpu_models`, `qos` becomes `task.qos`. submit_s = creation_time (0 when absent); duration_s = deletion_time -
    creation_time when both are given and ordered, else None (the packing experiment needs neither).

    Raises FormatError naming the file, line and field: a share on several GPUs, a GPU count without milli, bad
    numbers, duplicate names."""
    source = str(path)
    jobs: list[Job] = []
    seen: dict[str, int] = {}
    with _open_text(Path(path), source) as stream:
        table = _CsvTable(stream, source, POD_COLUMNS, POD_OPTIONAL)
        c = table.col

        def cell(row: list[str], name: str) -> str:
            return row[c[name]].strip() if c[name] >= 0 else ""

        for line, row in table:
            name = _unique_name(cell(row, "name"), seen, source, line, "name", "pod")
            num_gpu = _parse_int(cell(row, "num_gpu"), source, line, "num_gpu", 0)
            milli = _parse_int(cell(row, "gpu_milli") or "0", source, line, "gpu_milli", 0)
            gpus, share = 0, 0
            if num_gpu:
                if milli <= 0:
                    raise FormatError(source, f"num_gpu {num_gpu} needs gpu_milli > 0", line=line, field="gpu_milli")
                if milli >= 1000:
                    gpus = num_gpu
                elif num_gpu > 1:
                    raise FormatError(source, f"a share ({milli} milli) is on one GPU, not {num_gpu}", line=line,
                                    field="gpu_milli")
                else:
                    share = milli
            task = Resources(gpus, _parse_int(cell(row, "cpu_milli"), source, line, "cpu_milli", 0),
                             _parse_int(cell(row, "memory_mib"), source, line, "memory_mib", 0),
                             gpu_milli=share, qos=cell(row, "qos"))
            created = cell(row, "creation_time")
            deleted = cell(row, "deletion_time")
            submit_s = _parse_seconds(created, source, line, "creation_time") if created else 0.0
            end_s = _parse_seconds(deleted, source, line, "deletion_time") if deleted else None
            duration = end_s - submit_s if end_s is not None and end_s >= submit_s else None
            models = tuple(m for m in cell(row, "gpu_spec").split("|") if m.strip())
            jobs.append(Job(id=name, submit_s=submit_s, tasks=1, task=task, duration_s=duration,
                            gpu_models=tuple(m.strip() for m in models)))
    return jobs
