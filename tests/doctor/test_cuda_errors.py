"""GPU pods that got their GPUs and ran, but whose CUDA does not start: the CUDA runtime's error names the driver
link and the repair (links/cuda_repair.py), on nodes whose plugin is a DaemonSet's or the node image's own service.

Upstream facts each test stands on:

- The CUDA runtime's cudaError_t codes and their cudaGetErrorString texts (driver_types.h, CUDA Runtime API):
  cudaErrorInsufficientDriver 35 "CUDA driver version is insufficient for CUDA runtime version",
  cudaErrorSystemNotReady 802 "system not yet initialized", cudaErrorSystemDriverMismatch 803 "system has unsupported
  display driver / cuda driver combination", cudaErrorCompatNotSupportedOnDevice 804; the driver API's CUresult names
  (CUDA_ERROR_SYSTEM_NOT_READY, cuda.h); as NVIDIA/cuda-samples Samples/0_Introduction/vectorAdd/vectorAdd.cu@v12.8
  prints them ("Failed to allocate device vector A (error code %s)!") and PyTorch wraps them
  (c10/cuda/CUDAFunctions.cpp: "Unexpected error from cudaGetDeviceCount() ... Error %d: %s").
- CUDA minor version compatibility (docs.nvidia.com/deploy/cuda-compatibility, Table 1): 12.x needs >= 525.60.13,
  11.x >= 450.80.02, 13.x >= 580.
- bottlerocket-os/bottlerocket CHANGELOG.md and packages: kmod-5.15-nvidia 515.86.01 until v1.17.0 (R535, e65d466e;
  the 515 sources: bottlerocket-os/bottlerocket#2286), Fabric Manager from v1.20.0 (bottlerocket-os/bottlerocket#3873);
  the NVIDIA variants run the device plugin as a host service (no DaemonSet).
- Fabric Manager's systemd unit nvidia-fabricmanager.service (NVIDIA Fabric Manager user guide).
"""

from __future__ import annotations

from typing import Any

import pytest
from doctor.small_cluster import diagnosed
from doctor.test_doctor_user_pods import failing_gpu_pod

from gpuchain.doctor import Severity
from gpuchain.doctor.links.cuda_repair import driver_floor, image_cuda
from gpuchain.doctor.model import Report
from gpuchain.kube import POD
from gpuchain.sim.build import SimCluster

FOUND = "workload.cuda-unusable"


def bottlerocket(name: str, release: str, variant: str, kernel: str, *, preset: str, instance: str, group: str) -> str:
    """An EKS cluster of one Bottlerocket NVIDIA node running two CUDA pods (the scenario's workload)."""
    return (
        f"name: t\nstack: eks\nnodes:\n  - {{name: {name}, preset: {preset}, osImage: 'Bottlerocket OS {release} "
        f"({variant})', kernel: {kernel}, labels: {{node.kubernetes.io/instance-type: {instance}, "
        f"eks.amazonaws.com/nodegroup: {group}}}}}\n"
        f"workloads:\n  - {{name: job, namespace: ml, count: 2, gpus: 1, node: {name}}}\n"
    )


#: Bottlerocket runs the plugin as a host service: the simulator's DaemonSet goes.
NO_PLUGIN_DS = {"do": "delete-daemonset", "namespace": "kube-system", "name": "nvidia-device-plugin-daemonset"}


def crashing(node: str, said: str, image: str = "") -> list[Any]:
    """Edits: the workload's first pod on ``node`` crash-looping with ``said`` in its log (its image ``image``)."""
    pod = {
        "do": "pod",
        "daemonset": "job",
        "namespace": "ml",
        "node": node,
        "containers": [
            {
                "name": "job",
                "ready": False,
                "restarts": 4,
                "state": {"waiting": "CrashLoopBackOff"},
                "last": {"terminated": "Error", "exitCode": 1},
            }
        ],
        "logs": {"job": said},
    }

    return [pod, *([retag_all(image)] if image else [])]


def _only(report: Report) -> Any:
    (found,) = [f for f in report.findings if f.id == FOUND]
    return found


# -- error 802: Fabric Manager ---------------------------------------------------------------------------------------

P5 = bottlerocket(
    "ip-172-31-9-14.us-west-2.compute.internal",
    "1.19.5",
    "aws-k8s-1.28-nvidia",
    "6.1.84",
    preset="a100-40gb-x8",
    instance="p5.48xlarge",
    group="h100-pool",
)
P5_NODE = "ip-172-31-9-14.us-west-2.compute.internal"
#: The driver API's name, as a program built on it (not the runtime's string) prints it.
DRIVER_API_802 = "cuInit failed: CUDA_ERROR_SYSTEM_NOT_READY"


