"""Tolerations and affinity of a submitted job, honoured by a real `trimtab serve` as kube-scheduler honours them:
checked at submission (a job no node could ever take is refused with the reason), used in placement, and kept in
the store across a SIGKILL and a restart. Both nodes of the cluster file are tainted, in two zones."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_helpers import OLD_JOB, Server, store_at_revision

CLUSTER = """nodes:
  - {name: infer, gpus: 2, labels: {zone: a}, taints: [{key: dedicated, value: infer, effect: NoSchedule}]}
  - {name: train, gpus: 2, labels: {zone: b}, taints: [{key: dedicated, value: train, effect: NoSchedule}]}
"""
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def pod(name: str, spec_extra: str, labels: str = "{}") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {labels}}}
spec:
  containers:
    - name: main
      command: [sleep, "300"]
      resources: {{limits: {{nvidia.com/gpu: 1}}}}
{spec_extra}"""


def start(root: Path) -> Server:
    (root / "cluster.yaml").write_text(CLUSTER)
    return Server(root / "data", "--cluster", str(root / "cluster.yaml")).start()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(tmp_path_factory.mktemp("constraints"))
    yield server
    server.stop()


@pytest.fixture
def admin(server: Server) -> Iterator[httpx.Client]:
    """The admin's client; every job a test leaves is cancelled after it, so each test finds the nodes empty."""
    with server.client() as client:
        yield client
        for job in client.get("/v1/jobs").json()["jobs"]:
            if job["state"] in ("pending", "running"):
                client.post(f"/v1/jobs/{job['id']}/cancel")
        deadline = time.monotonic() + 20
        while any(j["state"] in ("pending", "running") for j in client.get("/v1/jobs").json()["jobs"]):
            assert time.monotonic() < deadline, "jobs left running"
            time.sleep(0.05)


def post_pod(admin: httpx.Client, manifest: str) -> httpx.Response:
    return admin.post("/v1/jobs", content=manifest, headers={"Content-Type": "application/yaml"})


def node_of(admin: httpx.Client, job_id: int, timeout_s: float = 20.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = admin.get(f"/v1/jobs/{job_id}").json()
        if job["runs"]:
            return str(job["runs"][0]["node"])
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not start: {job['state']}, {job['reason']!r}")


def jobs_stored(admin: httpx.Client) -> int:
    return len(admin.get("/v1/jobs").json()["jobs"])


def test_a_pod_without_tolerations_on_tainted_nodes_is_refused_with_the_taints(admin: httpx.Client) -> None:
    """Kubernetes, taints and tolerations: a node's NoSchedule taint lets no pod be scheduled onto it unless the
    pod tolerates the taint. Every node is tainted, so a pod with no tolerations can never run: 422 naming the
    taints, nothing stored."""
    before = jobs_stored(admin)
    r = post_pod(admin, pod("plain", ""))
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "tolerations"
    assert r.json()["detail"] == ("every node has a taint the job does not tolerate (infer: "
                                  "dedicated=infer:NoSchedule, train: dedicated=train:NoSchedule); the job's "
                                  "tolerations: none")
    assert jobs_stored(admin) == before


def test_a_toleration_with_another_effect_does_not_tolerate_the_taint(admin: httpx.Client) -> None:
    """Kubernetes, Toleration.effect: the taint effect to match; empty matches every effect. A toleration of
    dedicated=infer for NoExecute leaves the NoSchedule taint of the same key and value untolerated."""
    extra = "  tolerations: [{key: dedicated, operator: Equal, value: infer, effect: NoExecute}]\n"
    r = post_pod(admin, pod("wrong-effect", extra))
    assert r.status_code == 422, r.text
    assert "the job's tolerations: dedicated=infer:NoExecute" in r.json()["detail"]


def test_a_pod_that_tolerates_a_taint_is_placed_on_that_node(admin: httpx.Client) -> None:
    """Kubernetes, operator Equal: a toleration matches a taint with the same key, value and effect. The pod
    tolerating dedicated=infer:NoSchedule runs on the node `infer`, never on `train` (still untolerated); the job
    shows its tolerations as it sent them."""
    extra = "  tolerations: [{key: dedicated, operator: Equal, value: infer, effect: NoSchedule}]\n"
    r = post_pod(admin, pod("server", extra))
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    assert node_of(admin, job_id) == "infer"
    shown = admin.get(f"/v1/jobs/{job_id}").json()
    assert shown["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "infer",
                                     "effect": "NoSchedule"}]


def test_a_json_job_with_an_exists_toleration_runs_where_its_required_affinity_says(admin: httpx.Client) -> None:
    """Kubernetes: operator Exists matches every value of the key; required node affinity (nodeSelectorTerms
    ORed, the matchExpressions of a term ANDed) limits the nodes the pod may use. A JSON job tolerating any
    `dedicated` taint and requiring zone In (b) runs on `train`; one requiring zone In (c), which no node has,
    is refused with the affinity and the labels there are."""
    affinity = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}
    job = {"command": ["sleep", "300"], "gpus": 1, "tolerations": [{"key": "dedicated", "operator": "Exists"}],
           "affinity": affinity}
    r = admin.post("/v1/jobs", json=job)
    assert r.status_code == 201, r.text
    assert node_of(admin, r.json()["id"]) == "train"

    affinity["nodeAffinity"][REQUIRED]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = ["c"]
    r = admin.post("/v1/jobs", json=job)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "affinity"
    assert r.json()["detail"].startswith("no node matches the job's required node affinity (zone In (c)); labels "
                                         "present: ")
    assert "zone=a" in r.json()["detail"] and "zone=b" in r.json()["detail"]


