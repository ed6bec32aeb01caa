"""The verdict says why a policy wins, from what the runs measured: where the baseline's jobs spent their waiting
(`wait_by_cause_s`), or how often each preempted; a tie, a win of the baseline, or a run that did not measure it
gets no why."""

from __future__ import annotations

from typing import Any

from builders import nodes
from trimtab.model import Job, Resources
from trimtab.report.verdict import Finding, finding_text, verdict
from trimtab.sim.run import SimConfig, simulate


def run(summary: dict[str, float], waits: dict[str, float] | None = None) -> dict[str, Any]:
    return {"summary": summary} if waits is None else {"summary": summary, "wait_by_cause_s": waits}


def finding(runs: dict[str, list[dict[str, Any]]], key: str, baseline: str = "fifo") -> Finding:
    return next(f for f in verdict(runs, baseline) if f.column.key == key)


def test_a_simulated_win_on_waiting_names_the_dominant_cause_of_the_baselines_waits() -> None:
    """One 4-GPU node: a long 4-GPU job, then another, then eight short 1-GPU jobs. Under fifo the second big job
    waits for GPUs (fit) and the small ones behind it (order); sjf starts the small ones first. The why quotes
    fifo's shares of waiting as its run JSON measured them."""
    jobs = [Job(id="big-1", submit_s=0.0, tasks=1, task=Resources(gpus=4), duration_s=1000.0),
            Job(id="big-2", submit_s=1.0, tasks=1, task=Resources(gpus=4), duration_s=1000.0),
            *(Job(id=f"small-{i}", submit_s=2.0, tasks=1, task=Resources(gpus=1), duration_s=50.0) for i in range(8))]
    config = SimConfig(checkpoint_s=0.0, restart_s=0.0, timing=False)
    runs = {name: [simulate(nodes(1, 4), jobs, name, config)] for name in ("fifo", "sjf")}
    fifo_waits = runs["fifo"][0]["wait_by_cause_s"]
    total = sum(fifo_waits.values())
    assert fifo_waits["order"] > fifo_waits["fit"] > 0, fifo_waits

    wait = finding(runs, "avg_wait_s")
    assert wait.best == ("sjf",)
    share = f"order {fifo_waits['order'] / total:.0%}, fit {fifo_waits['fit'] / total:.0%}"
    assert wait.why.startswith(f"fifo's jobs waited mostly behind others ({share} of "), wait.why
    assert finding_text(wait, "fifo").endswith(f" — {wait.why}")


def test_the_why_lists_the_baselines_causes_largest_first_with_the_totals() -> None:
    runs = {"fifo": [run({"avg_wait_s": 900.0}, {"fit": 3_000.0, "order": 7_800.0, "quota": 10.0})],
            "srtf": [run({"avg_wait_s": 20.0}, {"fit": 200.0})]}
    assert finding(runs, "avg_wait_s").why == ("fifo's jobs waited mostly behind others (order 72%, fit 28% of "
                                               "3.0 h waited in all; srtf's jobs 200 s)")


def test_with_no_cause_over_half_the_why_says_longest() -> None:
    runs = {"fifo": [run({"avg_jct_s": 900.0}, {"fit": 4_000.0, "quota": 3_000.0, "gang": 3_000.0})],
            "drf": [run({"avg_jct_s": 500.0}, {"fit": 1_000.0})]}
    assert finding(runs, "avg_jct_s").why.startswith("fifo's jobs waited longest for free GPUs (fit 40%, quota 30%, "
                                                     "gang 30% of ")


def test_fewer_preemptions_explain_less_wasted_work() -> None:
    runs = {"fifo": [run({"wasted_gpu_hours": 50.0, "preemptions": 480})],
            "steady": [run({"wasted_gpu_hours": 2.0, "preemptions": 12})]}
    assert finding(runs, "wasted_gpu_hours").why == "fewer preemptions (12 vs 480)"


def test_ties_a_baseline_win_and_unmeasured_runs_get_no_why() -> None:
    waits = {"order": 5_000.0}
    tie = {"fifo": [run({"avg_wait_s": 50.0}, waits)], "sjf": [run({"avg_wait_s": 40.0}, {"fit": 10.0})],
           "las": [run({"avg_wait_s": 40.1}, {"fit": 10.0})]}
    assert finding(tie, "avg_wait_s").best == ("sjf", "las") and finding(tie, "avg_wait_s").why == ""
    baseline_wins = {"fifo": [run({"avg_wait_s": 10.0}, waits)], "sjf": [run({"avg_wait_s": 40.0}, waits)]}
    assert finding(baseline_wins, "avg_wait_s").why == ""
    unmeasured = {"fifo": [run({"avg_wait_s": 50.0})], "sjf": [run({"avg_wait_s": 40.0})]}
    assert finding(unmeasured, "avg_wait_s").why == ""
    assert " — " not in finding_text(finding(unmeasured, "avg_wait_s"), "fifo")


def test_no_why_the_data_does_not_support() -> None:
    """A utilisation win by a policy whose jobs waited longer in all is not explained by waiting; more
    preemptions do not explain less wasted work."""
    runs = {"fifo": [run({"gpu_util": 0.5, "wasted_gpu_hours": 9.0, "preemptions": 3}, {"fit": 100.0})],
            "las": [run({"gpu_util": 0.7, "wasted_gpu_hours": 4.0, "preemptions": 30}, {"order": 900.0})]}
    assert finding(runs, "gpu_util").best == ("las",) and finding(runs, "gpu_util").why == ""
    assert finding(runs, "wasted_gpu_hours").why == ""


def test_the_why_averages_the_seeds() -> None:
    runs = {"fifo": [run({"avg_wait_s": 900.0}, {"order": 3_600.0}), run({"avg_wait_s": 800.0}, {"fit": 3_600.0})],
            "sjf": [run({"avg_wait_s": 10.0}, {}), run({"avg_wait_s": 12.0}, {})]}
    assert finding(runs, "avg_wait_s").why == ("fifo's jobs waited longest for free GPUs (fit 50%, order 50% of "
                                               "1.0 h waited in all; sjf's jobs 0 s)")
