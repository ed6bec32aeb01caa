"""The manifest reader on the Workload API's PodGroup (scheduling.k8s.io/v1beta1, named by a pod's
`spec.schedulingGroup.podGroupName`): the same gangs `trimtab kube` forms from it (kube/owners.py)."""

import pytest

from trimtab.formats import FormatError
from trimtab.formats.k8s import load_manifests
from trimtab.kube.owners import owner_groups, owner_names

GROUP = """
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {{name: g, namespace: team-a, annotations: {{trimtab.io/duration: 30m}}}}
spec:
  schedulingPolicy: {policy}
---
"""


POD = """
apiVersion: v1
kind: Pod
metadata: {{name: w{i}, namespace: team-a, labels: {labels}}}
spec:
  schedulingGroup: {{podGroupName: {group}}}
  containers: [{{name: c, image: i, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]
"""


def load(text: str):
    return load_manifests(text, text=True)


def members(n: int, group: str = "g", labels: str = "{}") -> str:
    return "---".join(POD.format(i=i, group=group, labels=labels) for i in range(n))


def test_a_gang_policy_makes_the_pods_naming_the_group_one_gang_of_min_count_as_live():
    m = load(GROUP.format(policy="{gang: {minCount: 2}}") + members(3))
    gang, follower = m.jobs
    assert (gang.id, gang.tasks, gang.duration_s) == ("team-a/g", 2, 1800.0)
    assert (follower.id, follower.tasks, follower.after) == ("team-a/w2", 1, "team-a/g")
    # live, the same documents give the same gang: each pod's group, and its size
    group_doc = {"kind": "PodGroup", "metadata": {"name": "g", "namespace": "team-a"},
                 "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    assert owner_names({"metadata": {}, "spec": {"schedulingGroup": {"podGroupName": "g"}}}) == ("g",)
    assert [g["spec"]["minMember"] for g in owner_groups([group_doc])] == [gang.tasks]


def test_a_basic_policy_schedules_each_pod_on_its_own():
    m = load(GROUP.format(policy="{basic: {}}") + members(3))
    assert [(j.id, j.tasks, j.after) for j in m.jobs] == [(f"team-a/w{i}", 1, None) for i in range(3)]


def test_a_coscheduling_label_on_the_pod_comes_before_its_scheduling_group():
    cosched = """
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: named, namespace: team-a}
spec: {minMember: 2}
---
"""
    m = load(cosched + GROUP.format(policy="{gang: {minCount: 2}}")
             + members(2, labels="{scheduling.x-k8s.io/pod-group: named}"))
    assert [(j.id, j.tasks) for j in m.jobs] == [("team-a/named", 2)]
    assert any("no pod names this PodGroup" in w for w in m.warnings)


@pytest.mark.parametrize(("text", "field", "problem"), [
    (GROUP.format(policy="{gang: {minCount: 4}}") + members(3), "spec.schedulingPolicy.gang.minCount",
     "minCount is 4 but only 3 pods"),
    (GROUP.format(policy="{gang: {minCount: 0}}") + members(3), "spec.schedulingPolicy.gang.minCount",
     "expected an integer >= 1"),
    (GROUP.format(policy="{}") + members(1), "spec.schedulingPolicy", "exactly one of basic and gang"),
    (GROUP.format(policy="{basic: {}, gang: {minCount: 1}}") + members(1), "spec.schedulingPolicy",
     "exactly one of basic and gang"),
    (members(1, group="ghost"), "spec.schedulingGroup.podGroupName", "PodGroup 'ghost'.*no document defines"),
], ids=["min-count-above-pods", "min-count-zero", "no-policy", "two-policies", "missing-group"])
def test_bad_scheduling_groups_name_the_document_and_field(text, field, problem):
    with pytest.raises(FormatError, match=problem) as err:
        load(text)
    assert err.value.field == field
