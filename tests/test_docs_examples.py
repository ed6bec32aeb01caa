"""The code examples of the docs run as written: a reader who copies one gets what the page says."""

from __future__ import annotations

import re
from pathlib import Path

from builders import job, nodes
from trimtab import Plugin, Profile, default_registry, simulate

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.S)


def test_the_library_example_of_the_readme_runs(capsys) -> None:  # type: ignore[no-untyped-def]
    """README.md, "As a library": one 4-GPU job alone on 2x8 runs its hour (its JCT is printed)."""
    [block] = _python_blocks("../README.md")
    exec(compile(block, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "3600.0"


def test_the_plugin_example_of_the_architecture_page_runs() -> None:
    """docs/architecture.md, "Adding a plugin": a filter of one's own, registered and used by a profile, keeps the
    gang off the node it names (the example asserts where the gang lands)."""
    [block] = _python_blocks("architecture.md")
    exec(compile(block, "docs/architecture.md", "exec"), {})


def test_simulate_runs_a_profile_of_ones_own_plugins() -> None:
    """A plugin in a registry of one's own runs in simulation as it would live: every job lands where it says."""

    class LastNode(Plugin):
        def filter(self, job, ctx):  # type: ignore[no-untyped-def]
            allowed = ctx.cluster.free_gpus < 0
            allowed[-1] = True
            return allowed

    registry = default_registry()
    registry.register("last-node", LastNode)
    profile = Profile.model_validate({"name": "last", "filter": ["last-node"]})
    run = simulate(nodes(3), [job(i, gpus=2, submit_s=10.0 * i) for i in range(6)], profile, registry=registry)
    assert run["summary"]["jobs_completed"] == 6
    assert {n for rec in run["jobs"] for r in rec["runs"] for n in r["nodes"]} == {"n002"}
