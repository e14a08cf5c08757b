"""The repair of GPU pods whose CUDA does not start on the driver under them, chosen by what CUDA said (catalog.yaml's
cuda.* entries, the CUDA runtime's cudaError_t strings) and by who brings the node's driver.

Facts, from their sources:

- CUDA minor version compatibility: from CUDA 11 on, an application built with any release of one CUDA major runs on a
  driver at least the major's floor: 11.x >= 450.80.02, 12.x >= 525.60.13, 13.x >= 580 (docs.nvidia.com/deploy/
  cuda-compatibility minor-version-compatibility.html, Table 1, and the CUDA Toolkit release notes' minimum driver
  table); before CUDA 11 each release needs the driver it shipped with (the release notes' toolkit driver table:
  10.2 >= 440.33, 10.1 >= 418.39, 10.0 >= 410.48, 9.2 >= 396.26, 9.1 >= 390.46, 9.0 >= 384.81). A driver under the
  floor answers cudaErrorInsufficientDriver (35, "CUDA driver version is insufficient for CUDA runtime version").
- NVIDIA's CUDA images are tagged ``<major>.<minor>.<patch>-<flavour>-<os>`` (nvidia/cuda, nvcr.io/nvidia/cuda);
  PyTorch's name theirs ``...-cuda<major>.<minor>-...`` and its wheels' builds ``cu<major><minor>``.
- GFD labels the driver's version (nvidia.com/cuda.driver-version.full, else nvidia.com/cuda.driver.major/.minor/.rev).
- Bottlerocket's NVIDIA variants build the driver into the image (bottlerocket-os/bottlerocket packages/kmod-*-nvidia):
  the 5.15-kernel variants (aws-k8s-1.24 to 1.27) shipped 515.86.01 until v1.17.0 moved kmod-5.15-nvidia to R535
  (commit e65d466e, bottlerocket-os/bottlerocket#2286 for the 515 sources); the 6.1-kernel variants (aws-k8s-1.28 and
  later) ship R535 from their first release (kmod-6.1-nvidia 535.54.03, v1.15.0); Fabric Manager runs on NVSwitch
  instances (p4d, p5) from v1.20.0 ("Add Fabric Manager support", bottlerocket-os/bottlerocket#3873, CHANGELOG.md).
"""

from __future__ import annotations

import re

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.fabric import fabric_repair
from gpuchain.doctor.links.unprivileged_envvar import BOTTLEROCKET_NVIDIA
from gpuchain.doctor.node import node_info
from gpuchain.doctor.node_image import EKS_POOL, GKE_ACCELERATOR, GKE_DRIVER, NodeImage
from gpuchain.kube.objects import Obj

SYSTEM_NOT_READY = "cuda.system-not-ready"
INSUFFICIENT = (
    "cuda.insufficient-driver",
    "pytorch.driver-too-old",
    "cuda.compat-not-supported",
    "ffmpeg.nvenc-driver-too-old",
)
#: The driver floor of each CUDA major under minor version compatibility (CUDA 11 on).
MAJOR_FLOOR = {13: "580", 12: "525.60.13", 11: "450.80.02"}
#: Before CUDA 11: the driver each release shipped with.
RELEASE_FLOOR = {
    (10, 2): "440.33",
    (10, 1): "418.39",
    (10, 0): "410.48",
    (9, 2): "396.26",
    (9, 1): "390.46",
    (9, 0): "384.81",
}
#: The CUDA release in an image reference: NVIDIA's cuda tags, PyTorch's "cuda12.1" and "cu121".
IMAGE_CUDA = (
    re.compile(r"/cuda:(\d+)\.(\d+)"),
    re.compile(r"[:\-_]cuda-?(\d+)\.(\d+)"),
    re.compile(r"[:\-_.]cu(\d{2,3}?)(\d)(?![\d.])"),
)
#: FFmpeg's words for the least driver its NVENC API needs (libavcodec/nvenc.c nvenc_print_driver_requirement).
NVENC_FLOOR = re.compile(r"minimum required Nvidia driver for nvenc is (\d+(?:\.\d+)*) or newer")
#: PyTorch's words for the driver's cudaDriverGetVersion answer (c10/cuda/CUDAFunctions.cpp).
DRIVER_API = re.compile(r"found version (\d{4,6})\b")
GFD_FULL = "nvidia.com/cuda.driver-version.full"
GFD_PARTS = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")
#: The first Bottlerocket release whose 5.15-kernel NVIDIA variants ship R535, and the first that runs Fabric Manager.
BR_R535_ON_515 = (1, 17, 0)
BR_FABRIC_MANAGER = (1, 20, 0)
#: The newest Bottlerocket release whose driver branch gpuchain read (bottlerocket-os/bottlerocket
#: CHANGELOG.md@v1.26.1): a later one may ship a newer branch, so its driver is not guessed.
BR_READ_UNTIL = (1, 26, 1)


def _version(text: str) -> tuple[int, ...]:
    """A driver version's numbers, to compare ("525.60.13" -> (525, 60, 13))."""
    return tuple(int(x) for x in re.findall(r"\d+", text))


