"""The Kubernetes manifest reader: quantities, defaults, gangs, and errors that name the document and field."""

import pytest

from trimtab.formats import FormatError, YamlSyntaxError
from trimtab.formats.k8s import load_manifests
from trimtab.model import LabelSelector


def load(text: str):
    return load_manifests(text, text=True)


POD = """
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}, annotations: {annotations}, labels: {labels}}}
spec:
  {extra}
  containers:
  - name: c
    image: i
    resources: {resources}
"""


def pod(name="p", ns="team-a", resources="{limits: {nvidia.com/gpu: 1}}", extra="", annotations="{}",
        labels="{}") -> str:
    return POD.format(name=name, ns=ns, resources=resources, extra=extra or "schedulerName: default-scheduler",
                      annotations=annotations, labels=labels)


def test_a_pod_naming_a_missing_priority_class_is_refused():
    with pytest.raises(FormatError, match=r"Pod p.*priorityClassName.*no PriorityClass with name gold was found"):
        load(pod(extra="priorityClassName: gold"))


def test_a_quantity_that_does_not_parse_names_document_and_field():
    with pytest.raises(FormatError) as err:
        load(pod(resources="{requests: {cpu: 2 cores}, limits: {nvidia.com/gpu: 1}}"))
    assert "document 1" in str(err.value) and "Pod p" in str(err.value)
    assert err.value.field == "spec.containers[0].resources.requests.cpu"


def test_a_pod_whose_gang_is_never_defined_is_refused():
    with pytest.raises(FormatError, match=r"PodGroup 'ghost'.*no document defines"):
        load(pod(annotations="{scheduling.k8s.io/group-name: ghost}"))


def test_a_pod_no_quota_could_ever_admit_is_refused():
    quota = """
apiVersion: v1
kind: ResourceQuota
metadata: {name: gpus, namespace: team-a}
spec: {hard: {requests.nvidia.com/gpu: "2"}}
---"""
    with pytest.raises(FormatError, match=r"exceeds ResourceQuota team-a/gpus on its own.*asked 4, hard limit 2"):
        load(quota + pod(resources="{limits: {nvidia.com/gpu: 4}}"))
    assert load(quota + pod(resources="{limits: {nvidia.com/gpu: 2}}")).jobs[0].gpus == 2


def test_a_quota_on_cpu_requires_every_pod_to_state_a_cpu_request():
    quota = """
apiVersion: v1
kind: ResourceQuota
metadata: {name: compute, namespace: team-a}
spec: {hard: {requests.cpu: "8"}}
---"""
    with pytest.raises(FormatError, match=r"must specify requests\.cpu"):
        load(quota + pod())
    assert load(quota + pod(resources="{requests: {cpu: 1}, limits: {nvidia.com/gpu: 1}}")).jobs[0].task.cpu_milli \
        == 1000
    load(quota + pod(ns="team-b"))  # another namespace is not bound by it


@pytest.mark.parametrize(("resources", "problem"), [
    ("{requests: {nvidia.com/gpu: 1}, limits: {nvidia.com/gpu: 2}}", "must equal its limit"),
    ("{requests: {nvidia.com/gpu: 1}}", "needs a limit"),
    ("{limits: {nvidia.com/gpu: 500m}}", "whole number of GPUs"),
    ("{requests: {cpu: 2}, limits: {cpu: 1}}", "less than or equal to the limit"),
])
def test_invalid_requests_are_refused(resources, problem):
    with pytest.raises(FormatError, match=problem):
        load(pod(resources=resources))


def test_unknown_fields_warn_and_are_ignored():
    m = load(pod(extra="frobnicate: true"))
    assert len(m.jobs) == 1
    assert any("spec.frobnicate" in w and "unknown field" in w for w in m.warnings)


def test_requests_sum_over_containers_and_init_containers_take_the_max():
    m = load("""
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  initContainers: [{name: init, image: i, resources: {requests: {cpu: "3", memory: 1Gi}}}]
  containers:
  - {name: a, image: i, resources: {requests: {cpu: 500m, memory: 2Gi}, limits: {nvidia.com/gpu: 1}}}
  - {name: b, image: i, resources: {requests: {cpu: "1", memory: 512Mi}, limits: {memory: 1Gi}}}
""")
    (job,) = m.jobs
    assert (job.task.gpus, job.task.cpu_milli, job.task.mem_mib) == (1, 3000, 2560)


