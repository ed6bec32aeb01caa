"""Whether any node of the server's inventory could ever run a job: the scheduler's own node filters
(trimtab.plugins.filters, those the policy enables) over the nodes as they are when empty, then the gang's fit on
the nodes they allow. A submission that no node could ever hold is refused with what failed, instead of pending
forever. The nodes are the server's now: a Ray node that joins later counts from then on."""

from __future__ import annotations

import threading
from collections.abc import Iterable

import numpy as np

from trimtab.cluster import ClusterState
from trimtab.model import Job, Node
from trimtab.plugins.filters import PLUGINS as NODE_FILTERS
from trimtab.plugins.filters import NodeCache, tolerates
from trimtab.policy import CycleContext
from trimtab.serve.errors import ServeError

_SHOWN = 12  # labels or taints quoted in a refusal, at most
_FIELD = {"gpu-model": "gpu_models", "node-selector": "node_selector", "taints": "tolerations",
          "node-affinity": "affinity"}


class Feasibility:
    """`refusal(job, nodes)`: None when some nodes pass every node filter of the policy (`filter_names`, the
    node-only ones: affinity to running pods and reservations change with time and are left to the scheduler) and
    can hold all the gang's tasks at once when empty; else a 422 ServeError saying why. Called by the daemon's
    requests at submission, from several threads: the filters' caches are rebuilt when the nodes change (nodes
    joining a Ray cluster) under a lock."""

    def __init__(self, filter_names: Iterable[str]) -> None:
        enabled = set(filter_names)
        self._names = [name for name in NODE_FILTERS if name in enabled]
        self._lock = threading.Lock()
        self._nodes: tuple[Node, ...] | None = None
        self._ctx: CycleContext | None = None
        self._filters: list[tuple[str, NodeCache]] = []

    def refusal(self, job: Job, nodes: tuple[Node, ...]) -> ServeError | None:
        with self._lock:
            if nodes is not self._nodes:
                self._nodes = nodes
                self._ctx = CycleContext(0.0, ClusterState(list(nodes)), (), {}, {}, {}, np.random.default_rng(0))
                self._filters = [(name, NODE_FILTERS[name]()) for name in self._names]
            ctx = self._ctx
            assert ctx is not None
            allowed = np.ones(len(nodes), dtype=bool)
            for name, plugin in self._filters:
                mask = plugin.filter(job, ctx)
                if not mask.any():
                    return ServeError(422, _why(name, job, nodes), _FIELD.get(name, ""))
                allowed &= mask
            if not allowed.any():
                return ServeError(422, "no node meets all of the job's constraints (node selector, GPU models, "
                                  "tolerations, node affinity) together, though each is met by some node "
                                  f"({_listed([n.name for n in nodes])})", "")
            fit = int(ctx.cluster.fit_counts(job.task)[allowed].sum())
        if fit < job.tasks:
            names = _listed([node.name for node, ok in zip(nodes, allowed, strict=True) if ok])
            if job.tasks == 1:
                return ServeError(422, f"the job's task ({_task_text(job)}) fits on none of the nodes it may use "
                                  f"({names}), even empty", "tasks")
            return ServeError(422, f"the job's {job.tasks} tasks ({_task_text(job)} each) cannot all run at once: "
                              f"the nodes it may use ({names}) hold {fit} such tasks when empty", "tasks")
        return None


def _why(name: str, job: Job, nodes: tuple[Node, ...]) -> str:
    """What no node meets, for the filter that no node passes."""
    if name == "node-selector":
        missing = [f"{k}={v}" for k, v in job.node_selector.items() if not any(n.labels.get(k) == v for n in nodes)]
        present = sorted({f"{k}={v}" for n in nodes for k, v in n.labels.items()})
        what = f"label {missing[0]}" if len(missing) == 1 else f"labels {', '.join(missing)}" if missing \
            else f"all the labels {', '.join(f'{k}={v}' for k, v in job.node_selector.items())}"
        return f"no node has {what}; labels present: {_listed(present)}"
    if name == "gpu-model":
        models = sorted({n.gpu_model for n in nodes if n.gpu_model})
        return f"no node has a GPU model in {list(job.gpu_models)}; models present: {_listed(models)}"
    if name == "taints":
        shown = sorted({f"{n.name}: {t.key}={t.value}:{t.effect}" for n in nodes for t in n.taints
                        if t.effect != "PreferNoSchedule" and not tolerates(job.tolerations, t)})
        held = ", ".join(_toleration_text(t) for t in job.tolerations) or "none"
        return f"every node has a taint the job does not tolerate ({_listed(shown)}); the job's tolerations: {held}"
    if name == "node-affinity":
        terms = " or ".join(" and ".join(_expression_text(e) for e in term) for term in job.node_affinity)
        present = sorted({f"{k}={v}" for n in nodes for k, v in n.labels.items()})
        return f"no node matches the job's required node affinity ({terms}); labels present: {_listed(present)}"
    return f"no node passes the {name} filter"


def _toleration_text(toleration: tuple[str, str, str, str]) -> str:
    key, op, value, effect = toleration
    what = (key or "every key") + (f"={value}" if op == "Equal" else " (any value)")
    return f"{what}:{effect or 'every effect'}"


def _expression_text(expression: tuple[str, str, tuple[str, ...]]) -> str:
    key, op, values = expression
    return f"{key} {op} ({', '.join(values)})" if values else f"{key} {op}"


def _listed(items: list[str]) -> str:
    if not items:
        return "none"
    more = f", and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return ", ".join(items[:_SHOWN]) + more


def _task_text(job: Job) -> str:
    t = job.task
    parts = [f"{t.gpus} GPUs" if t.gpus else f"{t.gpu_milli} milli-GPU" if t.gpu_milli else "no GPU"]
    if t.cpu_milli:
        parts.append(f"{t.cpu_milli} milli-CPU")
    if t.mem_mib:
        parts.append(f"{t.mem_mib} MiB")
    return ", ".join(parts)
