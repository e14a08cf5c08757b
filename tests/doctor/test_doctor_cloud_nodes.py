"""A managed cloud's GPU node as the simulator builds it and as the doctor recognises it:

- the simulator gives each EKS / AKS / GKE GPU node its cloud's labels (instance type, accelerator, node group),
  but a scenario's own labels win, so a rule that reads the machine type is tried on the type the report names;
- AWS's NVIDIA instance families include gr6 (L4), g7 / g7e and the hyphenated p6 families (p6-b200.48xlarge);
  a node of one is a GPU node on an image that runs no NFD (aws.amazon.com/ec2/instance-types/, accelerated
  computing);
- nodeadm, the AL2023 EKS AMIs' bootstrap, made nvidia containerd's default runtime only for a fixed list of
  instance families (awslabs/amazon-eks-ami nodeadm/internal/containerd/runtime_config.go@2ffb0d5), later wherever
  nvidia-container-runtime is installed (runtime_config_nvidia.go@ed5cea8): on an AL2023 node of another NVIDIA
  family whose plugin finds no NVML, the fix says so beside the node image's repair.
"""

from __future__ import annotations

import pytest
from doctor.small_cluster import crash_looping, diagnosed, no_gpus, plugin_pod

from gpuchain.doctor.model import Finding, Severity
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


#: k8s-device-plugin's lines where its container has no libnvidia-ml (internal/plugin/manager/factory.go@v0.16.2).
NO_NVML = (
    "I0429 08:14:02.101400       1 factory.go:104] Detected non-NVML platform: could not load NVML library: "
    "libnvidia-ml.so.1: cannot open shared object file: No such file or directory\n"
    "E0429 08:14:02.102763       1 main.go:132] error starting plugins: error creating plugin manager: unable to "
    "create plugin manager: platform detection failed\n"
)


def _eks_without_nvml(instance: str, os_image: str) -> Finding:
    scenario = (
        f"name: t\nstack: eks\nnodes:\n  - {{name: n1, osImage: {os_image}, "
        f"labels: {{node.kubernetes.io/instance-type: {instance}}}}}\n"
    )
    report = diagnosed(scenario, no_gpus("n1"), plugin_pod("n1", crash_looping("nvidia-device-plugin-ctr"), NO_NVML))
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert root.node == "n1"
    return root


def test_an_al2023_node_of_a_family_nodeadms_list_lacked_is_told_how_its_runtime_default_was_left_runc() -> None:
    root = _eks_without_nvml("gr6.4xlarge", "Amazon Linux 2023.7.20250414")
    assert "not gr6" in root.fix and 'default_runtime_name = "nvidia"' in root.fix
    for instance, os_image in (("g6.12xlarge", "Amazon Linux 2023.7.20250414"), ("gr6.4xlarge", "Amazon Linux 2")):
        assert "default_runtime_name" not in _eks_without_nvml(instance, os_image).fix