PRIORITY = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: %s}
value: %d
globalDefault: %s
preemptionPolicy: %s
---"""


def test_priority_classes_give_values_defaults_and_preemption_policy():
    text = (PRIORITY % ("batch", 100, "true", "PreemptLowerPriority")
            + PRIORITY % ("urgent-polite", 5000, "false", "Never")
            + pod("plain") + "---" + pod("polite", extra="priorityClassName: urgent-polite")
            + "---" + pod("sys", extra="priorityClassName: system-cluster-critical"))
    jobs = {j.id: j for j in load(text).jobs}
    assert (jobs["team-a/plain"].priority, jobs["team-a/plain"].priority_class) == (100, "batch")
    assert (jobs["team-a/polite"].priority, jobs["team-a/polite"].preemption_policy) == (5000, "Never")
    assert jobs["team-a/sys"].priority == 2_000_000_000


@pytest.mark.parametrize(("text", "problem"), [
    (PRIORITY % ("a", 1, "true", "Never") + PRIORITY % ("b", 2, "true", "Never"), "more than one PriorityClass"),
    (PRIORITY % ("huge", 2_000_000_000, "false", "Never"), "no greater than 1000000000"),
    (PRIORITY % ("odd", 1, "false", "Sometimes"), "PreemptLowerPriority or Never"),
])
def test_invalid_priority_classes_are_refused(text, problem):
    with pytest.raises(FormatError, match=problem):
        load(text)


GROUP = """
apiVersion: {api}
kind: PodGroup
metadata: {{name: g, namespace: team-a}}
spec: {{minMember: {min_member}, queue: research}}
---"""


@pytest.mark.parametrize(("api", "how"), [
    ("scheduling.volcano.sh/v1beta1", "annotations={scheduling.k8s.io/group-name: g}"),
    ("scheduling.volcano.sh/v1alpha1", "annotations={scheduling.k8s.io/group-name: g}"),
    ("scheduling.x-k8s.io/v1alpha1", "labels={scheduling.x-k8s.io/pod-group: g}"),
])
def test_pods_of_a_pod_group_become_one_gang(api, how):
    key, value = how.split("=", 1)
    pods = "---".join(pod(f"w{i}", **{key: value}) for i in range(4))
    (job,) = load(GROUP.format(api=api, min_member=4) + pods).jobs
    assert (job.id, job.tasks, job.gpus, job.queue) == ("team-a/g", 4, 4, "research")
    with pytest.raises(FormatError, match="minMember is 5 but only 4 pods"):
        load(GROUP.format(api=api, min_member=5) + pods)


def test_a_volcano_job_is_one_gang_of_all_its_replicas():
    m = load("""
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: train
  namespace: team-b
  annotations: {trimtab.io/duration: 2h, trimtab.io/submit-time: 10m}
spec:
  minAvailable: 3
  queue: research
  tasks:
  - name: worker
    replicas: 3
    template:
      spec:
        containers: [{name: w, image: i, resources: {limits: {nvidia.com/gpu: 2}}}]
        tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]
