"""Story: two Volcano queues weighted 3:1 both ask for the whole cluster; under drf their GPU shares converge to
3/4 and 1/4, and a queue arriving late reclaims its deserved half from one that borrowed everything."""

from stories import manifests, node, run, vcjob


def queue(name: str, weight: int) -> dict:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name},
            "spec": {"weight": weight}}


def shares_between(result: dict, queue_of: dict[str, str], from_s: float, to_s: float) -> dict[str, float]:
    """Each queue's share of the GPU-time used in [from_s, to_s)."""
    used: dict[str, float] = {}
    for rec in result["jobs"]:
        for r in rec["runs"]:
            overlap = max(min(r["end"], to_s) - max(r["start"], from_s), 0.0)
            used[queue_of[rec["id"]]] = used.get(queue_of[rec["id"]], 0.0) + rec["gpus"] * overlap
    total = sum(used.values())
    return {q: u / total for q, u in used.items()}


def test_drf_shares_converge_to_queue_weights():
    docs = [node("n0"), node("n1"), queue("gold", 3), queue("bronze", 1)]
    for i in range(120):
        docs.append(vcjob(f"g{i}", "team-g", duration=f"{20 + i % 7}m", queue="gold"))
        docs.append(vcjob(f"b{i}", "team-b", duration=f"{20 + i % 5}m", queue="bronze"))
    m = manifests(*docs)
    queue_of = {j.id: j.queue for j in m.jobs}
    result = run(m, "drf")
    shares = shares_between(result, queue_of, 1800.0, 3 * 3600.0)  # both queues have work waiting throughout
    assert abs(shares["gold"] - 0.75) < 0.05 and abs(shares["bronze"] - 0.25) < 0.05, shares


def test_a_late_queue_reclaims_its_deserved_share():
    """bronze borrowed all 16 GPUs for long jobs; gold (equal weight) arrives at 1 h and gets 8 at once."""
    docs = [node("n0"), node("n1"), queue("gold", 1), queue("bronze", 1)]
    docs += [vcjob(f"b{i}", "team-b", duration="10h", queue="bronze") for i in range(16)]
    docs += [vcjob(f"g{i}", "team-g", duration="2h", submit="1h", queue="gold") for i in range(12)]
    result = run(manifests(*docs), "drf")
    gold_starts = sorted(r["runs"][0]["start"] for r in result["jobs"] if r["id"].startswith("team-g"))
    assert gold_starts[:8] == [3600.0] * 8, "reclaimed at once, up to the deserved half"
    assert gold_starts[8] > 3600.0, "not beyond it"
    assert result["summary"]["tenants"]["team-b"]["evictions"] == 8
