"""`trimtab simulate --manifests`: the README's two-team example, its outcome, and what the command refuses."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trimtab.cli import app
from trimtab.profile import Profile

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "two-teams.yaml"
runner = CliRunner()


def test_the_readme_example_runs_as_the_readme_says(tmp_path):
    """team-a's quota holds two sweeps back while GPUs sit idle; team-b's notebook goes right after team-a's first
    trial (fair share, weighed again after each start); the production gang evicts the one trial it needs to fit
    and runs whole on one node; everything completes."""
    out = tmp_path / "run.json"
    result = runner.invoke(app, ["simulate", "--manifests", str(EXAMPLE), "--policy", "tenants", "--no-timing",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    run = json.loads(out.read_text())
    jobs = {j["id"]: j for j in run["jobs"]}
    first = {k: j["runs"][0] for k, j in jobs.items()}
    assert [first[f"team-a/trial-{s}"]["start"] for s in range(1, 7)] == [0, 0, 0, 0, 7200, 7200]
    assert [first[k]["nodes"] for k in ("team-a/trial-1", "team-b/notebook", "team-a/trial-4")] == [
        ["gpu-0"], ["gpu-0"], ["gpu-1"]]
    train = jobs["team-b/train"]["runs"]
    assert len(train) == 1 and (train[0]["start"], train[0]["end"]) == (1800.0, 12600.0)
    assert train[0]["nodes"] == ["gpu-1"] and train[0]["node_tasks"] == [4]
    trial = jobs["team-a/trial-4"]["runs"]
    assert [r["outcome"] for r in trial] == ["preempted", "completed"]
    assert (trial[0]["end"], trial[1]["start"], trial[1]["end"]) == (1800.0, 7200.0, 12630.0)
    assert [r["outcome"] for r in jobs["team-b/notebook"]["runs"]] == ["completed"]
    s = run["summary"]
    assert (s["jobs_completed"], s["preemptions"]) == (8, 1)
    assert s["tenants"] == {
        "team-a": {"jobs": 6, "gpu_share": 0.428741, "avg_jct_s": 10505.0, "avg_wait_s": 2400.0, "evictions": 1,
                   "quota_blocked_s": 3600.0},  # trial-5 and trial-6 held by the quota until trial-4 is evicted
        "team-b": {"jobs": 2, "gpu_share": 0.571259, "avg_jct_s": 19800.0, "avg_wait_s": 0.0, "evictions": 0,
                   "quota_blocked_s": 0.0},
    }


def test_manifests_and_a_workload_do_not_mix(tmp_path):
    result = runner.invoke(app, ["simulate", "--manifests", str(EXAMPLE), "--workload", "synthetic"])
    assert result.exit_code == 2 and "cannot be combined" in result.output


def test_a_bad_manifest_is_an_error_naming_the_document(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  priorityClassName: gold\n"
                   "  containers: [{name: c, image: i}]\n")
    result = runner.invoke(app, ["simulate", "--manifests", str(bad)])
    assert result.exit_code == 2
    assert "Pod p" in result.output and "no PriorityClass with name gold" in result.output


def test_pods_without_a_duration_cannot_be_simulated(tmp_path):
    m = tmp_path / "m.yaml"
    m.write_text(EXAMPLE.read_text().replace("annotations: {trimtab.io/duration: 8h}", "annotations: {}"))
    result = runner.invoke(app, ["simulate", "--manifests", str(m)])
    assert result.exit_code == 2 and "team-b/notebook" in result.output and "duration" in result.output


def test_unused_reserved_capacity_is_reported(tmp_path):
    """A reservation of 8 GPUs for team-a over 1 h to 3 h, and team-a asks for 2 of them: the other 6 stay unused
    for the window, and the run says so (table and JSON)."""
    m = tmp_path / "m.yaml"
    m.write_text("""