""")
    (job,) = m.jobs
    assert (job.id, job.tasks, job.gpus, job.queue, job.tenant) == ("team-b/train", 3, 6, "research", "team-b")
    assert (job.duration_s, job.submit_s) == (7200.0, 600.0)
    assert job.tolerations == (("dedicated", "Equal", "gpu", "NoSchedule"),)


def test_a_pod_group_below_its_pods_is_a_gang_of_min_member_and_one_job_per_further_pod():
    pods = "---".join(pod(f"w{i}", annotations="{scheduling.k8s.io/group-name: g, trimtab.io/duration: 1h}")
                      for i in range(4))
    m = load(GROUP.format(api="scheduling.volcano.sh/v1beta1", min_member=2) + pods)
    gang, *followers = m.jobs
    assert (gang.id, gang.tasks, gang.after, gang.queue) == ("team-a/g", 2, None, "research")
    assert [(j.id, j.tasks, j.after, j.queue, j.duration_s) for j in followers] == [
        ("team-a/w2", 1, "team-a/g", "research", 3600.0), ("team-a/w3", 1, "team-a/g", "research", 3600.0)]
    assert [len(m.launches[j.id].pods) for j in m.jobs] == [2, 1, 1]
    assert m.launches["team-a/w3"].pods[0].source.endswith("Pod w3")
    assert m.warnings == []


def test_a_volcano_job_below_its_replicas_follows_its_gang_with_pods_named_as_volcano_names_them():
    m = load("""
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: train, namespace: team-b}
spec:
  minAvailable: 2
  priorityClassName: system-cluster-critical
  tasks:
  - name: master
    template: {spec: {containers: [{name: m, image: i, resources: {limits: {nvidia.com/gpu: 1}}}]}}
  - replicas: 3
    template: {spec: {containers: [{name: w, image: i, resources: {limits: {nvidia.com/gpu: 1}}}]}}
""")
    assert [(j.id, j.tasks, j.after, j.priority_class) for j in m.jobs] == [
        ("team-b/train", 2, None, "system-cluster-critical"),
        ("team-b/train-default1-1", 1, "team-b/train", "system-cluster-critical"),
        ("team-b/train-default1-2", 1, "team-b/train", "system-cluster-critical")]
    assert m.warnings == []


def test_nodes_queues_and_reservations():
    m = load("""
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {nvidia.com/gpu.product: A100, trimtab.io/rack: r7}}
spec:
  taints: [{key: dedicated, value: gpu, effect: NoSchedule}]
status: {capacity: {cpu: "96", memory: 1Ti, nvidia.com/gpu: 8, nvidia.com/mig-1g.10gb: 7}}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: research}
spec: {weight: 3, capability: {nvidia.com/gpu: 16}, reclaimable: false}
---
apiVersion: trimtab.io/v1
kind: Reservation
metadata: {name: demo-day}
spec: {gpus: 8, owner: {namespace: team-a}, start: 1h, end: 3h}
""")
    (node,) = m.nodes
    assert (node.gpu_model, node.rack, node.capacity.gpus, node.capacity.mem_mib) == ("A100", "r7", 8, 1024 * 1024)
    assert node.taints[0].key == "dedicated"
    assert any("MIG" in w for w in m.warnings)
    (queue,) = m.queues
    assert (queue.weight, queue.capability_gpus, queue.reclaimable) == (3, 16, False)
    (res,) = m.reservations
    assert (res.gpus, res.tenant, res.start_s, res.end_s) == (8, "team-a", 3600.0, 10800.0)
    assert m.profile_args()["drf"] == {"weights": {"research": 3}}


def test_queue_deserved_and_guarantee_are_read_and_a_parent_is_warned_about():
    m = load("""
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: team-a}
spec: {weight: 2, deserved: {nvidia.com/gpu: 6}, guarantee: {resource: {nvidia.com/gpu: 2}}, parent: org}
""")
    (queue,) = m.queues
    assert (queue.deserved_gpus, queue.guarantee_gpus) == (6, 2)
    assert any("spec.parent" in w and "hierarchical" in w for w in m.warnings)
    assert m.profile_args()["drf"] == {"weights": {"team-a": 2}, "deserved": {"team-a": 6}}
    with pytest.raises(FormatError, match=r"spec.guarantee"):
        load("""
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: q}
spec: {guarantee: 4}
""")


# ------------------------------------------------------------------------------------------------ affinity

ANTI = ("affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
        "[{labelSelector: {matchLabels: {app: web}}, topologyKey: kubernetes.io/hostname}]}}")


def test_pod_labels_and_inter_pod_affinity_are_kept():
    (job,) = load(pod(labels="{app: web, tier: front}", extra=ANTI)).jobs
    assert job.labels == {"app": "web", "tier": "front"}
    (term,) = job.pod_affinity.required_anti
    assert (term.topology_key, term.namespaces, term.all_namespaces, term.weight) == \
        ("kubernetes.io/hostname", None, False, 0)
    assert term.selector == LabelSelector((("app", "web"),))
    assert job.pod_affinity.required == job.pod_affinity.preferred == ()
    assert not any("affinity" in w for w in load(pod(extra=ANTI)).warnings)


def test_preferred_terms_namespaces_and_selectors():
    (job,) = load(pod(labels="{app: web, rev: r2}", extra=(
        "affinity: {podAffinity: {preferredDuringSchedulingIgnoredDuringExecution: ["
        "{weight: 40, podAffinityTerm: {labelSelector: {matchExpressions: [{key: app, operator: In, values: [db]}]},"
        " namespaces: [team-b, team-c], topologyKey: topology.kubernetes.io/zone}},"
        "{weight: 5, podAffinityTerm: {labelSelector: {}, namespaceSelector: {}, topologyKey: rack}},"
        "{weight: 7, podAffinityTerm: {labelSelector: {matchLabels: {app: web}}, matchLabelKeys: [rev, absent],"
        " mismatchLabelKeys: [], topologyKey: rack}}]}}"))).jobs
    db, anything, same_rev = job.pod_affinity.preferred
    assert (db.weight, db.namespaces, db.selector.match_expressions) == (40, ("team-b", "team-c"),
                                                                         (("app", "In", ("db",)),))
    assert anything.all_namespaces and anything.selector == LabelSelector()
    assert same_rev.selector == LabelSelector((("app", "web"),), (("rev", "In", ("r2",)),)), \
        "matchLabelKeys take the pod's own value; a key the pod lacks is ignored"


def test_a_namespace_selector_is_resolved_against_the_namespaces_the_manifests_name():
    text = """
