"""GPU pods whose CUDA is newer than the driver Google's installer DaemonSet put on a GKE node (a pool without the
cloud.google.com/gke-gpu-driver-version label, so GKE installs none itself): the repair is the installer manifest that
installs a newer driver (GoogleCloudPlatform/container-engine-accelerators
nvidia-driver-installer/cos/daemonset-preloaded-latest.yaml, ubuntu/daemonset-preloaded-R<branch>.yaml) or a pool with
gpu-driver-version=latest, not a driver package on the node. CUDA 12 needs 525.60.13 (docs.nvidia.com/deploy/
cuda-compatibility, Table 1); PyTorch's words, pytorch/pytorch c10/cuda/CUDAFunctions.cpp. Shaped after
tests/sim/heldout38 h38-10 with a crash-looping Deployment instead of a finished trial pod (finished pods are not
listed) and other versions."""

from __future__ import annotations

from doctor.small_cluster import diagnosed
from doctor.test_unallocated_gpu_pods import _logs, _pod

from gpuchain.doctor.model import Report

NODE = "gke-train-gpu-pool-2b4c6d8e-k3lm"
TOO_OLD = (
    "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update your GPU driver "
    "by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx\n"
)
SPEC = {
    "containers": [
        {
            "name": "main",
            "image": "pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime",
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
        }
    ]
}


def _scenario(os_image: str, labels: str = "") -> str:
    return (
        "name: t\nstack: gke\nnodes:\n"
        f"  - {{name: {NODE}, preset: t4-x4, hostDriver: '470.82.01', osImage: {os_image}, "
        f"labels: {{cloud.google.com/gke-accelerator: nvidia-tesla-t4{labels}}}}}\n"
    )


def _fix(report: Report) -> str:
    return next(f.fix for f in report.findings if f.id == "workload.cuda-unusable")


def _case(os_image: str, labels: str = "") -> Report:
    """The trainer crash-looping on the node; without ``labels`` the pool is one GKE installs no driver on (the
    simulated GKE node's gke-gpu-driver-version label removed, as h38-10's node edit does)."""
    unlabel = {"do": "node", "node": NODE, "labels": {"cloud.google.com/gke-gpu-driver-version": None}}
    edits = [] if labels else [unlabel]
    return diagnosed(
        _scenario(os_image, labels),
        *edits,
        _pod("trainer", NODE, spec=SPEC, ready=False),
        _logs("trainer", NODE, TOO_OLD),
    )


def test_on_cos_the_installer_for_the_latest_driver_is_the_repair() -> None:
    fix = _fix(_case("Container-Optimized OS from Google"))
    assert "525.60.13 or newer" in fix
    assert "nvidia-driver-installer/cos/daemonset-preloaded-latest.yaml" in fix
    assert "gpu-driver-version=latest" in fix and "driver package" not in fix


def test_on_ubuntu_the_installers_branch_manifest_is_the_repair() -> None:
    fix = _fix(_case("Ubuntu 22.04.4 LTS"))
    assert "nvidia-driver-installer/ubuntu/daemonset-preloaded-R<branch>.yaml" in fix


def test_a_pool_whose_gke_installs_the_driver_is_upgraded_instead() -> None:
    fix = _fix(_case("Container-Optimized OS from Google", ", cloud.google.com/gke-gpu-driver-version: default"))
    assert "daemonset-preloaded" not in fix and "gcloud container clusters upgrade" in fix