apiVersion: v1
kind: Node
metadata: {name: n0}
status: {capacity: {nvidia.com/gpu: "8", cpu: "64", memory: 512Gi}}
---
apiVersion: trimtab.io/v1
kind: Reservation
metadata: {name: demo-day}
spec: {gpus: 8, owner: {namespace: team-a}, start: 1h, end: 3h}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: team-a, annotations: {trimtab.io/duration: 4h, trimtab.io/submit-time: 1h}}
spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 2}}}]}
""")
    out = tmp_path / "run.json"
    result = runner.invoke(app, ["simulate", "--manifests", str(m), "--policy", "tenants", "--no-timing",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "reservation.demo-day.unused_gpu_s" in result.output
    unused = json.loads(out.read_text())["reservations"]["unused_gpu_s"]["demo-day"]
    assert unused == 6 * 7200


QUOTA_OF_TWO = """
apiVersion: v1
kind: Node
metadata: {name: n0}
status: {capacity: {nvidia.com/gpu: "16", cpu: "64", memory: 512Gi}}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: gpus, namespace: team-a}
spec: {hard: {requests.nvidia.com/gpu: "2"}}
""" + "".join(f"""---
apiVersion: v1
kind: Pod
metadata: {{name: p{i}, namespace: team-a, annotations: {{trimtab.io/duration: 1h}}}}
spec: {{containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]}}
""" for i in range(12))


def _most_runs_at_once(run: dict) -> int:
    edges = sorted((t, sign) for j in run["jobs"] for r in j["runs"]  # one GPU each
                   for t, sign in ((r["start"], 1), (r["end"], -1)))
    held = most = 0
    for _, change in edges:
        held += change
        most = max(most, held)
    return most


@pytest.mark.parametrize("policy", ["", *Profile.builtin_names()])
def test_a_resource_quota_is_admission_under_every_policy(tmp_path, policy):
    """The API server enforces a ResourceQuota whatever scheduler runs: twelve one-GPU pods in a namespace whose
    quota is two GPUs never hold more than two at once, on a node of 16 idle GPUs, under the default policy and
    every built-in one."""
    m = tmp_path / "m.yaml"
    m.write_text(QUOTA_OF_TWO)
    out = tmp_path / "run.json"
    result = runner.invoke(app, ["simulate", "--manifests", str(m), "--no-timing", "--out", str(out),
                                 *(["--policy", policy] if policy else [])])
    assert result.exit_code == 0, result.output
    run = json.loads(out.read_text())
    assert run["summary"]["jobs_completed"] == 12
    assert _most_runs_at_once(run) == 2


POLICY_OBJECTS = """
apiVersion: v1
kind: Node
metadata: {name: n0}
spec: {taints: [{key: dedicated, value: infer, effect: NoSchedule}]}
status: {capacity: {nvidia.com/gpu: "8", cpu: "64", memory: 512Gi}}
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {zone: a}}
status: {capacity: {nvidia.com/gpu: "8", cpu: "64", memory: 512Gi}}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: research}
spec: {weight: 3, capability: {nvidia.com/gpu: 4}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: gold}
value: 1000
---
apiVersion: trimtab.io/v1
kind: Reservation
metadata: {name: demo-day}
spec: {gpus: 4, owner: {namespace: team-a}, start: 1h, end: 3h}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: team-a, annotations: {trimtab.io/duration: 1h}}
spec:
  priorityClassName: gold
  affinity:
    nodeAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - {weight: 10, preference: {matchExpressions: [{key: zone, operator: In, values: [a]}]}}
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1}}}]
"""


def test_what_the_policy_cannot_honour_is_a_warning_naming_the_document_and_field(tmp_path):
    """Under fifo, the Queue's weight and capability, the PriorityClass's value and preemption, the Reservation and
    the pod's preferred node affinity have no plugin to honour them: each is a warning on stderr naming the document
    and the field (the Node's taints are honoured: every built-in profile filters them). Under tenants every one of
    them is honoured: no warning."""
    m = tmp_path / "m.yaml"
    m.write_text(POLICY_OBJECTS)
    result = runner.invoke(app, ["simulate", "--manifests", str(m), "--no-timing", "--policy", "fifo"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    expected = [
        "Queue research, field spec.weight: ignored",
        "Queue research, field spec.capability: ignored",
        "PriorityClass gold, field value: ignored",
        "PriorityClass gold, field preemptionPolicy (PreemptLowerPriority): ignored, fifo never preempts",
        "Reservation demo-day, field spec: ignored, fifo has no reservation plugin",
        "Pod team-a/p, field spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution: ignored, "
        "fifo has no node-affinity scorer",
    ]
    for text in expected:
        assert sum(text in line for line in lines) == 1, (text, lines)
    assert len(lines) == len(expected), lines
    assert "warning:" not in result.stdout
    result = runner.invoke(app, ["simulate", "--manifests", str(m), "--no-timing", "--policy", "tenants"])
    assert result.exit_code == 0, result.output
    assert "warning:" not in result.output


def test_a_policy_that_lends_but_never_reclaims_warns_about_reclaimable_queues(tmp_path):
    m = tmp_path / "m.yaml"
    m.write_text(POLICY_OBJECTS)
    result = runner.invoke(app, ["compare", "--manifests", str(m), "--no-timing", "--policies", "quota-fifo,steady",
                                 "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert ("Queue research, field spec.reclaimable: ignored, quota-fifo lends idle GPUs but never reclaims them"
            in result.stderr)
    assert "Queue research, field spec.capability: ignored, steady does not admit by queue" in result.stderr
