"""Cluster readers: shape strings, Tiresias's real cluster specs (skipped when shared/traces is absent), YAML.

Stories check node counts, rack layout, labels and capacities; tables check that errors name file, line, field."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from builders import trace_path
from trimtab.formats import FormatError, load_cluster
from trimtab.formats.cluster import GPU_MODEL_LABEL, RACK_LABEL
from trimtab.model import Resources, Taint

_trace = trace_path  # the shared traces folder; skips the test when a trace is absent


# --- shapes -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "nodes", "gpus", "racks"),
    [
        ("1x8", 1, 8, {"rack-0": 1}),
        ("56x8", 56, 448, {"rack-0": 56}),
        ("4x8:v100", 4, 32, {"rack-0": 4}),
        ("7r8x8", 56, 448, {f"rack-{i}": 8 for i in range(7)}),
        ("4x8:v100+4x8:k80", 8, 64, {"rack-0": 4, "rack-1": 4}),
        ("2r2x4:a100 + 1x8", 5, 24, {"rack-0": 2, "rack-1": 2, "rack-2": 1}),
    ],
)
def test_shapes_give_nodes_in_racks(shape: str, nodes: int, gpus: int, racks: dict[str, int]) -> None:
    """A shape's node count, GPU total and nodes per rack; each rack-less term is a rack of its own."""
    cluster = load_cluster(shape)
    assert len(cluster) == nodes
    assert sum(node.capacity.gpus for node in cluster) == gpus
    assert Counter(node.rack for node in cluster) == racks
    assert all(node.labels[RACK_LABEL] == node.rack for node in cluster)


def test_heterogeneous_shape_names_nodes_in_order_and_labels_models() -> None:
    """4x8:v100+4x8:k80: node-0000..0003 are V100s in rack-0, node-0004..0007 K80s in rack-1."""
    cluster = load_cluster("4x8:v100+4x8:k80")
    assert [node.name for node in cluster] == [f"node-{i:04d}" for i in range(8)]
    assert [node.gpu_model for node in cluster] == ["v100"] * 4 + ["k80"] * 4
    assert cluster[5].labels == {RACK_LABEL: "rack-1", GPU_MODEL_LABEL: "k80"}


def test_shape_nodes_get_the_documented_cpu_and_memory_per_gpu() -> None:
    """Assumption (docs/formats.md): 8 cores and 64 GiB per GPU; an unknown model is '' and has no model label."""
    (node,) = load_cluster("1x8")
    assert node.capacity == Resources(gpus=8, cpu_milli=64_000, mem_mib=8 * 64 * 1024)
    assert node.gpu_model == ""
    assert GPU_MODEL_LABEL not in node.labels


def test_large_shapes_widen_node_names() -> None:
    cluster = load_cluster("20000x1")
    assert (cluster[0].name, cluster[-1].name) == ("node-00000", "node-19999")


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ("8", "cluster spec '8': not a shape or an existing file; accepted forms: NxG"),
        ("axb", "not a shape or an existing file; accepted forms"),
        ("4x8:", "not a shape or an existing file; accepted forms"),
        ("", "cluster spec '': not a shape or an existing file"),
        ("4x8++2x4", "term '' is not a shape; accepted forms"),
        ("4x8:v100+2y4", "term '2y4' is not a shape; accepted forms"),
        ("0x8", "term '0x8' has a count of 0; counts must be >= 1"),
        ("2r0x8", "term '2r0x8' has a count of 0"),
        ("missing.yaml", "missing.yaml: no such file"),
        ("some/dir/cluster", "some/dir/cluster: no such file"),
    ],
)
def test_bad_shapes_list_the_accepted_forms(shape: str, expected: str) -> None:
    """A shape that does not parse says which forms are accepted; a path-like spec says the file is missing."""
    with pytest.raises(FormatError) as caught:
        load_cluster(shape)
    assert expected in str(caught.value)