def image_cuda(image: str) -> tuple[int, int] | None:
    """The CUDA release (major, minor) an image reference names, None where its name does not say."""
    for pattern in IMAGE_CUDA:
        found = pattern.search(image)
        if found is not None:
            return int(found.group(1)), int(found.group(2))
    return None


def driver_floor(cuda: tuple[int, int]) -> str | None:
    """The oldest driver that runs an application built with CUDA ``cuda`` (None: a release gpuchain has no row for)."""
    return MAJOR_FLOOR.get(cuda[0]) or RELEASE_FLOOR.get(cuda)


def _bottlerocket(node: Obj) -> tuple[tuple[int, int, int], str] | None:
    """The node's Bottlerocket release and NVIDIA variant, from its osImage (None: not a Bottlerocket NVIDIA node)."""
    image = str(node_info(node).get("osImage", ""))
    found = BOTTLEROCKET_NVIDIA.match(image)
    if found is None:
        return None
    major, minor, patch = found.groups()
    return (int(major), int(minor), int(patch)), image[image.index("(") + 1 : image.rindex(")")]


def node_driver(node: Obj, labels: dict[str, str]) -> tuple[str, str] | None:
    """The driver version (or branch) the node runs and what says so: GFD's labels, else a Bottlerocket NVIDIA
    variant's release and kernel."""
    if labels.get(GFD_FULL):
        return labels[GFD_FULL], f"label {GFD_FULL}"
    if labels.get(GFD_PARTS[0]):
        parts = [labels[k] for k in GFD_PARTS if labels.get(k)]
        return ".".join(parts), f"label {GFD_PARTS[0]}"
    br = _bottlerocket(node)
    if br is None:
        return None
    release, variant = br
    if release > BR_READ_UNTIL:
        return None
    kernel = str(node_info(node).get("kernelVersion", ""))
    if kernel.startswith("5.15.") and release < BR_R535_ON_515:
        branch = "515"
    elif kernel.startswith(("5.15.", "6.")):
        branch = "535"
    else:
        return None
    return branch, f"Bottlerocket {'.'.join(map(str, release))} {variant} on kernel {kernel} (kmod-nvidia R{branch})"


def _pod_cuda(pods: list[Obj]) -> tuple[str, tuple[int, int]] | None:
    """The first of the pods' images that names its CUDA release, and that release."""
    for pod in pods:
        for c in (pod.get("spec") or {}).get("containers") or []:
            image = str(c.get("image") or "")
            cuda = image_cuda(image)
            if cuda is not None:
                return image, cuda
    return None


def _bottlerocket_update(node: Obj, first: tuple[int, int, int], brings: str) -> str | None:
    """The node group update to a Bottlerocket release at least ``first`` ("" where the node already runs one)."""
    br = _bottlerocket(node)
    if br is None:
        return None
    release, _ = br
    if release >= first:
        return ""
    group = (node.get("metadata") or {}).get("labels", {}).get(EKS_POOL) or "<node group>"
    return (
        f"update node group {group} to Bottlerocket {'.'.join(map(str, first))} or later, {brings} (aws eks "
        f"update-nodegroup-version --cluster-name <cluster> --nodegroup-name {group}, which replaces its nodes)"
    )


def _gke_installer(node: Obj, floor: str) -> str:
    """On a GKE node whose driver Google's installer DaemonSet puts there (no gke-gpu-driver-version label): the
    installer manifest that installs a newer driver (GoogleCloudPlatform/container-engine-accelerators
    nvidia-driver-installer/cos/daemonset-preloaded-latest.yaml, the COS image's latest driver instead of its default;
    ubuntu/daemonset-preloaded-R<branch>.yaml per driver branch), or a pool whose GKE installs the latest driver."""
    cos = str(node_info(node).get("osImage", "")).startswith("Container-Optimized OS")
    manifest = "cos/daemonset-preloaded-latest.yaml" if cos else "ubuntu/daemonset-preloaded-R<branch>.yaml"
    return (
        f"install a driver {floor} or newer with Google's installer: kubectl apply -f https://raw.githubusercontent.com/"
        f"GoogleCloudPlatform/container-engine-accelerators/master/nvidia-driver-installer/{manifest} (it replaces "
        "the nvidia-driver-installer DaemonSet; then recreate the node or restart its installer pod), or move the "
        f"GPU pods to a node pool created with --accelerator ...,gpu-driver-version=latest (label {GKE_DRIVER}=latest)"
    )


def _driver_owner(ctx: Context, image: NodeImage | None, floor: str, node: Obj) -> str:
    """Who upgrades the node's driver to at least ``floor``, by who brings it."""
    if image is not None and image.ships_driver and image.upgrade:
        return f"upgrade the node pool's node image to one whose driver is {floor} or newer: {image.upgrade}"
    labels = (node.get("metadata") or {}).get("labels") or {}
    if GKE_ACCELERATOR in labels and GKE_DRIVER not in labels:  # a GKE GPU node GKE installs no driver on
        return _gke_installer(node, floor)
    if ctx.policy_obj is not None:
        return f"set spec.driver.version in {ctx.policy_ref} to a driver {floor} or newer"
    return f"upgrade the node's NVIDIA driver package to {floor} or newer, then reboot"