apiVersion: v1
kind: Namespace
metadata: {name: team-b, labels: {org: research}}
---""" + pod(ns="team-c") + "---" + pod(extra=(
        "affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: {}, "
        "namespaceSelector: {matchExpressions: [{key: org, operator: Exists}]}, namespaces: [team-x], "
        "topologyKey: rack}, {labelSelector: {}, namespaceSelector: {matchLabels: "
        "{kubernetes.io/metadata.name: team-c}}, topologyKey: rack}]}}"))
    m = load(text)
    job = next(j for j in m.jobs if j.pod_affinity)
    assert [t.namespaces for t in job.pod_affinity.required] == [("team-b", "team-x"), ("team-c",)]
    assert not any("Namespace" in w for w in m.warnings), "Namespace documents are read, not ignored"


def test_preferred_node_affinity_is_kept():
    (job,) = load(pod(extra=(
        "affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: ["
        "{weight: 80, preference: {matchExpressions: [{key: zone, operator: In, values: [a]}]}},"
        "{weight: 20, preference: {matchFields: [{key: metadata.name, operator: NotIn, values: [n1]}]}},"
        "{weight: 9, preference: {}}]}}"))).jobs
    assert job.node_preferences == ((80, (("zone", "In", ("a",)),)), (20, (("field:metadata.name", "NotIn",
                                                                            ("n1",)),)))


PODAFF = "affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [%s]}}"


@pytest.mark.parametrize(("extra", "field", "problem"), [
    ("affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 0, preference: {}}]}}",
     "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight", "range 1-100"),
    ("affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 3}]}}",
     "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference",
     "needs a preference"),
    ("affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 101, "
     "podAffinityTerm: {topologyKey: rack}}]}}",
     "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight", "range 1-100"),
    (PODAFF % "{labelSelector: {matchLabels: {app: db}}}",
     "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey", "is required"),
    (PODAFF % "{labelSelector: {matchExpressions: [{key: app, operator: Gt, values: ['1']}]}, topologyKey: r}",
     "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
     ".matchExpressions[0]", "operator of In, NotIn, Exists, DoesNotExist"),
    (PODAFF % "{labelSelector: {matchExpressions: [{key: app, operator: In}]}, topologyKey: r}",
     "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
     ".matchExpressions[0].values", "needs at least one value"),
    (PODAFF % "{matchLabelKeys: [app], topologyKey: r}",
     "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].matchLabelKeys",
     "cannot be set when labelSelector isn't set"),
    (PODAFF % "{labelSelector: {matchLabels: {app: x}}, matchLabelKeys: [app], topologyKey: r}",
     "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].matchLabelKeys",
     "also in labelSelector"),
    ("affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {topologyKey: r}}}",
     "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution", "must be a list"),
    ("affinity: {podAntiAffinity: [a]}", "spec.affinity.podAntiAffinity", "must be a mapping"),
])
def test_invalid_affinity_names_document_and_field(extra, field, problem):
    with pytest.raises(FormatError, match=problem) as err:
        load(pod(extra=extra))
    assert err.value.field == field and "Pod p" in str(err.value)


def test_unknown_affinity_fields_warn():
    m = load(pod(extra=PODAFF % "{labelSelector: {matchLabels: {app: db}}, topologyKey: r, frob: 1}"))
    assert any("requiredDuringSchedulingIgnoredDuringExecution[0].frob" in w and "unknown field" in w
               for w in m.warnings)


def test_a_gang_takes_its_template_labels_and_affinity():
    m = load("""
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: ps, namespace: team-b}
spec:
  tasks:
  - name: server
    replicas: 3
    template:
      metadata: {labels: {app: ps}}
      spec:
        containers: [{name: w, image: i, resources: {limits: {nvidia.com/gpu: 1}}}]
        affinity:
          podAntiAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
            - {labelSelector: {matchLabels: {app: ps}}, topologyKey: kubernetes.io/hostname}
