"""Story: a 16-GPU gang waits behind a stream of one-GPU jobs. Without a reservation the stream takes every GPU
as it frees and the gang starts only after the stream dries up; with reserve + EASY backfill it starts within
the longest running job's remaining time, and short jobs still slip into the holes."""

from builders import job, nodes
from trimtab.profile import Profile
from trimtab.sim.run import SimConfig, simulate

STREAM_END_S = 12 * 3600.0


def stream():
    jobs = [job(f"s{i}", 1, submit_s=i * 200.0, duration_s=3600.0) for i in range(int(STREAM_END_S / 200))]
    jobs.append(job("gang", 16, submit_s=3600.0, duration_s=3600.0))
    jobs += [job(f"tiny{i}", 1, submit_s=3700.0 + i, duration_s=60.0) for i in range(2)]
    return jobs


def run(profile: Profile):
    result = simulate(nodes(2, 8), stream(), profile, SimConfig(timing=False))
    return {j["id"]: j for j in result["jobs"]}


def test_a_large_gang_starts_in_bounded_time_only_with_a_reservation():
    skip = Profile(name="skip", order=["fifo"])
    reserve = Profile(name="reserve", order=["fifo"], backfill=[{"reserve": {"min_gpus": 8}}])
    without, with_ = run(skip), run(reserve)
    assert without["gang"]["runs"][0]["start"] >= STREAM_END_S, "starved while the stream lasts"
    # the jobs queued before it go first; then it waits at most for the running ones to end
    assert with_["gang"]["runs"][0]["start"] <= 3600.0 + 2 * 3600.0
    # EASY: the one-minute jobs end before the reservation starts, so they run at once on reserved GPUs
    assert all(with_[f"tiny{i}"]["runs"][0]["start"] < with_["gang"]["runs"][0]["start"] for i in range(2))
    assert all(with_[f"tiny{i}"]["runs"][0]["start"] - with_[f"tiny{i}"]["submit"] < 600 for i in range(2))


def test_aging_gives_a_small_job_that_waited_too_long_a_reservation_too():
    """A 4-GPU job below the size threshold on a 4-GPU node kept busy by a steady stream of 1-GPU jobs: aging
    (max_wait_s) reserves for it; without aging it waits for the stream to end."""
    jobs = [job(f"s{i}", 1, submit_s=i * 900.0, duration_s=3600.0) for i in range(int(STREAM_END_S / 900))]
    jobs.append(job("mid", 4, submit_s=3600.0, duration_s=600.0))
    aged = Profile(name="aged", order=["fifo"], backfill=[{"reserve": {"min_gpus": 8, "max_wait_s": 1800}}])
    never = Profile(name="never", order=["fifo"], backfill=[{"reserve": {"min_gpus": 8, "max_wait_s": None}}])
    start = {p.name: next(j for j in simulate(nodes(1, 4), jobs, p, SimConfig(timing=False))["jobs"]
                          if j["id"] == "mid")["runs"][0]["start"] for p in (aged, never)}
    assert start["never"] >= STREAM_END_S
    assert start["aged"] <= 3600.0 + 1800.0 + 3600.0
