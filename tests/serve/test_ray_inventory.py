"""The Ray executor without a cluster: which nodes become trimtab nodes, with how many GPUs of which model, under
which names; how a gang becomes a placement group (against a stand-in for `ray.util`)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ray")

from trimtab.serve.executors.ray import _Gang, _within_cap, node_name, ray_inventory


def _node(node_id: str, alive: bool = True, **resources: float) -> dict[str, Any]:
    return {"NodeID": node_id, "Alive": alive, "NodeManagerAddress": "10.0.0.7",
            "Resources": {"CPU": 8.0, "memory": 64.0 * (1 << 30), **resources}}


def test_alive_gpu_nodes_become_nodes_with_their_gpus_and_model() -> None:
    nodes = [_node("aa" * 28), _node("bb" * 28, GPU=4.0, **{"accelerator_type:H100": 1.0}),
             _node("cc" * 28, GPU=2.0), _node("dd" * 28, alive=False, GPU=8.0)]
    inv = ray_inventory(nodes)
    assert [n.name for n in inv.nodes] == ["10.0.0.7-bbbbbbbb", "10.0.0.7-cccccccc"]
    assert [(n.capacity.gpus, n.gpu_model) for n in inv.nodes] == [(4, "H100"), (2, "")]
    assert [d.id for d in inv.devices["10.0.0.7-bbbbbbbb"]] == ["0", "1", "2", "3"]
    assert inv.nodes[0].capacity.cpu_milli == 8000 and inv.nodes[0].capacity.mem_mib == 64 * 1024
    assert inv.source == "ray"


def test_two_raylets_on_one_host_get_different_names_and_no_alive_node_is_an_error() -> None:
    assert node_name(_node("12345678" + "0" * 48)) != node_name(_node("87654321" + "0" * 48))
    assert [n.name for n in ray_inventory([_node("ee" * 28)]).nodes] == ["10.0.0.7-eeeeeeee"]  # CPU-only cluster
    with pytest.raises(ValueError, match="no alive node"):
        ray_inventory([_node("ff" * 28, alive=False, GPU=1.0)])


class _Group(dict):
    def ready(self) -> None:
        return None


class _Util:
    """Stands in for `ray.util`: the placement groups asked for, by name, and those removed."""

    def __init__(self) -> None:
        self.groups: list[dict[str, Any]] = []
        self.removed: list[str] = []

    def get_placement_group(self, name: str) -> Any:
        found = [g for g in self.groups if g["name"] == name and g["name"] not in self.removed]
        if not found:
            raise ValueError(name)
        return found[-1]

    def remove_placement_group(self, group: Any) -> None:
        self.removed.append(group["name"])

    def placement_group(self, bundles: list[dict[str, float]], **kw: Any) -> dict[str, Any]:
        self.groups.append(_Group({"bundles": bundles, **kw}))
        return self.groups[-1]

    def placement_group_table(self) -> dict[str, dict[str, Any]]:
        return {str(i): {"name": g["name"], "state": "REMOVED" if g["name"] in self.removed else "CREATED"}
                for i, g in enumerate(self.groups)}


def _executor(ips: dict[str, str]) -> Any:
    from types import SimpleNamespace

    from trimtab.serve.executors.ray import RayExecutor

    ex = RayExecutor.__new__(RayExecutor)  # no cluster: only the gang bookkeeping is exercised
    ex._ray = SimpleNamespace(util=_Util())
    ex._node_ips, ex._alive, ex._gangs = ips, set(ips), {}
    return ex


def _task(rank: int, node: str, gpus: int = 2, milli: int = 0) -> Any:
    from pathlib import Path

    from trimtab.serve.executors.base import TaskLaunch

    return TaskLaunch(f"7.1.{rank}", 7, 1, rank, node, tuple(str(g) for g in range(gpus)), ("true",), {}, None,
                      Path("/tmp/x"), Path("/tmp/y"), milli)


def test_a_gang_becomes_one_placement_group_with_each_bundle_pinned_to_its_node() -> None:
    ex = _executor({"a": "10.0.0.1", "b": "10.0.0.2", "head": "10.0.0.9"})
    ex.prepare_gang([_task(0, "a"), _task(1, "b"), _task(2, "b", gpus=1, milli=500)])
    [group] = ex._ray.util.groups
    assert group["bundles"] == [{"GPU": 2, "node:10.0.0.1": 0.001}, {"GPU": 2, "node:10.0.0.2": 0.001},
                                {"GPU": 0.5, "node:10.0.0.2": 0.001}]
    assert (group["name"], group["lifetime"]) == ("trimtab-gang-7.1", "detached")
    assert ex._gangs["trimtab-gang-7.1"].holding == {"7.1.0", "7.1.1", "7.1.2"}


def test_no_placement_group_where_an_address_names_two_nodes_and_a_dead_node_fails_the_gang() -> None:
    ex = _executor({"a": "10.0.0.1", "a2": "10.0.0.1", "b": "10.0.0.2"})  # two raylets on one machine
    ex.prepare_gang([_task(0, "a"), _task(1, "b")])
    assert ex._ray.util.groups == [] and ex._gangs == {}
    ex._alive.discard("b")
    with pytest.raises(OSError, match="not alive"):
        ex.prepare_gang([_task(0, "a"), _task(1, "b")])


def test_a_gangs_group_is_removed_once_all_its_actors_are_gone_and_leftovers_are_swept() -> None:
    ex = _executor({"a": "10.0.0.1", "b": "10.0.0.2"})
    util = ex._ray.util
    util.placement_group([{"GPU": 1}], name="trimtab-gang-3.1")  # left by a server that crashed before launching
    util.placement_group([{"GPU": 1}], name="trimtab-gang-4.2")  # held by an adopted task
    util.placement_group([{"GPU": 1}], name="someone-else")
    ex._gangs["trimtab-gang-4.2"] = _Gang(util.get_placement_group("trimtab-gang-4.2"), {"4.2.0"})
    ex._sweep_gangs()
    assert util.removed == ["trimtab-gang-3.1"]
    ex.prepare_gang([_task(0, "a"), _task(1, "b")])
    ex._release_gang("7.1.0")
    assert "trimtab-gang-7.1" not in util.removed, "rank 1 still holds its bundle"
    ex._release_gang("7.1.1")
    assert util.removed[-1] == "trimtab-gang-7.1" and "trimtab-gang-7.1" not in ex._gangs


def test_the_ray_executor_cuts_a_log_as_the_local_wrapper_does() -> None:
    """Output read back from an actor, appended chunk by chunk: the log keeps the first `cap` bytes and one line
    saying it was cut, whatever the chunks."""
    chunks, offset, log = [b"abc", b"defg", b"hij", b"k"], 0, b""
    for chunk in chunks:
        log += _within_cap(chunk, offset, 5)
        offset += len(chunk)
    assert log == b"abcde\ntrimtab: log cut at 5 bytes (max_task_log_bytes); the rest is dropped\n"
    assert _within_cap(b"abc", 10, None) == b"abc"
