"""Story: two teams flood a shared cluster; each team's ResourceQuota holds at every instant, and over-quota work
waits instead of being dropped."""

from stories import manifests, node, peak_by, quota, run, vcjob


def flood(quotas: bool = True):
    docs = [node(f"n{i}") for i in range(4)]
    if quotas:
        docs += [quota("team-a", **{"requests.nvidia.com/gpu": "8", "pods": "6"}),
                 quota("team-b", **{"requests.nvidia.com/gpu": "12"})]
    for i in range(24):
        size = (1, 2, 4)[i % 3]
        docs.append(vcjob(f"a{i}", "team-a", replicas=size, gpus=1, duration=f"{20 + 7 * (i % 5)}m",
                          submit=f"{i * 3}m"))
        docs.append(vcjob(f"b{i}", "team-b", replicas=1, gpus=size, duration=f"{30 + 11 * (i % 4)}m",
                          submit=f"{i * 2}m"))
    return manifests(*docs)


def test_no_namespace_ever_exceeds_its_quota_and_nothing_is_dropped():
    """team-a may hold 8 GPUs and 6 pods, team-b 12 GPUs; the cluster has 32. Both ask for far more."""
    m = flood()
    assert [(q.namespace, q.gpus, q.pods) for q in m.quotas] == [("team-a", 8, 6), ("team-b", 12, None)]
    for policy in ("tenants", "quota-fifo", "drf", "fifo-backfill", "steady"):  # a quota is admission under all
        result = run(m, policy)
        assert result["summary"]["jobs_completed"] == len(m.jobs), "over-quota jobs wait; none is dropped"
        gpus = peak_by(result, "tenant", {j.id: j.gpus for j in m.jobs})
        pods = peak_by(result, "tenant", {j.id: j.tasks for j in m.jobs})
        assert gpus["team-a"] <= 8 and pods["team-a"] == 6, policy  # the pods limit binds first
        assert gpus["team-b"] == 12, policy


def test_without_the_quotas_the_same_flood_overruns_them():
    """The check above can fail: without its ResourceQuota, team-b takes more than 12 GPUs."""
    m = flood(quotas=False)
    result = run(m, "fifo-backfill")
    assert peak_by(result, "tenant", {j.id: j.gpus for j in m.jobs})["team-b"] > 12