def test_802_on_a_bottlerocket_release_without_fabric_manager_is_the_release_that_runs_it() -> None:
    report = diagnosed(P5, NO_PLUGIN_DS, *crashing(P5_NODE, DRIVER_API_802))
    found = _only(report)
    assert (found.link, found.node, found.root, found.severity) == ("driver", P5_NODE, True, Severity.ERROR)
    assert "catalog: cuda.system-not-ready" in " ".join(found.evidence)
    assert "update node group h100-pool to Bottlerocket 1.20.0 or later" in found.fix
    assert "Fabric Manager" in found.fix and "bottlerocket-os/bottlerocket#3873" in found.fix
    assert "--nodegroup-name h100-pool" in found.fix


def test_802_on_a_bottlerocket_release_that_ships_fabric_manager_restarts_its_service() -> None:
    newer = P5.replace("1.19.5", "1.21.1")
    said = "Failed to allocate device vector A (error code system not yet initialized)!"
    found = _only(diagnosed(newer, NO_PLUGIN_DS, *crashing(P5_NODE, said)))
    assert "(sudo sheltie) (systemctl restart nvidia-fabricmanager.service)" in found.fix and "1.20.0" not in found.fix
    assert "aws eks update-nodegroup-version" in found.fix  # the node image's newer release if it does not start


def test_802_on_an_al2023_accelerated_ami_restarts_its_fabric_manager_then_the_node_groups_ami() -> None:
    al2023 = (
        "name: t\nstack: eks\nnodes:\n  - {name: a1, preset: a100-40gb-x8, osImage: Amazon Linux 2023.7.20250527, "
        "labels: {node.kubernetes.io/instance-type: p4d.24xlarge, eks.amazonaws.com/nodegroup: p4}}\n"
        "workloads:\n  - {name: job, namespace: ml, count: 2, gpus: 1, node: a1}\n"
    )
    found = _only(diagnosed(al2023, *crashing("a1", DRIVER_API_802)))
    assert (found.link, found.node) == ("driver", "a1")
    assert "(systemctl restart nvidia-fabricmanager.service)" in found.fix and "sheltie" not in found.fix
    assert "aws eks update-nodegroup-version --cluster-name <cluster> --nodegroup-name p4" in found.fix


def test_802_under_a_host_driver_installs_fabric_manager_of_the_drivers_version() -> None:
    found = _only(diagnosed(STANDALONE, failing_gpu_pod(said="RuntimeError: CUDA error: system not yet initialized")))
    assert "nvidia-fabricmanager-<driver branch>" in found.fix and "Bottlerocket" not in found.fix


def test_a_bottlerocket_nvswitch_node_whose_pods_run_is_quiet() -> None:
    report = diagnosed(P5, NO_PLUGIN_DS)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


# -- error 35: a driver older than the image's CUDA ------------------------------------------------------------------

G5 = bottlerocket(
    "ip-10-1-2-3.eu-west-1.compute.internal",
    "1.15.1",
    "aws-k8s-1.27-nvidia",
    "5.15.128",
    preset="t4-x4",
    instance="g5.2xlarge",
    group="infer",
)
G5_NODE = "ip-10-1-2-3.eu-west-1.compute.internal"
INSUFFICIENT = "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version"


def test_a_cuda_12_image_on_bottlerockets_515_driver_names_the_floor_and_the_release_with_r535() -> None:
    image = "pytorch/pytorch:2.1.0-cuda12.1-cudnn8-runtime"
    found = _only(diagnosed(G5, NO_PLUGIN_DS, *crashing(G5_NODE, INSUFFICIENT, image)))
    assert (found.link, found.node, found.root) == ("driver", G5_NODE, True)
    assert f"the pods' image {image} carries CUDA 12.1, which needs an NVIDIA driver 525.60.13 or newer" in found.fix
    assert "the node's driver is 515 (Bottlerocket 1.15.1 aws-k8s-1.27-nvidia on kernel 5.15.128" in found.fix
    assert "update node group infer to Bottlerocket 1.17.0 or later" in found.fix
    assert "or run the workload from an image built for CUDA 11.x" in found.fix


