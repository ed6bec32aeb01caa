"""Plugins of one's own: named `package.module:Class` in a profile or registered by an installed package under the
entry-point group `trimtab.plugins`, resolved by the one Registry, and run alike by the library, `trimtab simulate`
and `trimtab serve` (the example package in examples/trimtab-plugin-example, as docs/plugins.md walks through)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from serve_helpers import SRC, Server

from builders import job, nodes
from trimtab import Profile, Scheduler, default_registry, simulate
from trimtab.cluster import ClusterState

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "trimtab-plugin-example"
EXAMPLE_SRC = EXAMPLE / "src"
EXAMPLE_PROFILE = EXAMPLE / "prefer-rack-1.yaml"
PREFER = "trimtab_example_plugin.prefer:PreferLabel"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (ROOT / "docs" / "plugins.md").read_text(), flags=re.S)


def test_the_plugins_page_runs_and_shows_the_example_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/plugins.md: its Python blocks run (the plugin, then its test: the job lands on rack-1's node), and the
    plugin, the profile and the entry point it shows are the example package's, word for word."""
    monkeypatch.syspath_prepend(str(EXAMPLE_SRC))
    namespace: dict[str, object] = {}
    for block in _blocks("python"):
        exec(compile(block, "docs/plugins.md", "exec"), namespace)
    plugin_class = _blocks("python")[0].split("class PreferLabel")[1]
    assert plugin_class in (EXAMPLE_SRC / "trimtab_example_plugin" / "prefer.py").read_text()
    [profile_block] = _blocks("yaml")
    assert profile_block in EXAMPLE_PROFILE.read_text()
    [toml_block] = _blocks("toml")
    assert toml_block in (EXAMPLE / "pyproject.toml").read_text()


def test_an_unknown_name_lists_the_built_ins_and_how_to_name_ones_own() -> None:
    with pytest.raises(ValueError) as err:
        Scheduler(ClusterState(nodes(2)), Profile.model_validate({"name": "p", "order": ["fifoo"]}))
    message = str(err.value)
    assert "unknown plugin 'fifoo'" in message and "fifo, " in message and "las" in message
    assert "package.module:Class" in message and "trimtab.plugins" in message


@pytest.mark.parametrize(("ref", "expected"), [
    ("no_such_package.plugins:Mine", "cannot import no_such_package.plugins: ModuleNotFoundError"),
    ("trimtab.plugins.order:Nope", "module trimtab.plugins.order has no Nope"),
    ("trimtab.plugins.order:math", "not a subclass of trimtab.Plugin"),
    ("trimtab.plugins.order:", "name a plugin of one's own as package.module:Class"),
])
def test_a_module_reference_that_leads_to_no_plugin_is_a_clear_error(ref: str, expected: str) -> None:
    with pytest.raises(ValueError, match=re.escape(expected)):
        default_registry().create(ref, {})


def test_a_module_plugin_at_a_point_it_does_not_implement_is_refused_when_the_profile_loads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE_SRC))
    profile = Profile.model_validate({"name": "wrong", "filter": [{PREFER: {"key": "k", "value": "v"}}]})
    with pytest.raises(ValueError, match=f"profile wrong: plugin '{PREFER}' is listed at filter but does not "
                                         "implement filter"):
        Scheduler(ClusterState(nodes(2)), profile)


def _install_entry_points(folder: Path, lines: str) -> None:
    """What `pip install` leaves for a package with entry points: its dist-info with entry_points.txt, and a module."""
    (folder / "my_plugins.py").write_text(
        "import numpy as np\nfrom trimtab import Plugin\n\n"
        "class LastNode(Plugin):\n"
        "    def filter(self, job, ctx):\n"
        "        allowed = np.zeros(len(ctx.cluster), dtype=bool)\n"
        "        allowed[-1] = True\n"
        "        return allowed\n")
    info = folder / "my_plugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[trimtab.plugins]\n{lines}")


def test_an_installed_package_names_its_plugins_by_entry_point(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry point of the group trimtab.plugins is a plugin name for every profile: the simulated jobs all run
    on the last node. An entry point that takes a built-in name is never used; an unknown name's error lists the
    installed plugins."""
    _install_entry_points(tmp_path, "last-node = my_plugins:LastNode\nfifo = my_plugins:LastNode\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    profile = Profile.model_validate({"name": "last", "filter": ["last-node"]})
    run = simulate(nodes(3), [job(i, gpus=2, submit_s=10.0 * i) for i in range(4)], profile)
    assert {n for rec in run["jobs"] for r in rec["runs"] for n in r["nodes"]} == {"n002"}
    assert type(default_registry().create("fifo", {})).__module__ == "trimtab.plugins.order"
    with pytest.raises(ValueError, match="installed: fifo, last-node"):
        default_registry().create("first-node", {})


def _trimtab(*args: str, pythonpath: list[Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, pythonpath)), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "trimtab.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


def test_trimtab_simulate_runs_the_example_plugin_named_by_module(tmp_path: Path) -> None:
    """`trimtab simulate -p prefer-rack-1.yaml` with the example's src on PYTHONPATH: jobs go to rack-1's node
    first (FIFO's packing alone fills node-0000 first). Without it, the error names the module it could not
    import."""
    args = ("simulate", "-c", "2r1x8", "-w", "synthetic:jobs=40,seed=3", "--no-timing", "-p", str(EXAMPLE_PROFILE))
    done = _trimtab(*args, "--out", "run.json", pythonpath=[SRC, EXAMPLE_SRC], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run = json.loads((tmp_path / "run.json").read_text())
    first_nodes = [rec["runs"][0]["nodes"][0] for rec in sorted(run["jobs"], key=lambda r: r["runs"][0]["start"])]
    assert first_nodes[0] == "node-0001"
    counts = Counter(first_nodes)
    assert counts["node-0001"] > counts["node-0000"], counts
    missing = _trimtab(*args, pythonpath=[SRC], cwd=tmp_path)
    assert missing.returncode == 2
    assert "cannot import trimtab_example_plugin.prefer" in missing.stdout + missing.stderr


def test_trimtab_serve_places_a_job_with_the_example_plugin(tmp_path: Path) -> None:
    """A real server started with the example's profile (`--policy prefer-rack-1.yaml`) on two virtual nodes puts
    a job on rack-1's node (packing alone would take node-0000)."""
    env = {"PYTHONPATH": os.pathsep.join([str(SRC), str(EXAMPLE_SRC)])}
    server = Server(tmp_path / "data", "--cluster", "2r1x8", "--policy", str(EXAMPLE_PROFILE), env=env).start()
    try:
        with server.client() as client:
            health = client.get("/healthz").json()
            assert health["policy"] == "prefer-rack-1"
            r = client.post("/v1/jobs", json={"name": "one", "command": ["true"], "gpus": 2})
            assert r.status_code == 201, r.text
            deadline = time.monotonic() + 30
            runs: list[dict[str, object]] = []
            while not runs and time.monotonic() < deadline:
                runs = client.get(f"/v1/jobs/{r.json()['id']}").json()["runs"]
                time.sleep(0.1)
    finally:
        server.stop()
    assert [run["node"] for run in runs] == ["node-0001"]
