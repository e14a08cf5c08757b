"""GPUs the device plugin marks unhealthy on the systemd reload that took the pods' device access.

A systemd reload (systemctl daemon-reload, as package upgrades and Kubernetes upgrades run it) re-applies the
device cgroup rules of every container whose cgroup systemd manages and drops the NVIDIA devices the runtime hook
added outside them, where the devices have no /dev/char links (NVIDIA/nvidia-container-toolkit#48; the notice
NVIDIA/nvidia-docker#1730). The device plugin's container loses them the same way: its health check's NVML calls
fail, and it marks the GPUs unhealthy although no Xid was raised and nothing happened to the hardware
(NVIDIA/k8s-device-plugin#426). Where GPU pods on the node show that loss (``workload.nvml-lost``) and the plugin's
unhealthy GPUs come with no Xid, they are that loss seen by the plugin, not a failed GPU: the toolkit's repair is the
root, and the plugin is restarted after it so it checks its GPUs again.
"""

from __future__ import annotations

import dataclasses

from gpuchain.doctor.context import NodeView
from gpuchain.doctor.model import Finding, Severity
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN

#: The finding of GPU pods that lost their device access while running, and that of GPUs the plugin took out.
RELOADED, MARKED = "workload.nvml-lost", "gpu.lost"


def reload_marked(view: NodeView, findings: list[Finding]) -> list[Finding]:
    """``findings`` with a plugin's Xid-less unhealthy GPUs turned into a consequence of the pods' lost device
    rules where those show on the node (the pods' finding the root); ``findings`` as they are otherwise."""
    reloaded = next((f for f in findings if f.id == RELOADED and f.severity is Severity.ERROR), None)
    marked = next(
        (
            f
            for f in findings
            if f.id == MARKED and f.link == "device-plugin" and not any("xid" in e.lower() for e in f.evidence)
        ),
        None,
    )
    if reloaded is None or marked is None:
        return findings
    plugin = view.pod(DEVICE_PLUGIN)
    restart = (
        f"kubectl -n {namespace_of(plugin)} delete pod {name_of(plugin)}"
        if plugin is not None
        else "restart the device plugin's pod"
    )
    seen = dataclasses.replace(
        marked,
        severity=Severity.WARNING,
        root=False,
        cause="the device plugin marked GPUs unhealthy with no Xid, on the node whose GPU pods lost their device "
        "access while running: its own container lost the NVIDIA device rules on the same systemd reload, so its "
        "NVML health check fails although the GPUs are sound.",
        fix=f"{restart}   # after the {RELOADED} repair on {view.name}, so the plugin checks its GPUs again",
        action=None,
    )
    return [dataclasses.replace(f, root=True) if f is reloaded else seen if f is marked else f for f in findings]
