"""The FGD paper's packing experiment on Alibaba's openb trace: our best-fit and fgd land within a point of the
authors' published means, and steady-pack allocates more than fgd, also on the pod lists derived from the default
one with GPU-model constraints. Skips when the traces are absent."""

import csv
import hashlib

import pytest

from builders import trace_path
from trimtab.formats import load_cluster, load_trace
from trimtab.sim.packing import packing_experiment, run_packing, write_openb_variants

CSV = "alibaba-gpu-v2023-openb/cluster-trace-gpu-v2023/csv"
PAPER = {"best-fit": (92.86, 93.08), "fgd": (95.23, 95.39)}  # REFERENCE.md section 1: mean of seeds 42..51


@pytest.fixture(scope="module")
def openb():
    nodes = load_cluster(f"openb:{trace_path(CSV + '/openb_node_list_all_node.csv')}")
    pods = load_trace(f"openb:{trace_path(CSV + '/openb_pod_list_default.csv')}")
    return nodes, pods


def test_openb_inputs_are_read_whole(openb):
    nodes, pods = openb
    assert len(nodes) == 1523 and sum(n.capacity.gpus for n in nodes) == 6212
    assert len({n.gpu_model for n in nodes if n.capacity.gpus}) == 7
    assert len(pods) == 8152
    assert sum(1 for p in pods if p.task.gpu_milli) == 3078
    assert sum(1 for p in pods if not p.task.wants_gpu) == 1088


def test_authors_curves_are_what_reference_md_quotes():
    path = trace_path("fgd-results/analysis_allo_discrete_default.csv")
    rows = list(csv.DictReader(path.open()))
    for policy, name in (("05-BestFit", "best-fit"), ("06-FGD", "fgd")):
        at = [r for r in rows if r["sc_policy"] == policy]
        assert len(at) == 10
        for x, want in zip(("100", "130"), PAPER[name], strict=True):
            assert sum(float(r[x]) for r in at) / 10 == pytest.approx(want, abs=0.006)


@pytest.fixture(scope="module")
def seed42(openb):
    nodes, pods = openb
    return {p: run_packing(nodes, pods, p, inflate=1.3, seed=42) for p in ("best-fit", "fgd", "steady-pack")}


@pytest.mark.parametrize("policy", ["best-fit", "fgd"])
def test_one_seed_is_within_a_point_of_the_published_mean(seed42, policy):
    run = seed42[policy]
    assert run["alloc_pct"][100] == pytest.approx(PAPER[policy][0], abs=1.0)
    assert run["alloc_pct"][130] == pytest.approx(PAPER[policy][1], abs=1.0)


def test_steady_pack_allocates_more_than_fgd(seed42):
    fgd, ours = seed42["fgd"], seed42["steady-pack"]
    assert ours["alloc_pct"][100] > fgd["alloc_pct"][100]
    assert ours["alloc_pct"][130] > fgd["alloc_pct"][130]
    assert ours["failed"] < fgd["failed"]


@pytest.mark.slow
def test_ten_seeds_reproduce_the_paper_and_steady_pack_wins(openb):
    nodes, pods = openb
    result = packing_experiment(nodes, pods, ["best-fit", "fgd", "steady-pack"], list(range(42, 52)))
    means = {p: (d["mean"]["100"], d["mean"]["130"]) for p, d in result["policies"].items()}
    for policy in ("best-fit", "fgd"):
        assert means[policy][0] == pytest.approx(PAPER[policy][0], abs=1.0)
        assert means[policy][1] == pytest.approx(PAPER[policy][1], abs=1.0)
    assert means["steady-pack"][0] > means["fgd"][0] and means["steady-pack"][1] > means["fgd"][1]


# sha256 (first 16 hex digits) of the derived lists docs/placement.md measures on: its table holds while these do
VARIANT_SHA256 = {"cpu250": "b93a90f26dee7451", "gpushare80": "02430fd6fa9b5dbe", "multigpu": "2f76131250c12d56",
                  "gpuspec33": "e4628bb399f13c45", "gpuspec33u": "256f72dde5e23765"}


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    out = tmp_path_factory.mktemp("openb-variants")
    paths = write_openb_variants(trace_path(CSV + "/openb_pod_list_default.csv"),
                                 trace_path(CSV + "/openb_node_list_all_node.csv"), out)
    return {p.stem: p for p in paths}


def test_derived_pod_lists_are_the_documented_ones(variants):
    assert {name: hashlib.sha256(path.read_bytes()).hexdigest()[:16] for name, path in variants.items()} \
        == VARIANT_SHA256


@pytest.mark.parametrize("variant", ["gpuspec33", "gpuspec33u"])
def test_steady_pack_allocates_more_than_fgd_with_gpu_model_constraints(openb, variants, variant):
    """A third of the GPU pods constrained to GPU models, drawn by GPU count (gpuspec33) or uniformly over the
    models, which over-subscribes the small ones (gpuspec33u): steady-pack ahead at 100% and 130% (seed 42)."""
    nodes, _ = openb
    pods = load_trace(f"openb:{variants[variant]}")
    fgd, ours = (run_packing(nodes, pods, p, inflate=1.3, seed=42) for p in ("fgd", "steady-pack"))
    assert ours["alloc_pct"][100] > fgd["alloc_pct"][100]
    assert ours["alloc_pct"][130] > fgd["alloc_pct"][130]
