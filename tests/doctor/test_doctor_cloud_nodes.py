"""A managed cloud's GPU node as the simulator builds it and as the doctor recognises it:

- the simulator gives each EKS / AKS / GKE GPU node its cloud's labels (instance type, accelerator, node group),
  but a scenario's own labels win, so a rule that reads the machine type is tried on the type the report names;
- AWS's NVIDIA instance families include gr6 (L4), g7 / g7e and the hyphenated p6 families (p6-b200.48xlarge);
  a node of one is a GPU node on an image that runs no NFD (aws.amazon.com/ec2/instance-types/, accelerated
  computing).
"""

from __future__ import annotations

import pytest

from gpuchain.doctor.stacks.base import is_gpu_node
from gpuchain.kube import NODE
from gpuchain.sim import build, parse_scenario


def _labels(scenario: str) -> dict[str, str]:
    (node,) = build(parse_scenario(scenario)).cluster.list(NODE)
    return dict(node["metadata"]["labels"])


@pytest.mark.parametrize(
    ("stack", "own"),
    [
        ("eks", {"node.kubernetes.io/instance-type": "gr6.4xlarge"}),
        ("aks", {"node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4"}),
        ("gke", {"cloud.google.com/gke-accelerator": "nvidia-l4", "node.kubernetes.io/instance-type": "g2-standard-8"}),
    ],
)
def test_a_scenarios_own_cloud_labels_are_kept(stack: str, own: dict[str, str]) -> None:
    inline = ", ".join(f"{k}: {v}" for k, v in own.items())
    labels = _labels(f"name: t\nstack: {stack}\nnodes:\n  - {{name: n1, labels: {{{inline}}}}}\n")
    assert {k: labels[k] for k in own} == own
    # The cloud's own labels the scenario does not set are still there.
    assert any(k.startswith(("eks.", "kubernetes.azure.com/", "cloud.google.com/gke-gpu")) for k in labels)


def test_without_labels_of_its_own_a_cloud_node_gets_its_clouds() -> None:
    assert _labels("name: t\nstack: eks\nnodes:\n  - {name: n1}\n")["node.kubernetes.io/instance-type"]


@pytest.mark.parametrize(
    ("instance", "gpu"),
    [
        ("gr6.4xlarge", True),
        ("g7e.4xlarge", True),
        ("g7.2xlarge", True),
        ("p6-b200.48xlarge", True),
        ("g6.12xlarge", True),
        ("g4ad.xlarge", False),
        ("m7i.xlarge", False),
        ("inf1.xlarge", False),
    ],
)
def test_aws_nvidia_instance_families_make_a_gpu_node(instance: str, gpu: bool) -> None:
    node = {"metadata": {"name": "n", "labels": {"node.kubernetes.io/instance-type": instance}}}
    assert is_gpu_node(node) is gpu