def test_a_required_affinity_met_by_a_tainted_node_only_is_refused(admin: httpx.Client) -> None:
    """Kubernetes: a node must pass every filter (the taint filter and the node affinity filter) to be feasible.
    Tolerating `infer` but requiring zone b: each constraint is met by some node, none by both."""
    extra = ("  tolerations: [{key: dedicated, value: infer, effect: NoSchedule}]\n"
             f"  affinity: {{nodeAffinity: {{{REQUIRED}: {{nodeSelectorTerms: "
             "[{matchExpressions: [{key: zone, operator: In, values: [b]}]}]}}}\n")
    r = post_pod(admin, pod("torn", extra))
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith("no node meets all of the job's constraints")


@pytest.mark.parametrize("json_job", [False, True])
def test_bad_tolerations_are_refused_naming_the_field(admin: httpx.Client, json_job: bool) -> None:
    """Kubernetes, Toleration: operator is Exists or Equal; with Exists the value must be empty; an empty key
    needs Exists. The JSON job and the manifest are read by the same reader, each error naming the field."""
    bad = [{"key": "dedicated", "operator": "Exists", "value": "infer"}]
    if json_job:
        r = admin.post("/v1/jobs", json={"command": ["true"], "tolerations": bad})
        want_field = "tolerations"
    else:
        r = post_pod(admin, pod("bad", f"  tolerations: {json.dumps(bad)}\n"))
        want_field = "spec.tolerations[0].value"
    assert r.status_code == 422, r.text
    assert r.json()["field"] == want_field
    assert "a toleration with operator Exists takes no value" in r.json()["detail"]


def test_pod_anti_affinity_keeps_a_second_pod_off_the_first_ones_zone(admin: httpx.Client) -> None:
    """Kubernetes, podAntiAffinity required: the pod may not run in a topology domain (nodes with the same
    topologyKey label value) that runs a pod its labelSelector matches. Both pods tolerate every taint (empty key
    with Exists); the second would pack next to the first in zone a but is sent to zone b."""
    first = pod("web-0", "  tolerations: [{operator: Exists}]\n  nodeSelector: {zone: a}\n", "{app: web}")
    r = post_pod(admin, first)
    assert r.status_code == 201, r.text
    assert node_of(admin, r.json()["id"]) == "infer"
    anti = (f"  tolerations: [{{operator: Exists}}]\n  affinity: {{podAntiAffinity: {{{REQUIRED}: "
            "[{topologyKey: zone, labelSelector: {matchLabels: {app: web}}}]}}\n")
    r = post_pod(admin, pod("web-1", anti, "{app: web}"))
    assert r.status_code == 201, r.text
    assert node_of(admin, r.json()["id"]) == "train"


def test_tolerations_and_affinity_survive_a_restart(tmp_path: Path) -> None:
    """What was stored is what the scheduler honours after a SIGKILL and a restart: a job tolerating only `infer`
    waits while `infer` is full (the free GPUs of `train` stay out of bounds), then runs on `infer`."""
    server = start(tmp_path)
    tolerate_infer: dict[str, Any] = {"tolerations": [{"key": "dedicated", "value": "infer"}]}
    try:
        with server.client() as admin:
            r = admin.post("/v1/jobs", json={"command": ["sleep", "300"], "gpus": 2, **tolerate_infer})
            blocker = r.json()["id"]
            assert node_of(admin, blocker) == "infer"
            r = admin.post("/v1/jobs", json={"command": ["sleep", "300"], "gpus": 1, **tolerate_infer})
            assert r.status_code == 201, r.text
            waiting = r.json()["id"]
        server.kill()
        server.start()
        with server.client() as admin:
            time.sleep(0.5)
            job = admin.get(f"/v1/jobs/{waiting}").json()
            assert job["state"] == "pending" and job["tolerations"] == [
                {"key": "dedicated", "operator": "Equal", "value": "infer"}]
            assert "tainted" in job["reason"], job["reason"]
            assert admin.post(f"/v1/jobs/{blocker}/cancel").status_code == 200
            assert node_of(admin, waiting) == "infer"
            assert admin.post(f"/v1/jobs/{waiting}/cancel").status_code == 200  # a stopped server leaves tasks running
    finally:
        server.stop()


def test_jobs_stored_before_revision_0005_have_no_constraints(tmp_path: Path) -> None:
    """Revision 0005 adds `jobs.tolerations`, `affinity` and `labels`; a job stored before reads with none of them
    and becomes the scheduler's Job as it was."""

    from trimtab.serve.run.attempts import job_of
    from trimtab.serve.store import JobRow

    store = store_at_revision(tmp_path / "old.db", "0004", OLD_JOB % '{"zone": "a"}')
    store.upgrade()
    with store.reader() as s:
        [row] = s.query(JobRow).all()
        assert (row.tolerations, row.affinity, row.labels) == ([], None, {})
        job = job_of(row)
    assert (job.tolerations, job.node_affinity, job.pod_affinity, dict(job.node_selector)) == ((), (), None,
                                                                                               {"zone": "a"})


def test_affinity_values_that_are_not_a_list_are_refused_naming_the_field() -> None:
    """Kubernetes, NodeSelectorRequirement.values: an array of strings. A number or a boolean there is a 422
    naming the field (it once raised a TypeError: a 500)."""
    from trimtab.serve.intake.submission import SubmissionError, spec_from_dict

    for values in (True, 1.5, "a"):
        term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": values}]}
        with pytest.raises(SubmissionError, match=re.escape("nodeSelectorTerms[0].matchExpressions[0].values: "
                                                            "must be a list")) as err:
            spec_from_dict({"command": ["true"], "affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
                term]}}}})
        assert err.value.field == "affinity"
