"""The `trimtab.io/gpus` annotation: an elastic gang in manifests (formats/k8s/workloads.py)."""

from __future__ import annotations

import pytest

from trimtab.formats import FormatError
from trimtab.formats.k8s import load_manifests
from trimtab.model import Elastic

VCJOB = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: train
  namespace: team-b
  annotations: {{trimtab.io/duration: 2h, trimtab.io/gpus: "{gpus}"}}
spec:
  tasks:
  - name: worker
    replicas: 2
    template:
      spec:
        containers: [{{name: w, image: i, resources: {{limits: {{nvidia.com/gpu: 2}}}}}}]
"""


def test_the_annotation_makes_the_gang_elastic_in_whole_pods() -> None:
    (job,) = load_manifests(VCJOB.format(gpus="2-8"), text=True).jobs
    assert (job.tasks, job.gpus, job.elastic) == (2, 4, Elastic(1, 4))


@pytest.mark.parametrize("gpus", ["3-8", "6-8", "8-2", "lots"])
def test_a_range_that_cannot_hold_the_gang_is_refused(gpus: str) -> None:
    with pytest.raises(FormatError, match=r"metadata.annotations\[trimtab.io/gpus\]"):
        load_manifests(VCJOB.format(gpus=gpus), text=True)