""")
    (job,) = m.jobs
    assert job.labels == {"app": "ps"} and job.tasks == 3
    assert job.pod_affinity.required_anti[0].topology_key == "kubernetes.io/hostname"


BATCH_JOB = """
apiVersion: batch/v1
kind: Job
metadata: {{name: sweep, namespace: team-a, annotations: {{trimtab.io/duration: 2h}}}}
spec:
  parallelism: 4
  {backoff}
  template:
    spec:
      containers:
      - {{name: c, image: i, command: [python, sweep.py], args: [--lr, 0.1], workingDir: /w,
         env: [{{name: A, value: "1"}}, {{name: B, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}],
         resources: {{limits: {{nvidia.com/gpu: 1}}}}}}
"""


@pytest.mark.parametrize(("backoff", "retries"), [("", 6), ("backoffLimit: 2", 2), ("backoffLimit: 0", 0)])
def test_a_batch_job_is_a_gang_of_parallelism_pods_with_its_backoff_limit(backoff, retries):
    """A batch/v1 Job's retries are its backoffLimit, Kubernetes's default of 6 when left out."""
    m = load(BATCH_JOB.format(backoff=backoff))
    (job,) = m.jobs
    assert (job.id, job.tasks, job.gpus, job.duration_s, job.max_retries) == ("team-a/sweep", 4, 4, 7200.0, retries)
    launch = m.launches[job.id]
    (container,) = launch.pods[0].containers
    assert (launch.namespace, len(launch.pods), launch.pods[0].path) == ("team-a", 4, "spec.template.spec")
    assert container.argv == ("python", "sweep.py", "--lr", "0.1") and container.workdir == "/w"
    assert container.env == (("A", "1"), ("B", None)) and container.path == "spec.template.spec.containers[0]"


def test_a_batch_job_gang_is_what_the_job_controller_runs_at_once_and_it_can_opt_out():
    """completions below parallelism: the Job controller makes only that many pods, so the gang is that size (the
    live gang's rule, kube/owners.py). `trimtab.io/gang: "false"`: the pods are jobs of their own."""
    (job,) = load(BATCH_JOB.format(backoff="completions: 2")).jobs
    assert (job.id, job.tasks) == ("team-a/sweep", 2)
    opted_out = "trimtab.io/duration: 2h, trimtab.io/gang: 'false'"
    opted = load(BATCH_JOB.format(backoff="backoffLimit: 1").replace("trimtab.io/duration: 2h", opted_out))
    assert [(j.id, j.tasks, j.max_retries, j.duration_s) for j in opted.jobs] == [
        (f"team-a/sweep-{i}", 1, 1, 7200.0) for i in range(4)]


def test_documents_of_kinds_trimtab_does_not_read_are_ignored_whole():
    """An unread kind needs no name; it is a warning, and kept in `unknown` for strict callers."""
    m = load("apiVersion: v1\nkind: Service\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"
             "---" + pod())
    assert [e.field for e in m.unknown] == ["kind", "kind"] and len(m.jobs) == 1
    assert any("unsupported kind 'Deployment'" in w and "ignored" in w for w in m.warnings)


@pytest.mark.parametrize(("resources", "field", "problem"), [
    ("{limits: {nvidia.com/gpu: -1}}", "spec.containers[0].resources.limits.nvidia.com/gpu", "got -1"),
    ("{limits: {memory: 99999999999999999999999Ei}}", "spec.containers[0].resources.limits.memory", "out of range"),
])
def test_a_quantity_out_of_range_names_document_and_field(resources, field, problem):
    with pytest.raises(FormatError, match=problem) as err:
        load(pod(resources=resources))
    assert err.value.field == field and "Pod p" in str(err.value)


def test_an_env_entry_without_a_name_is_refused():
    with pytest.raises(FormatError, match="needs a name") as err:
        load(pod().replace("image: i", "image: i\n    env: [{value: x}]"))
    assert err.value.field == "spec.containers[0].env[0]"


def test_text_that_is_not_yaml_says_where():
    with pytest.raises(YamlSyntaxError) as err:
        load("kind: Pod\nspec: [unclosed")
    assert err.value.line == 2 and "column" in err.value.detail and "not valid YAML" in str(err.value)


@pytest.mark.parametrize(("backoff", "rule"), [
    ("", ("team-a/sweep", 6, False, True)),
    ("backoffLimit: 2", ("team-a/sweep", 2, False, True)),
    ("backoffLimitPerIndex: 1", ("team-a/sweep", 1, True, True)),
    ("podFailurePolicy: {rules: [{action: Ignore, onPodConditions: [{type: DisruptionTarget}]}]}",
     ("team-a/sweep", 6, False, False)),
    ("podFailurePolicy: {rules: [{action: Ignore, onExitCodes: {operator: In, values: [42]}},"
     " {action: FailJob, onPodConditions: [{type: DisruptionTarget, status: 'True'}]}]}",
     ("team-a/sweep", 0, False, True)),
    ("podFailurePolicy: {rules: [{action: Ignore, onPodConditions: [{type: DisruptionTarget, status: 'False'}]}]}",
     ("team-a/sweep", 6, False, True)),
])
def test_a_batch_job_says_how_its_controller_brings_evicted_pods_back(backoff, rule):
    """The Job controller's rule for evicted pods (job_backoff.py): the backoffLimit (or the per-index one) and the
    first podFailurePolicy rule on the DisruptionTarget condition; its pods share the Job's record."""
    (job,) = load(BATCH_JOB.format(backoff=backoff)).jobs
    b = job.pod_backoff
    assert (b.record, b.limit, b.per_index, b.counts) == rule
    assert [b.delay_s(n) for n in (0, 1, 2, 4, 7, 50)] == [0.0, 10.0, 20.0, 80.0, 600.0, 600.0]
    opted_out = "trimtab.io/duration: 2h, trimtab.io/gang: 'false'"
    opted = load(BATCH_JOB.format(backoff=backoff).replace("trimtab.io/duration: 2h", opted_out))
    assert {j.pod_backoff for j in opted.jobs} == {b}


def test_a_pod_failure_policy_rule_of_an_unknown_action_names_its_field():
    bad = "podFailurePolicy: {rules: [{action: Retry, onPodConditions: [{type: DisruptionTarget}]}]}"
    with pytest.raises(FormatError, match=r"spec\.podFailurePolicy\.rules\[0\]\.action.*Retry"):
        load(BATCH_JOB.format(backoff=bad))
