"""Story: pods that must keep apart, pods that must stay together, and pods with a favourite node, written as
Kubernetes manifests (tests/scenarios/affinity/: four 4-GPU nodes in two zones, one of them an A100) and scheduled
by the `tenants` profile as the default scheduler would place them."""

from pathlib import Path
from typing import Any

from stories import run

from trimtab.formats.k8s import Manifests, load_manifests

STORIES = Path(__file__).parent / "affinity"
ZONE = {"gpu-a1": "zone-a", "gpu-a2": "zone-a", "gpu-b1": "zone-b", "gpu-b2": "zone-b"}


def story(name: str) -> Manifests:
    m = load_manifests((STORIES / "nodes.yaml").read_text() + "\n---\n" + (STORIES / f"{name}.yaml").read_text(),
                       text=True)
    assert m.warnings == [], "the manifests are read whole, affinity included"
    return m


def runs(result: dict[str, Any]) -> dict[str, list[tuple[float, list[str]]]]:
    """Each workload's attempts: (start, nodes), by name without the namespace."""
    return {rec["id"].split("/")[1]: [(r["start"], r["nodes"]) for r in rec["runs"]] for rec in result["jobs"]}


def test_replicas_that_repel_each_other_take_one_host_each_and_the_fifth_waits():
    """Five inference replicas may not share a host; there are four hosts. Four start at once, one per host; the
    fifth waits an hour although 12 GPUs are free, and starts when a replica ends. Ten minutes in, a gang of
    four parameter servers that also repel each other per host starts with one member on every host."""
    result = run(story("spread"), "tenants")
    assert result["summary"]["jobs_completed"] == 6
    placed = runs(result)
    first = [placed[f"inference-{i}"][0] for i in range(4)]
    assert [start for start, _ in first] == [0.0] * 4
    assert sorted(nodes[0] for _, nodes in first) == sorted(ZONE)
    ((start, nodes),) = placed["inference-4"]
    assert start == 3600.0 and len(nodes) == 1, "it waited for a host of its own"
    ((start, nodes),) = placed["ps"]
    assert start == 600.0 and sorted(nodes) == sorted(ZONE)
    gang = next(rec for rec in result["jobs"] if rec["id"] == "research/ps")
    assert gang["runs"][0]["node_tasks"] == [1, 1, 1, 1]


def test_web_pods_join_the_zone_of_the_database_and_the_one_that_does_not_fit_waits():
    """Four web pods (2 GPUs each) must run in the zone of the database. They arrive first and wait; the
    database starts ten minutes in, and three web pods join it in its zone at once, on both of its nodes. The
    fourth does not fit in that zone and waits for one of them to end, although the other zone is idle."""
    result = run(story("colocate"), "tenants")
    assert result["summary"]["jobs_completed"] == 5
    placed = runs(result)
    ((db_start, (db_node,)),) = placed["db"]
    assert db_start == 600.0
    zone = ZONE[db_node]
    early = [placed[f"web-{i}"][0] for i in range(3)]
    assert all(600.0 <= start < 601.0 for start, _ in early), "tried again as soon as the database started"
    assert {ZONE[n] for _, nodes in early for n in nodes} == {zone}
    assert len({n for _, nodes in early for n in nodes}) == 2, "the zone, not just the database's host"
    ((start, nodes),) = placed["web-3"]
    assert start >= 600.0 + 3600.0 and ZONE[nodes[0]] == zone


def test_a_preferred_node_is_taken_while_it_has_room():
    """A notebook takes a GPU of gpu-a1. A 2-GPU render pod prefers the A100 node: it goes there, although gpu-a1
    would fit it more tightly. A 4-GPU render pod with the same preference no longer fits there and runs on
    another node instead of waiting."""
    placed = runs(run(story("prefer"), "tenants"))
    assert placed["notebook"] == [(0.0, ["gpu-a1"])]
    assert placed["render-small"] == [(60.0, ["gpu-b2"])]
    ((start, nodes),) = placed["render-big"]
    assert start == 120.0 and nodes != ["gpu-b2"]