def _driver_cuda(line: str) -> str:
    """The newest CUDA the driver runs, where the line quotes cudaDriverGetVersion (PyTorch's "found version 11040":
    1000 * major + 10 * minor, CUDA Runtime API cudaDriverGetVersion)."""
    found = DRIVER_API.search(line)
    if found is None:
        return ""
    number = int(found.group(1))
    return f"; the driver runs CUDA {number // 1000}.{number % 1000 // 10} at most (it answers {number})"


def _answered_floor(line: str) -> tuple[str, str, int] | None:
    """Where no image names its CUDA release: the driver floor the driver's own answer implies (PyTorch's "found
    version 11040"), the words that say why, and the CUDA major the driver runs. Under minor version compatibility
    any release of a CUDA major from 11 on runs on that major's floor, so a runtime that finds an 11.x driver too old
    is of a later major, and the next major's floor is the least that repairs. None where the line quotes no answer,
    or it is below CUDA 11."""
    found = DRIVER_API.search(line)
    if found is None:
        return None
    number = int(found.group(1))
    major = number // 1000
    floor = MAJOR_FLOOR.get(major + 1) if major >= 11 else None
    if floor is None:
        return None
    words = (
        f"the node's driver runs CUDA {major}.{number % 1000 // 10} at most (it answers {number}) and any CUDA "
        f"{major}.x runs on it (minor version compatibility), so the pods' CUDA is {major + 1}.x or later, which "
        f"needs an NVIDIA driver {floor} or newer"
    )
    return floor, words, major


def insufficient_repair(
    ctx: Context, view: NodeView, *, pods: list[Obj], image: NodeImage | None, line: str, text: str = ""
) -> str | None:
    """The driver floor the pods need: the one FFmpeg names for its NVENC API (in ``text``, all the pod said), else
    the one the pods' image's CUDA needs, else the one the driver's own answer implies; and who raises the node's
    driver to it. None where none says or the node's driver is known to meet it."""
    have = node_driver(view.node, view.labels)
    older = f"; the node's driver is {have[0]} ({have[1]})" if have is not None else ""
    nvenc = NVENC_FLOOR.search(text) if "nvenc" in line else None
    found = _pod_cuda(pods)
    if nvenc is not None:
        floor = nvenc.group(1)
        need = f"the pods' FFmpeg needs an NVIDIA driver {floor} or newer for its NVENC API ({line}){older}"
        older_cuda = "an older NVENC API (an FFmpeg built with older nv-codec-headers)"
    elif found is not None:
        ref, cuda = found
        floor = driver_floor(cuda)
        if floor is None:
            return None
        need = (
            f"the pods' image {ref} carries CUDA {cuda[0]}.{cuda[1]}, which needs an NVIDIA driver {floor} or newer"
            f"{older}{_driver_cuda(line)}"
        )
        older_cuda = f"CUDA {cuda[0] - 1}.x" if cuda[0] > 11 else "the CUDA release the driver runs"
    else:
        answered = _answered_floor(line)
        if answered is None:
            return None
        floor, need, major = answered
        need += older
        older_cuda = f"CUDA {major}.x"
    if have is not None and _version(have[0]) >= _version(floor):
        return None  # the driver meets the image's floor: the entry's own words stand
    update = _bottlerocket_update(
        view.node,
        BR_R535_ON_515,
        "whose NVIDIA variants ship the R535 driver on the 5.15 kernel too (the 6.1-kernel variants, "
        "aws-k8s-1.28-nvidia and later, ship R535 as well)",
    )
    work = update or _driver_owner(ctx, image, floor, view.node)
    return f"{need}: {work}; or run the workload from an image built for {older_cuda}"


def fabric_repair_words(ctx: Context, view: NodeView, image: NodeImage | None) -> tuple[str, str] | None:
    """CUDA's "system not yet initialized" on a node: Fabric Manager is not up. What the driver container's log says
    of it first (`fabric_repair`), else the release of a node image that runs it, else the entry's own repair.
    Returns (cause addendum, repair) or None where the entry's words stand."""
    known = fabric_repair(ctx, view)
    if known is not None:
        return known.cause, known.fix.removeprefix("# ")
    update = _bottlerocket_update(
        view.node,
        BR_FABRIC_MANAGER,
        "whose NVIDIA variants run the NVIDIA Fabric Manager on NVSwitch instances (bottlerocket-os/bottlerocket#3873)",
    )
    if update:
        return "this Bottlerocket release runs no Fabric Manager", update
    if update == "" or (image is not None and image.ships_driver):
        upgrade = f"; if it does not start, {image.upgrade}" if image is not None and image.upgrade else ""
        shell = "from the node's admin container (sudo sheltie) " if update == "" else ""
        return (
            "the node image's Fabric Manager is not running",
            f"start the node image's NVIDIA Fabric Manager {shell}(systemctl restart nvidia-fabricmanager.service) "
            f"and check it runs the driver's exact version{upgrade}",
        )
    return None
