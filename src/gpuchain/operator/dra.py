"""The operator's side of "a GPU is handed out by the device plugin or the DRA plugin, never both".

The chart deploys gpuchain's DRA plugin; the operator deploys the device plugin. On a node labelled
``gpuchain.io/gpu.allocator=dra`` the device plugin announces nothing, and on other nodes the DRA
plugin publishes nothing, unless it runs with ``--unlabelled-nodes=dra`` (the chart's
``dra.nodes=all``): then it serves every unlabelled GPU node, and a device plugin there would serve
the same GPUs. The operator refuses to deploy its device plugin beside such a DRA plugin, naming
the field and both ways out. A pure decision over the policy and the cluster's DaemonSets.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuchain.kube.allocator import ALLOCATOR_LABEL, DRA
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.policy import ClusterPolicySpec, Problem

_SERVES_UNLABELLED = ("--unlabelled-nodes=dra", ("--unlabelled-nodes", "dra"))


def serves_unlabelled_nodes(daemonset: Obj) -> bool:
    """Whether a DaemonSet runs gpuchain's DRA plugin on every unlabelled GPU node (``--unlabelled-nodes=dra``)."""
    pod = daemonset.get("spec", {}).get("template", {}).get("spec", {})
    for container in pod.get("containers") or []:
        words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
        if "dra-plugin" not in words:
            continue
        if _SERVES_UNLABELLED[0] in words:
            return True
        if any(tuple(words[i : i + 2]) == _SERVES_UNLABELLED[1] for i in range(len(words) - 1)):
            return True
    return False


def dra_problems(policy: ClusterPolicySpec, daemonsets: Iterable[Obj]) -> list[Problem]:
    """The device plugin switched on beside a DRA plugin that serves the same (unlabelled) nodes."""
    if not policy.device_plugin.enabled:
        return []
    return [
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
