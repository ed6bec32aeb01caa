"""One parallel map for the simulator's batches of runs (compare, tune, packing): forked processes on this
machine, or Ray tasks on a cluster. Results come back in input order; runs are deterministic, so either way
gives the results of a sequential loop."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

# The call in flight in forked workers: set before the fork so they inherit it (nothing is pickled but an index).
_INHERITED: list[tuple[Callable[..., Any], tuple[Any, ...], Sequence[Any]]] = []


def _call_inherited(index: int) -> Any:
    fn, shared, items = _INHERITED[0]
    return fn(*shared, items[index])


def parallel_map(fn: Callable[..., Result], items: Sequence[Item], shared: Sequence[Any] = (),
                 workers: int | None = None, ray_address: str | None = None) -> list[Result]:
    """[fn(*shared, item) for item in items], in parallel. Locally, up to `workers` (default: the local cores)
    forked processes inherit `fn`, `shared` and `items` (a large trace costs nothing to hand over); with one
    worker, or where fork is not available, the calls run here one after the other. With `ray_address`, each
    call is a Ray task (one CPU) on that cluster; each of `shared` is put in its object store once. `fn` must then
    be a module-level function."""
    if ray_address is not None:
        return _map_on_ray(ray_address, fn, items, shared)
    workers = min(workers or os.cpu_count() or 1, len(items))
    if workers <= 1 or "fork" not in mp.get_all_start_methods():
        return [fn(*shared, item) for item in items]
    _INHERITED[:] = [(fn, tuple(shared), items)]
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as pool:
            return list(pool.map(_call_inherited, range(len(items))))
    finally:
        _INHERITED.clear()


def _map_on_ray(address: str, fn: Callable[..., Result], items: Sequence[Item],
                shared: Sequence[Any]) -> list[Result]:
    """The calls as Ray tasks on the cluster at `address` (joined for the call, left after it unless this process
    was already connected)."""
    import ray

    joined = not ray.is_initialized()
    if joined:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=1, max_retries=2)(fn)
        refs = [ray.put(list(value) if isinstance(value, list | tuple) else value) for value in shared]
        return list(ray.get([remote.remote(*refs, item) for item in items]))
    finally:
        if joined:
            ray.shutdown()
