"""The operator's side of "a GPU is handed out by the device plugin or the DRA plugin, never both".

The chart deploys gpuchain's DRA plugin; the operator deploys the device plugin. On a node labelled
``gpuchain.io/gpu.allocator=dra`` the device plugin announces nothing, and on other nodes the DRA
plugin publishes nothing, unless it runs with ``--unlabelled-nodes=dra`` (the chart's
``dra.nodes=all``): then it serves every unlabelled GPU node, and a device plugin there would serve
the same GPUs. The operator refuses to deploy its device plugin beside such a DRA plugin, naming
the field and both ways out. Nor does it deploy its device plugin while a DeviceClass serves a device
plugin resource (``nvidia.com/gpu``) through ``extendedResourceName`` (the chart's
``dra.extendedResource``): the device plugin registers that resource on every GPU node it runs on,
with no device where the node is DRA's, and the scheduler serves a request through the class only
on nodes that have none, so the two would each claim the name. Nor beside a DRA plugin whose MPS
root (``--mps-root``, the chart's ``dra.mps.root``) is the device plugin's (``devicePlugin.mps.root``):
the DRA plugin stops every MPS daemon it finds there that none of its claims needs, the device
plugin's among them. A pure decision over the policy, the cluster's DaemonSets and its DeviceClasses.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuchain.kube.allocator import ALLOCATOR_LABEL, DRA
from gpuchain.kube.gpu_resources import is_gpu_resource
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import mps_root
from gpuchain.operator.policy import ClusterPolicySpec, Problem


def dra_plugin_flag(daemonset: Obj, flag: str) -> str | None:
    """The value a DaemonSet gives gpuchain's DRA plugin for ``flag`` (``--flag=value`` or ``--flag
    value``), or None where it runs no DRA plugin or gives none."""
    pod = daemonset.get("spec", {}).get("template", {}).get("spec", {})
    for container in pod.get("containers") or []:
        words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
        if "dra-plugin" not in words:
            continue
        for i, word in enumerate(words):
            if word.startswith(f"{flag}="):
                return word.partition("=")[2]
            if word == flag and i + 1 < len(words):
                return words[i + 1]
    return None


def serves_unlabelled_nodes(daemonset: Obj) -> bool:
    """Whether a DaemonSet runs gpuchain's DRA plugin on every unlabelled GPU node (``--unlabelled-nodes=dra``)."""
    return dra_plugin_flag(daemonset, "--unlabelled-nodes") == DRA


def _mps_root_of(daemonset: Obj) -> str | None:
    """The DRA plugin's ``--mps-root`` without a trailing slash, as ``operands.mps_root`` gives the
    device plugin's; None without one."""
    given = dra_plugin_flag(daemonset, "--mps-root")
    return (given.rstrip("/") or "/") if given else None


def dra_problems(
    policy: ClusterPolicySpec, *, daemonsets: Iterable[Obj], device_classes: Iterable[Obj]
) -> list[Problem]:
    """The device plugin switched on beside a DRA plugin that serves the same (unlabelled) nodes or
    keeps its MPS daemons in the same root, or beside a DeviceClass that serves its resource name to DRA."""
    if not policy.device_plugin.enabled:
        return []
    daemonsets = list(daemonsets)
    root = mps_root(policy)
    roots = [
        Problem(
            "devicePlugin.mps.root",
            f"DaemonSet {namespace_of(ds)}/{name_of(ds)} runs gpuchain's DRA plugin with its MPS daemons in "
            f"{root} too, and it stops every daemon there that none of its claims needs, the device plugin's "
            "among them: give the DRA plugin a root of its own (chart: dra.mps.root=/run/gpuchain/dra-mps), or "
            "set devicePlugin.mps.root to another directory",
            root,
        )
        for ds in daemonsets
        if _mps_root_of(ds) == root
    ]
    bridges = [
        Problem(
            "devicePlugin.enabled",
            f"DeviceClass {name_of(dc)} serves {dc['spec']['extendedResourceName']} requests with DRA devices "
            "(extendedResourceName), while the device plugin registers that resource on the same nodes: set "
            "devicePlugin.enabled=false, or remove the class (chart: dra.extendedResource=false) and ask for DRA "
            "GPUs with ResourceClaims",
            "true",
        )
        for dc in device_classes
        if is_gpu_resource(str((dc.get("spec") or {}).get("extendedResourceName") or ""))
    ]
    return (
        roots
        + bridges
        + [
            Problem(
                "devicePlugin.enabled",
                f"DaemonSet {namespace_of(ds)}/{name_of(ds)} runs gpuchain's DRA plugin on every GPU node without "
                f"the {ALLOCATOR_LABEL} label, so the device plugin would hand out the same GPUs: set "
                f"devicePlugin.enabled=false, or run the DRA plugin with --unlabelled-nodes=device-plugin (chart: "
                f"dra.nodes=labelled) and label its nodes {ALLOCATOR_LABEL}={DRA}",
                "true",
            )
            for ds in daemonsets
            if serves_unlabelled_nodes(ds)
        ]
    )
