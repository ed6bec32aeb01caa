"""advise on workloads built to have one bottleneck each: it names the planted cause, and the profile it
recommends recovers at least half of that cause's GPU-hours on the held-out jobs."""

from __future__ import annotations

from pathlib import Path

import pytest
from advise_scenarios import ALL

from trimtab.profile import Profile
from trimtab.report.losses import write_record
from trimtab.sim.advise import AdviseConfig, advise, candidates_for, compose, ranked_causes


@pytest.mark.parametrize("name", list(ALL))
def test_advise_names_the_planted_cause_and_its_fix_recovers_half(name: str) -> None:
    scenario = ALL[name]()
    steps: list[str] = []
    advice = advise(scenario.nodes, scenario.jobs, scenario.profile, scenario.config,
                    AdviseConfig(causes=2, seeds=2, tune_share=0.5, workers=2), progress=steps.append)
    doc = advice.document
    scheduler_causes = [c for c in doc["causes"] if c["scheduler"]]
    assert scheduler_causes[0]["cause"] == scenario.cause, doc["causes"]
    assert doc["recommended"]["bottleneck"] == scenario.cause
    assert doc["recommended"]["improved"], steps
    lost = doc["recommended"]["held_out"]["gain"][f"lost.{scenario.cause}"]
    assert lost["base"] > 0 and lost["candidate"] <= 0.5 * lost["base"], lost
    assert advice.profile.name == doc["recommended"]["profile"] != scenario.profile.name
    assert [k for k in doc] == ["baseline", "causes", "candidates", "recommended"]
    assert steps[-1].startswith("recommended:")


def test_causes_are_ranked_largest_first_and_load_is_not_the_schedulers() -> None:
    causes = ranked_causes({"fragmentation": 1.0, "load": 5.0, "preemption": 2.0})
    assert [c["cause"] for c in causes[:3]] == ["load", "preemption", "fragmentation"]
    assert [c["scheduler"] for c in causes[:2]] == [False, True]
    assert len(causes) == 7


def test_candidates_compose_onto_the_current_profile() -> None:
    """A strategy changes only what answers its cause; one already in the profile is not offered again."""
    las = Profile.load("las")
    [(min_runtime, guarded_las), (sized, sized_las), (guarded, _)] = candidates_for(las, "preemption")
    assert (min_runtime.name, sized.name, guarded.name) == ("min-runtime", "sized-victims", "guarded")
    assert guarded_las.args["lower-order"]["min_runtime_s"] == 3600.0
    assert sized_las.args["lower-order"]["max_victim_gpus_per_gpu"] == 2.0
    assert [s.name for s, _ in candidates_for(sized_las, "preemption")] == ["min-runtime", "guarded"]
    assert guarded_las.order == las.order and guarded_las.place == las.place
    assert [s.name for s, _ in candidates_for(Profile.load("fifo-backfill"), "blocking")] == ["reserve-aging"]
    both = compose(las, [min_runtime, guarded])
    assert both is not None and both.name == "las+min-runtime+guarded" and "guarded" in both.enabled("preempt")


def test_the_record_says_what_was_done_in_markdown_and_html(tmp_path: Path) -> None:
    """The steps, the causes, the candidates and the profile, with the figure of GPU-hours by cause embedded."""
    scenario = ALL["blocking"]()
    advice = advise(scenario.nodes, scenario.jobs, scenario.profile, scenario.config,
                    AdviseConfig(causes=1, seeds=1, tune_share=0.5, workers=1))
    md, page = write_record(advice.document, advice.steps, advice.baseline, "name: x\n", tmp_path)
    text = md.read_text()
    assert "## Where the GPU-hours went" in text and "| blocking |" in text and "fifo+backfill" in text
    assert "data:image/png;base64," in page.read_text() and (tmp_path / "losses.png").stat().st_size > 1000
