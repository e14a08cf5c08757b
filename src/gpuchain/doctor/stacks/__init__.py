"""Which GPU stack runs the cluster, and its objects mapped onto the doctor's one view of a node.

The checks know links (driver, toolkit, device plugin, ...), never a stack. Each adapter here
(`gpuchain`, `gpu_operator`, `device_plugin` for NVIDIA's standalone chart and the managed clouds
that use it, `gke`, `hami` for HAMi's vGPU plugin,
`ack` for ACK's gpushare plugin and cGPU) recognises its stack from a snapshot and says, as a `Stack`
(`gpuchain.doctor.structs`), where its objects live: the namespace, the DaemonSet (and main
container) behind each link, whether the driver is the host's, and the policy its switches come
from; and, as fields the checks read instead of asking which stack it is, its quirks (its chart and
the NFD it bundles, driver DaemonSets per kernel, what its policy names). `detect` asks them in order; the first that
recognises the cluster wins. An API group or namespace that is absent only means "not this stack".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from gpuchain.doctor.stacks import ack, device_plugin, gke, gpu_operator, gpuchain, hami
from gpuchain.doctor.stacks.base import DRA_PLUGIN_IMAGES, images_of, is_gpu_node, provider_of
from gpuchain.doctor.structs import Snapshot, Stack
from gpuchain.kube.objects import Obj, name_of
from gpuchain.operator.migrate import NVIDIA_CLUSTER_POLICY, NVIDIA_DRIVER
from gpuchain.operator.operands import MANAGED_BY
from gpuchain.operator.policy import ClusterPolicySpec

# NVIDIA's GPU Operator CRDs (nvidia.com), as the operator's import registers them; a cluster
# without them answers 404, which `gather` reads as "not the GPU Operator".
__all__ = ["NVIDIA_CLUSTER_POLICY", "NVIDIA_DRIVER", "Stack", "detect", "is_gpu_node"]

#: Image repository names (or DaemonSet name endings) of chain components a stack may find installed
#: beside it as their own release, in any namespace, and the operand state each is read as: NVIDIA's
#: driver container (nvcr.io/nvidia/driver:<version>-<os>), container toolkit
#: (nvcr.io/nvidia/k8s/container-toolkit) and MIG manager (nvcr.io/nvidia/cloud-native/k8s-mig-manager) run
#: as DaemonSets of their own, NVIDIA's device plugin chart (nvcr.io/nvidia/k8s-device-plugin), NVIDIA's DRA
#: driver, whose kubelet plugin announces GPUs to the kubelet as the device plugin does
#: (nvcr.io/nvidia/k8s-dra-driver-gpu, later
#: dra-driver-nvidia-gpu), dcgm-exporter's own Helm chart (NVIDIA/dcgm-exporter deployment/) and GFD. In
#: this order: the last that matches wins, so the device plugin chart's GFD DaemonSet, which runs the
#: device plugin's image, is read as GFD by its name.
STANDALONE_IMAGES = {
    "nvidia/driver:": "driver",
    "k8s/container-toolkit": "container-toolkit",
    "k8s-mig-manager": "mig-manager",
    "k8s-device-plugin": "device-plugin",
    **dict.fromkeys(DRA_PLUGIN_IMAGES, "device-plugin"),
    "dcgm-exporter": "dcgm-exporter",
    "gpu-feature-discovery": "gpu-feature-discovery",
}


Adapter = Callable[[Snapshot], Stack | None]
#: The adapters in the order they are asked (policy-backed stacks first).
ADAPTERS: tuple[Adapter, ...] = (
    gpuchain.detect,
    gpu_operator.detect,
    gke.detect,
    hami.detect,
    device_plugin.detect,
    ack.detect,
)


#: The owners that make a DaemonSet an operator's operand, never a release of its own: a ClusterPolicy of either
#: group or NVIDIA's NVIDIADriver (their controllers set the ownerReference), or gpuchain's operator's label.
OPERATOR_OWNERS = ("ClusterPolicy", "NVIDIADriver")


def _operator_owned(ds: Obj) -> bool:
    meta = ds.get("metadata") or {}
    labels = meta.get("labels") or {}
    return any(r.get("kind") in OPERATOR_OWNERS for r in meta.get("ownerReferences") or ()) or all(
        labels.get(k) == v for k, v in MANAGED_BY.items()
    )


def elsewhere(snapshot: Snapshot, stack: Stack) -> dict[str, str]:
    """Operand DaemonSets outside the stack's namespace, by image (a separate dcgm-exporter release); an
    operator's own operands are not one, wherever they run."""
    found = {}
    for ds in snapshot.daemonsets:
        ns = str((ds.get("metadata") or {}).get("namespace") or "")
        if ns == stack.namespace or _operator_owned(ds):
            continue
        images = images_of(ds)
        for marker, state in STANDALONE_IMAGES.items():
            if marker in images or name_of(ds).endswith(marker):
                found[f"{ns}/{name_of(ds)}"] = state
    return found


def detect(snapshot: Snapshot) -> Stack:
    """The stack that runs this cluster; ``none`` (every link off) when no adapter recognises it."""
    for adapter in ADAPTERS:
        stack = adapter(snapshot)
        if stack is not None:
            more = elsewhere(snapshot, stack)
            return dataclasses.replace(stack, elsewhere=more) if more else stack
    provider = provider_of(snapshot.nodes)
    off = ClusterPolicySpec.model_validate(
        {k: {"enabled": False} for k in ("driver", "toolkit", "validator", "devicePlugin", "gfd", "dcgmExporter")}
        | {"migManager": {"enabled": False}}
    )
    none = Stack(
        id="none",
        title="no GPU stack found",
        namespace="",
        daemonsets={},
        containers={},
        policy=off,
        host_driver=True,
        notes=(f"cloud: {provider}",) if provider else (),
    )
    # Chain components of their own with no plugin DaemonSet (an exporter beside a plugin the DaemonSet table does
    # not hold, K2s' Deployment): their pods are still read as their links'.
    more = elsewhere(snapshot, none)
    return dataclasses.replace(none, elsewhere=more) if more else none
