"""A driver image built by the cluster's owners for an OS NVIDIA publishes none for, and how the GPU Operator is
pointed at it.

Facts, from their sources:

- the operator pulls ``<spec.driver.repository>/<spec.driver.image>:<spec.driver.version>-<os tag>``, the OS tag
  being the node's os-release ID and VERSION_ID (NVIDIA/gpu-operator controllers/object_controls.go@a22dbf6
  resolveDriverTag, controllers/state_manager.go getGPUNodeOSInfo), so a self-built image is tagged
  ``<driver version>-<os tag>`` and the policy's repository (and image) name where it is;
- NVIDIA's guide for a custom driver image: rebuild the driver container from the Dockerfiles of
  NVIDIA/gpu-driver-container with ``--build-arg DRIVER_VERSION``, tag it ``driver:<version>-<os>``, and set
  ``driver.repository`` and ``driver.version`` (NVIDIA/cloud-native-docs gpu-operator/getting-started.rst@52dcb7b8,
  "Running a Custom Driver Image");
- gpu-driver-container's Dockerfiles are per OS family: ubuntu22.04, ubuntu24.04, ubuntu26.04, rhel8, rhel9, rhel10
  (NVIDIA/gpu-driver-container@06a208c; rhel9 also serves RHCOS and Rocky Linux), so a node of the Enterprise Linux
  family (its kernel's release says ``.el<N>``: CentOS Stream, CentOS Stream CoreOS, AlmaLinux ...) builds from
  ``rhel<N>``;
- an image-based OS (the CoreOS family, Flatcar, Talos, Bottlerocket, COS) has no package manager on the host to
  install a driver from; the driver comes in a container (or the node image's own build), so the host-driver way out
  (driver.enabled=false) is not one there.
"""

from __future__ import annotations

import re

from gpuchain.doctor.node import node_info
from gpuchain.doctor.node_image import os_release
from gpuchain.kube.objects import Obj

#: The os-release IDs of image-based OSes (no package manager on the host).
IMAGE_BASED = ("rhcos", "scos", "fcos", "flatcar", "talos", "bottlerocket", "cos")
#: An Enterprise Linux kernel's release: 5.14.0-559.el9.x86_64, 4.18.0-553.el8_10.x86_64.
EL_KERNEL = re.compile(r"\.el(\d+)")
#: gpu-driver-container's Dockerfile directories for the Enterprise Linux majors (NVIDIA/gpu-driver-container@06a208c).
EL_DOCKERFILES = ("8", "9", "10")


def image_based(node: Obj) -> bool:
    """Whether ``node`` runs an image-based OS: its os-release ID, else "CoreOS" / "Container Linux" in its
    osImage."""
    os_id, _ = os_release(node)
    image = node_info(node).get("osImage", "")
    return os_id in IMAGE_BASED or "CoreOS" in image or "Container Linux" in image or "Talos" in image


def dockerfile(kernel: str) -> str:
    """The gpu-driver-container directory to build from for a node with ``kernel`` ("" where none is nearest)."""
    found = EL_KERNEL.search(kernel)
    return f"rhel{found.group(1)}" if found and found.group(1) in EL_DOCKERFILES else ""


def build_own(*, policy: str, render: str, version: str, dist: str, kernel: str) -> str:
    """The steps that give the driver DaemonSet an image for OS tag ``dist``: build driver ``version`` from
    NVIDIA/gpu-driver-container, tag it as the operator will ask for it, push it, and point ``policy`` at it
    (``render``: the stack's command for that patch, with the registry left to fill in)."""
    near = dockerfile(kernel)
    base = (
        f"its {near} Dockerfile (the node's kernel {kernel} is an Enterprise Linux {near[4:]} kernel)"
        if near
        else "the Dockerfile of the supported OS nearest to the node's"
    )
    return (
        f"build a driver image for {dist} yourself from NVIDIA/gpu-driver-container, {base}, with "
        f"--build-arg DRIVER_VERSION={version} and the packages of the node's kernel reachable from the build; tag "
        f"it <your registry>/driver:{version}-{dist} (the operator appends the node's OS tag to spec.driver.version), "
        f"push it to that registry the nodes pull from, and set spec.driver.repository of {policy} to it (with "
        f"spec.driver.image and spec.driver.version naming the rest): {render}"
    )