def test_a_cuda_11_image_on_the_515_driver_is_not_told_to_upgrade_to_a_floor_it_meets() -> None:
    found = _only(diagnosed(G5, NO_PLUGIN_DS, *crashing(G5_NODE, INSUFFICIENT, "nvidia/cuda:11.8.0-base-ubuntu22.04")))
    assert "525.60.13" not in found.fix and "needs an NVIDIA driver" not in found.fix


def test_a_bottlerocket_release_newer_than_gpuchain_read_gets_no_guessed_driver_but_the_node_groups_update() -> None:
    later = G5.replace("1.15.1", "1.40.0").replace("aws-k8s-1.27-nvidia", "aws-k8s-1.33-nvidia")
    later = later.replace("5.15.128", "6.12.40")
    image = "nvidia/cuda:13.0.1-base-ubuntu24.04"
    found = _only(diagnosed(later, NO_PLUGIN_DS, *crashing(G5_NODE, INSUFFICIENT, image)))
    assert "needs an NVIDIA driver 580 or newer" in found.fix and "the node's driver is" not in found.fix
    assert "aws eks update-nodegroup-version --cluster-name <cluster> --nodegroup-name infer" in found.fix
    assert "Bottlerocket 1.17.0" not in found.fix


def test_a_cuda_13_image_under_the_operator_sets_the_policys_driver_version() -> None:
    operator = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1, preset: t4-x4}\n"
    found = _only(
        diagnosed(
            operator,
            failing_gpu_pod(said=INSUFFICIENT, runtime_class="nvidia"),
            retag_all("nvcr.io/nvidia/cuda:13.0.1-runtime-ubuntu24.04"),
        )
    )
    assert "carries CUDA 13.0, which needs an NVIDIA driver 580 or newer" in found.fix
    assert "the node's driver is 570.124.06 (label nvidia.com/cuda.driver-version.full)" in found.fix
    assert "set spec.driver.version in clusterpolicies.nvidia.com cluster-policy to a driver 580 or newer" in found.fix


def test_pytorchs_driver_version_is_quoted_beside_the_floor() -> None:
    said = "RuntimeError: The NVIDIA driver on your system is too old (found version 11040)."
    found = _only(diagnosed(STANDALONE, failing_gpu_pod(said=said)))
    assert "the driver runs CUDA 11.4 at most (it answers 11040)" in found.fix
    assert "upgrade the node's NVIDIA driver package to 525.60.13 or newer" in found.fix


# -- error 803 --------------------------------------------------------------------------------------------------------

STANDALONE = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, hostDriver: 550.54.15}\n"


def test_803_is_the_driver_libraries_against_the_loaded_module() -> None:
    said = "CUDA error: system has unsupported display driver / cuda driver combination"
    found = _only(diagnosed(STANDALONE, failing_gpu_pod(said=said)))
    assert "catalog: cuda.system-driver-mismatch" in " ".join(found.evidence)
    assert "reboot the node" in found.fix and "/usr/local/cuda/compat" in found.fix


def retag_all(image: str) -> Any:
    """An edit: every pod of namespace ml runs ``image``."""

    def edit(sim: SimCluster) -> None:
        for p in sim.cluster.list(POD, namespace="ml"):
            spec = p["spec"]
            spec["containers"][0]["image"] = image
            sim.cluster.patch(POD, name=p["metadata"]["name"], namespace="ml", patch={"spec": spec})

    return edit


# -- the data -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "cuda"),
    [
        ("nvcr.io/nvidia/cuda:12.6.0-base-ubuntu22.04", (12, 6)),
        ("nvidia/cuda:11.8.0-runtime-ubuntu22.04", (11, 8)),
        ("pytorch/pytorch:2.1.0-cuda12.1-cudnn8-runtime", (12, 1)),
        ("ghcr.io/acme/infer:v3-cu121", (12, 1)),
        ("ghcr.io/acme/train:2.4.0.cu118", (11, 8)),
        ("public.ecr.aws/example/tts-serve:2.1", None),
        ("nvcr.io/nvidia/pytorch:24.05-py3", None),
    ],
)
def test_the_cuda_release_an_image_names(image: str, cuda: tuple[int, int] | None) -> None:
    assert image_cuda(image) == cuda


def test_driver_floors_follow_minor_version_compatibility_and_the_release_table_before_it() -> None:
    assert [driver_floor(c) for c in ((12, 0), (12, 9), (11, 2), (13, 1), (10, 2), (8, 0))] == [
        "525.60.13",
        "525.60.13",
        "450.80.02",
        "580",
        "440.33",
        None,
    ]
