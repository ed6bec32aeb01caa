"""DRA as the structured allocator has it: CEL selectors, counts, `All`, firstAvailable, matchAttribute, devices
already allocated, shared counters (partitionable GPUs), pool generations; and the model a manifest set gives."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dra_docs import (
    DRIVER,
    claim,
    claim_spec,
    device_class,
    gpu,
    node,
    pod,
    request,
    resource_slice,
    template,
)
from trimtab.formats import FormatError
from trimtab.formats.k8s import read_documents
from trimtab.formats.k8s.cel import activation, compile_selector
from trimtab.formats.k8s.dra import Inventory
from trimtab.formats.k8s.dra_alloc import allocate


def read(*docs):
    return read_documents([(f"doc {i}", d) for i, d in enumerate(docs)])


def four_gpus(node_name: str = "node-a"):
    return resource_slice(node_name, [gpu("gpu-0", nvlink=0, memory="80Gi"), gpu("gpu-1", nvlink=0, memory="80Gi"),
                                      gpu("gpu-2", nvlink=1, memory="40Gi"), gpu("gpu-3", nvlink=1, memory="40Gi")])


def spec_of(inv: Inventory, name: str = "t"):
    return inv.templates[("default", name)]


def names(result) -> list[list[str]]:
    assert not isinstance(result, str), result
    return [[d.name for _, d in a.results] for a in result]


@pytest.mark.parametrize(("expression", "expected"), [
    ('device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) > 0', True),
    ('device.capacity["gpu.example.com"].memory.isLessThan(quantity("40Gi"))', False),
    ('device.attributes["gpu.example.com"].model == "a100"', True),
    ('device.attributes["gpu.example.com"].version.isGreaterThan(semver("1.2.0"))', True),
    ('"model" in device.attributes["other.example.com"]', False),
    ('device.driver.startsWith("gpu.")', True),
])
def test_cel_selectors_see_the_device_as_kubernetes_declares_it(expression, expected):
    from trimtab.formats.k8s.cel import semver
    selector = compile_selector(expression)
    assert not isinstance(selector, str)
    device = activation(DRIVER, {"model": "a100", "version": semver("1.10.0")}, {"memory": Fraction(80 * 2**30)})
    assert selector.matches(device) == (expected, "")


def test_a_cel_runtime_error_is_no_match_with_its_message_and_bad_syntax_is_refused():
    selector = compile_selector('device.attributes["gpu.example.com"].missing == 1')
    matched, why = selector.matches(activation(DRIVER, {}, {}))
    assert not matched and "CEL runtime error" in why
    with pytest.raises(FormatError, match=r"spec.selectors\[0\].cel.expression.*does not compile"):
        read(device_class(expression="device.driver =="))


def test_count_selectors_and_match_attribute_choose_devices_sharing_the_attribute():
    inv = read(device_class(), four_gpus(), template("t", claim_spec(request(count=2), match=f"{DRIVER}/nvlink"))
               ).inventory
    spec = spec_of(inv)
    assert names(allocate(inv, [spec], "node-a", set())) == [["gpu-0", "gpu-1"]]
    # gpu-0 taken: the only pair on one NVLink domain is gpu-2 and gpu-3
    assert names(allocate(inv, [spec], "node-a", {(DRIVER, "node-a", "gpu-0")})) == [["gpu-2", "gpu-3"]]
    assert names(allocate(inv, [spec, spec], "node-a", set())) == [["gpu-0", "gpu-1"], ["gpu-2", "gpu-3"]]
    assert isinstance(allocate(inv, [spec, spec, spec], "node-a", set()), str)
    assert isinstance(allocate(inv, [spec], "node-b", set()), str)  # no devices there


def test_selectors_of_the_request_and_all_mode():
    big = 'device.capacity["gpu.example.com"].memory.compareTo(quantity("80Gi")) >= 0'
    inv = read(device_class(), four_gpus(), template("big", claim_spec(request(count=2, selectors=(big,)))),
               template("all", claim_spec(request(all_devices=True)))).inventory
    assert names(allocate(inv, [spec_of(inv, "big")], "node-a", set())) == [["gpu-0", "gpu-1"]]
    assert isinstance(allocate(inv, [spec_of(inv, "big")], "node-a", {(DRIVER, "node-a", "gpu-1")}), str)
    assert names(allocate(inv, [spec_of(inv, "all")], "node-a", set())) == [["gpu-0", "gpu-1", "gpu-2", "gpu-3"]]
    # All: every matching device, so one of them in use fails it
    assert isinstance(allocate(inv, [spec_of(inv, "all")], "node-a", {(DRIVER, "node-a", "gpu-3")}), str)


def test_first_available_takes_the_first_alternative_that_fits_and_names_it():
    first = {"name": "gpus", "firstAvailable": [
        {"name": "four", "deviceClassName": DRIVER, "count": 4},
        {"name": "two", "deviceClassName": DRIVER, "count": 2}]}
    inv = read(device_class(), four_gpus(), template("t", {"devices": {"requests": [first]}})).inventory
    result = allocate(inv, [spec_of(inv)], "node-a", set())
    assert [r for r, _ in result[0].results] == ["gpus/four"] * 4
    result = allocate(inv, [spec_of(inv)], "node-a", {(DRIVER, "node-a", "gpu-0")})
    assert [(r, d.name) for r, d in result[0].results] == [("gpus/two", "gpu-1"), ("gpus/two", "gpu-2")]


def test_partitions_share_their_gpus_counters():
    """Partitionable devices (MIG-like): the whole GPU and its two halves draw on one counter set."""
    counters = {"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}

    def part(name, amount):
        device = gpu(name)
        device["consumesCounters"] = [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": amount}}}]
        return device
    sl = resource_slice("node-a", [part("whole", "80Gi"), part("half-0", "40Gi"), part("half-1", "40Gi")], count=2)
    counter_slice = resource_slice("node-a", [], count=2, sharedCounters=[counters], name="counters")
    half = 'device.attributes["gpu.example.com"].size == "half"'
    sl["spec"]["devices"][1]["attributes"]["size"] = sl["spec"]["devices"][2]["attributes"]["size"] = \
        {"string": "half"}
    docs = read(device_class(), sl, counter_slice, template("half", claim_spec(request(selectors=(half,)))),
                template("one", claim_spec(request())), node("node-a"))
    inv = docs.inventory
    assert [n.capacity.gpus for n in docs.nodes] == [2]  # the two halves at once, in the model
    assert names(allocate(inv, [spec_of(inv, "one")], "node-a", set())) == [["whole"]]
    assert names(allocate(inv, [spec_of(inv, "half")] * 2, "node-a", set())) == [["half-0"], ["half-1"]]
    # half-0 allocated: the whole GPU's memory is no longer all free
    taken = {(DRIVER, "node-a", "half-0")}
    assert names(allocate(inv, [spec_of(inv, "one")], "node-a", taken)) == [["half-1"]]
    assert isinstance(allocate(inv, [spec_of(inv, "one")] * 2, "node-a", taken), str)


def test_only_complete_pools_at_their_newest_generation_count():
    old = resource_slice("node-a", [gpu("old")], generation=1, name="a-old")
    new = resource_slice("node-a", [gpu("new-0")], generation=2, count=2, name="a-new-0")
    docs = read(device_class(), old, new, node("node-a"))
    assert docs.inventory.devices == {} and "1 of 2 slices of generation 2" in docs.warnings[0]
    docs = read(device_class(), old, new, resource_slice("node-a", [gpu("new-1")], generation=2, count=2,
                                                         name="a-new-1"), node("node-a"))
    assert [d.name for d in docs.inventory.devices["node-a"]] == ["new-0", "new-1"]


def test_a_pod_of_a_template_asks_its_devices_on_the_nodes_that_can_give_them():
    docs = read(device_class(), four_gpus("node-a"), resource_slice("node-b", [gpu("gpu-0", nvlink=0)]),
                template("t", claim_spec(request(count=2))), node("node-a"), node("node-b"), node("node-c", 8),
                pod("train", template_name="t"))
    assert [(n.name, n.capacity.gpus) for n in docs.nodes] == [("node-a", 4), ("node-b", 1), ("node-c", 8)]
    job = docs.jobs[0]
    assert job.task.gpus == 2
    assert job.node_affinity == ((("field:metadata.name", "In", ("node-a",)),),)


def gpu_pod(name: str, gpus: int):
    limits, annotations = {"nvidia.com/gpu": str(gpus)}, {"trimtab.io/duration": "60s"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": limits}}]}}


def test_gpu_pods_go_to_dra_nodes_only_through_a_class_naming_nvidia_gpu():
    """node-a: 4 DRA GPUs only; node-c: 8 GPUs of its own. Without a class naming nvidia.com/gpu a pod asking it
    may go to node-c only; with one, to node-a too, as its devices can give them."""
    mapped = device_class()
    mapped["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    for cls, allowed in ((device_class(), ("node-c",)), (mapped, ("node-a", "node-c"))):
        job = read(cls, four_gpus("node-a"), node("node-a"), node("node-c", 8), gpu_pod("p", 2)).jobs[0]
        assert job.task.gpus == 2
        assert job.node_affinity == ((("field:metadata.name", "In", allowed),),)
    implicit = read(device_class(), four_gpus("node-a"), node("node-a"), {
        **gpu_pod("q", 0), "spec": {"containers": [{"name": "c", "image": "i", "resources": {
            "limits": {f"deviceclass.resource.kubernetes.io/{DRIVER}": "3"}}}]}}).jobs[0]
    assert implicit.task.gpus == 3  # the class's implicit name: devices the model counts as GPUs
    assert implicit.node_affinity == ((("field:metadata.name", "In", ("node-a",)),),)


def test_a_shared_claim_already_allocated_pins_its_pods_to_its_node_and_asks_nothing_more():
    allocation = {"devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": "node-a",
                                           "device": "gpu-0"}]},
                  "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                      {"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}}
    docs = read(device_class(), four_gpus(), node("node-a"), claim("shared", claim_spec(), allocation=allocation),
                pod("p1", claim_name="shared"), pod("p2", claim_name="shared"))
    assert [j.task.gpus for j in docs.jobs] == [0, 0]
    assert all(j.node_affinity == ((("field:metadata.name", "In", ("node-a",)),),) for j in docs.jobs)
    assert docs.inventory.in_use() == {(DRIVER, "node-a", "gpu-0")}


@pytest.mark.parametrize(("docs", "problem"), [
    ([pod("p", template_name="nope")], r"resourceClaimTemplateName.*ResourceClaimTemplate default/nope does not"),
    ([pod("p", claim_name="nope")], r"waiting for ResourceClaim default/nope"),
    ([template("t", {"devices": {"requests": [{"name": "g"}]}})], r"exactly one of exactly and firstAvailable"),
    ([template("t", claim_spec(request(), match="nvlink"))], r"matchAttribute.*fully qualified"),
])
def test_bad_claims_are_refused_naming_the_field(docs, problem):
    with pytest.raises(FormatError, match=problem):
        read(device_class(), four_gpus(), node("node-a"), *docs)