# --- Tiresias cluster specs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "nodes", "gpus", "racks", "capacity"),
    [
        ("cluster_spec.csv", 16, 64, 1, Resources(gpus=4, cpu_milli=128_000, mem_mib=254 * 1024)),
        ("n1g4.csv", 1, 4, 1, Resources(gpus=4, cpu_milli=40_000, mem_mib=256 * 1024)),
        ("n32g4.csv", 32, 128, 1, Resources(gpus=4, cpu_milli=40_000, mem_mib=256 * 1024)),
        ("n160g8.csv", 160, 1280, 5, Resources(gpus=8, cpu_milli=128_000, mem_mib=256 * 1024)),
        ("n256g8.csv", 256, 2048, 8, Resources(gpus=8, cpu_milli=64_000, mem_mib=256 * 1024)),
    ],
)
def test_tiresias_specs_give_one_rack_per_switch(
    name: str, nodes: int, gpus: int, racks: int, capacity: Resources
) -> None:
    """Tiresias specs: num_switch racks of num_node_p_switch nodes; cores -> millicores, GB -> GiB."""
    path = _trace(f"tiresias/simulator/{name}")
    cluster = load_cluster(path)
    assert len(cluster) == nodes
    assert sum(node.capacity.gpus for node in cluster) == gpus
    assert Counter(node.rack for node in cluster) == {f"rack-{i}": nodes // racks for i in range(racks)}
    assert {node.capacity for node in cluster} == {capacity}
    assert load_cluster(f"tiresias:{path}") == cluster


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n0,4,4,8,64\n",
         "spec.csv line 2, field num_switch: expected a positive integer, got '0'"),
        ("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,4,four,8,64\n",
         "spec.csv line 2, field num_gpu_p_node: expected a non-negative integer, got 'four'"),
        ("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node\n1,4,4,8\n",
         "spec.csv line 1: missing column(s) mem_p_node"),
        ("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n",
         "spec.csv line 2: no cluster row after the header"),
    ],
)  # fmt: skip
def test_bad_tiresias_specs_name_line_and_field(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "spec.csv"
    path.write_text(content)
    with pytest.raises(FormatError) as caught:
        load_cluster(path)
    assert str(caught.value).startswith(str(tmp_path / expected))


def test_a_csv_without_the_tiresias_header_asks_for_a_prefix(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\n")
    with pytest.raises(FormatError, match=r"nodes\.csv line 1: cannot tell the cluster format"):
        load_cluster(path)


# --- YAML ---------------------------------------------------------------------------------------------------

YAML_CLUSTER = """\
nodes:
  - count: 2
    gpus: 8
    gpu_model: a100
    cpu: 64
    memory: 512Gi
    rack: r1
    labels: {zone: a}
    taints: [{key: dedicated, value: team-a}]
  - name: special
    gpus: 4
  - name: cpu
    count: 2
    gpus: 0
    cpu: "500m"
    memory: 64G
"""


def test_yaml_node_groups_become_named_labelled_nodes(tmp_path: Path) -> None:
    """Groups expand by count; unnamed nodes are node-NNNN by position, a named group of several gets name-i;
    cpu/memory take Kubernetes quantities and default to the shape assumption."""
    path = tmp_path / "cluster.yaml"
    path.write_text(YAML_CLUSTER)
    cluster = load_cluster(path)
    assert [node.name for node in cluster] == ["node-0000", "node-0001", "special", "cpu-0", "cpu-1"]
    first = cluster[0]
    assert first.capacity == Resources(gpus=8, cpu_milli=64_000, mem_mib=512 * 1024)
    assert (first.gpu_model, first.rack) == ("a100", "r1")
    assert first.labels == {"zone": "a", RACK_LABEL: "r1", GPU_MODEL_LABEL: "a100"}
    assert first.taints == (Taint(key="dedicated", value="team-a", effect="NoSchedule"),)
    special = cluster[2]
    assert special.capacity == Resources(gpus=4, cpu_milli=32_000, mem_mib=4 * 64 * 1024)
    assert (special.rack, special.taints) == ("rack-0", ())
    assert cluster[3].capacity == Resources(gpus=0, cpu_milli=500, mem_mib=64 * 10**9 // 2**20)
    assert load_cluster(f"yaml:{path}") == cluster


def test_yaml_may_be_a_bare_list_of_groups(tmp_path: Path) -> None:
    path = tmp_path / "c.yml"
    path.write_text("- {count: 3, gpus: 4, gpu_model: v100}\n")
    cluster = load_cluster(path)
    assert [(node.name, node.capacity.gpus, node.gpu_model) for node in cluster] == [
        (f"node-000{i}", 4, "v100") for i in range(3)
    ]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("nodes:\n  - count: 2\n    gpus: eight\n", "line 3, field nodes[0].gpus: Input should be a valid integer"),
        ("nodes:\n  - gpus: 8\n    count: 0\n", "line 3, field nodes[0].count: Input should be greater than or equal"),
        ("- gpus: 8\n  memroy: 5Gi\n", "line 2, field nodes[0].memroy: unknown field (known: name, count, gpus"),
        ("nodes:\n  - gpus: 8\n    memory: 512\n", "line 3, field nodes[0].memory: expected memory with a unit"),
        ("nodes:\n  - gpus: 8\n    cpu: lots\n", "line 3, field nodes[0].cpu: expected CPU cores like 64"),
        ("nodes:\n  - gpus: 8\n    cpu: 0.0001\n", "line 3, field nodes[0].cpu: expected CPU cores"),
        ("nodes:\n  - gpus: 1\n  - gpus: 8\n    taints:\n      - {key: x, effect: Sometimes}\n",
         "line 5, field nodes[1].taints[0].effect: Input should be 'NoSchedule', 'PreferNoSchedule' or 'NoExecute'"),
        ("nodes:\n  - {gpus: 8}\n  - {gpus: 8, gpus_per_node: 2}\n", "line 3, field nodes[1].gpus_per_node: unknown"),
        ("nodes:\n  - {gpus: 8\n", "line 3: not valid YAML"),
        ("nodes: []\n", "line 1, field nodes: List should have at least 1 item"),
        ("hello\n", "line 1, field document: expected a mapping with a 'nodes' list, or a list of node groups"),
        ("nodes:\n  - {name: a, gpus: 1}\n  - {name: a, gpus: 2}\n",
         "line 3, field nodes[1].name: duplicate node name 'a' (also from nodes[0])"),
        ("nodes:\n  - gpus: 8\n    rack: r1\n    labels: {trimtab.io/rack: r2}\n",
         "line 4, field nodes[0].labels: label trimtab.io/rack='r2' contradicts the group's rack 'r1'"),
    ],
)  # fmt: skip
def test_bad_yaml_names_line_and_field(tmp_path: Path, content: str, expected: str) -> None:
    """A bad value in a cluster YAML is reported with the file, the line and the document path of the field."""
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(FormatError) as caught:
        load_cluster(path)
    message = str(caught.value)
    assert message.startswith(f"{path} line ")
    assert expected in message


def test_prefixes_force_the_format(tmp_path: Path) -> None:
    """'shape:' forces a shape; 'yaml:' reads a file whatever its suffix."""
    assert load_cluster("shape:2x4") == load_cluster("2x4")
    path = tmp_path / "cluster.txt"
    path.write_text("- {count: 2, gpus: 4}\n")
    assert load_cluster(f"yaml:{path}") == load_cluster("2x4")
