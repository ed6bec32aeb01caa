"""The Ray executor's view of a Ray cluster, without a cluster: which nodes become trimtab nodes, with how many GPUs
of which model, under which names."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ray")

from trimtab.serve.executors.ray import node_name, ray_inventory


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
