"""Alibaba Cloud ACK's shared GPU scheduling: the ack-ai-installer component on the node's own driver.

ack-ai-installer (alibabacloud.com/help/en/ack/cloud-native-ai-suite/product-overview/ack-ai-installer) installs two
DaemonSets on the GPU nodes labelled for sharing: ``gpushare-device-plugin-ds`` in ``kube-system`` (container
``gpushare``, labels ``app: gpushare``, ``component: gpushare-device-plugin``, image ``.../acs/k8s-gpushare-plugin``;
AliyunContainerService/gpushare-device-plugin device-plugin-ds.yaml), which announces ``aliyun.com/gpu-mem`` (GiB of
GPU memory) and ``aliyun.com/gpu-count`` instead of ``nvidia.com/gpu`` and writes the GPU it assigned into each pod's
``ALIYUN_COM_GPU_MEM_IDX`` annotation (pkg/gpu/nvidia/const.go); and ``cgpu-installer``, which loads cGPU, the kernel
module that isolates each pod's share of GPU memory, its image tagged with the cGPU release. ACK's node images carry the
driver and runtime; ACK's own scheduler places pods by ``aliyun.com/gpu-mem``. The facts the checks use (which labels
put a node under cGPU, its pods-per-card limit, its known defects) are data in ack.yaml, each with its page.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from gpuchain.doctor.stacks.base import images_of
from gpuchain.doctor.structs import Snapshot, Stack
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of
from gpuchain.operator.policy import ClusterPolicySpec

#: The image repository of the gpushare device plugin and the name, container and label of its DaemonSet.
PLUGIN_IMAGE = "k8s-gpushare-plugin"
PLUGIN_DS = "gpushare-device-plugin-ds"
PLUGIN_COMPONENT = "gpushare-device-plugin"
CONTAINER = "gpushare"
#: The image repository of the DaemonSet that loads cGPU; its tag is the cGPU release.
CGPU_IMAGE = "cgpu-installer"
_CGPU_TAG = re.compile(re.escape(CGPU_IMAGE) + r":v?(\d+(?:\.\d+)+)")
#: The Helm chart label ack-ai-installer puts on its DaemonSets (``ack-ai-installer-1.12.6``).
_INSTALLER_CHART = re.compile(r"^ack-ai-installer-v?(\d+(?:\.\d+)+)")
#: The resource the gpushare plugin announces and the annotation it writes the assigned GPU's index into.
GPU_MEM = "aliyun.com/gpu-mem"
GPU_INDEX = "ALIYUN_COM_GPU_MEM_IDX"


@dataclass(frozen=True, kw_only=True)
class OsDefect:
    """A cGPU release range that fails on one OS image, and the ack-ai-installer release that repairs it."""

    os: tuple[str, ...]  #: words of the node's osImage or kernel that name the OS
    title: str
    cgpu_through: tuple[int, ...]  #: the last affected cGPU release
    installer_fixed: str
    says: str
    source: str

    def hits(self, node: Obj, cgpu: str) -> bool:
        """Does this defect apply to ``node`` running cGPU release ``cgpu``?"""
        info = (node.get("status") or {}).get("nodeInfo") or {}
        system = f"{info.get('osImage', '')} {info.get('kernelVersion', '')}"
        return bool(cgpu) and any(w in system for w in self.os) and release(cgpu) <= self.cgpu_through


@dataclass(frozen=True, kw_only=True)
class Facts:
    """ack.yaml: which labels put a node under cGPU, its pods-per-card limit and message, its known defects."""

    cgpu_labels: dict[str, tuple[str, ...]]
    pods_per_gpu: int
    over_limit_message: str
    os_defects: tuple[OsDefect, ...]


def release(text: str) -> tuple[int, ...]:
    """A dotted release as numbers ("1.5.18" -> (1, 5, 18)), to compare."""
    return tuple(int(n) for n in re.findall(r"\d+", text))


@functools.cache
def facts() -> Facts:
    """ack.yaml, read once."""
    raw: dict[str, Any] = yaml.safe_load(resources.files("gpuchain.doctor.stacks").joinpath("ack.yaml").read_text())
    return Facts(
        cgpu_labels={k: tuple(str(v) for v in vs) for k, vs in raw["cgpu_labels"].items()},
        pods_per_gpu=int(raw["pods_per_gpu"]),
        over_limit_message=str(raw["over_limit_message"]),
        os_defects=tuple(
            OsDefect(
                os=tuple(d["os"]),
                title=str(d["title"]),
                cgpu_through=release(str(d["cgpu_through"])),
                installer_fixed=str(d["installer_fixed"]),
                says=str(d["says"]),
                source=str(d["source"]),
            )
            for d in raw["os_defects"]
        ),
    )


def is_gpushare_plugin(ds: Obj) -> bool:
    """Is this DaemonSet ACK's gpushare device plugin: its name, its component label, or its image?"""
    return (
        name_of(ds) == PLUGIN_DS or labels_of(ds).get("component") == PLUGIN_COMPONENT or PLUGIN_IMAGE in images_of(ds)
    )


def is_cgpu_installer(obj: Obj) -> bool:
    """Does this DaemonSet (or pod) run the cGPU installer, by its image?"""
    return f"{CGPU_IMAGE}:" in images_of(obj)


def cgpu_release(obj: Obj | None) -> str:
    """The cGPU release a cgpu-installer DaemonSet or pod loads, from its image tag ("" where not read)."""
    found = _CGPU_TAG.search(images_of(obj)) if obj is not None else None
    return found.group(1) if found else ""


def installer_release(obj: Obj | None) -> str:
    """The ack-ai-installer release that installed a DaemonSet, from its chart label ("" where not labelled)."""
    found = _INSTALLER_CHART.match(str(labels_of(obj or {}).get("helm.sh/chart", "")))
    return found.group(1) if found else ""


def under_cgpu(node: Obj) -> bool:
    """Does ``node`` carry a label that turns cGPU isolation on (ack.yaml cgpu_labels)?"""
    labels = labels_of(node)
    return any(str(labels.get(k, "")) in vs for k, vs in facts().cgpu_labels.items())


def detect(snapshot: Snapshot) -> Stack | None:
    """ACK's gpushare device plugin DaemonSet in any namespace (cgpu-installer beside it is noted, not required:
    sharing without memory isolation runs the plugin alone)."""
    plugin = next((d for d in snapshot.daemonsets if is_gpushare_plugin(d)), None)
    if plugin is None:
        return None
    installer = next((d for d in snapshot.daemonsets if is_cgpu_installer(d)), None)
    # NVIDIA's nvidia.com/gpu plugin is off on a shared node (ACK sets the other modes' resources to 0), and the
    # gpushare plugin announces no nvidia.com/gpu: its own state is read by links/gpushare.py, not as that link's.
    spec = ClusterPolicySpec.model_validate(
        {
            k: {"enabled": False}
            for k in ("driver", "toolkit", "validator", "devicePlugin", "dcgmExporter", "gfd", "migManager")
        }
    )
    version = installer_release(plugin) or installer_release(installer)
    notes = [f"ack-ai-installer {version}" if version else "ack-ai-installer (release not read from its labels)"]
    if installer is not None:
        notes.append(f"cGPU {cgpu_release(installer) or '(release not read from its image)'} by {name_of(installer)}")
    return Stack(
        id="ack-gpushare",
        title="Alibaba Cloud ACK shared GPU scheduling (gpushare device plugin and cGPU, host driver)",
        namespace=namespace_of(plugin) or "kube-system",
        daemonsets={},
        containers={},
        policy=spec,
        host_driver=True,
        notes=tuple(notes),
    )
