"""A MIG change stuck in 'pending' because the MIG manager, serving a driver installed on the host, tries to stop the
host's GPU clients through systemd on a node whose OS has none.

With the driver left to the host (ClusterPolicy spec.driver.enabled=false), NVIDIA's operator sets
WITH_SHUTDOWN_HOST_GPU_CLIENTS=true on the MIG manager and gives it the host's PID namespace (gpu-operator
controllers/object_controls.go TransformMIGManager): before it repartitions, the manager stops the host's GPU client
services (nvidia-persistenced, DCGM, the kubelet's unit) through the host's systemd, and copies mig-parted onto the host
to run it there (mig-parted cmd/nvidia-mig-manager and its reconfigure step). A host OS without systemd (Talos, an
OpenRC one) answers none of that: the manager logs the change it starts and nothing after, the state stays 'pending',
and the operands it paused stay off. Turning the shutdown off (the env is a chart and ClusterPolicy value,
spec.migManager.env) applies the layout from the container, which is what such a host needs: its GPU clients are pods.
"""

from __future__ import annotations

import re

from gpuchain.common.labels import MIG_CONFIG_STATE
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.model import Finding, Fix, FixOp, Severity
from gpuchain.doctor.node import node_info
from gpuchain.doctor.owners import owner_ds
from gpuchain.kube.objects import Obj, name_of, namespace_of

ENV = "WITH_SHUTDOWN_HOST_GPU_CLIENTS"
#: The MIG manager's line as it starts a change (mig-parted cmd/nvidia-mig-manager/main.go "Updating to MIG config:
#: %s"); the change's later steps log after it.
UPDATING = "Updating to MIG config"
#: Node OSes (their osImage, os-release PRETTY_NAME) with no systemd for the manager to stop services through.
NO_SYSTEMD = re.compile(r"^(Talos|k3OS|Alpine Linux)\b", re.IGNORECASE)


def _env_on(mgr: Obj, log: str) -> bool:
    """Is the host-client shutdown on: in the manager container's env, or as the manager printed its settings?"""
    if re.search(rf"^\s*{ENV}=true\s*$", log, re.MULTILINE):
        return True
    for c in (mgr.get("spec") or {}).get("containers") or []:
        for e in c.get("env") or []:
            if e.get("name") == ENV and str(e.get("value")).lower() == "true":
                return True
    return False


def host_clients_hang(
    ctx: Context, *, view: NodeView, mgr: Obj | None, log: str, evidence: list[str]
) -> Finding | None:
    """The pending change the MIG manager cannot get past because it stops host GPU clients through a systemd the
    node's OS lacks, with the env change that lets it apply the layout; None where that is not what holds it."""
    image = str(node_info(view.node).get("osImage", ""))
    if mgr is None or view.labels.get(MIG_CONFIG_STATE) != "pending" or not NO_SYSTEMD.match(image):
        return None
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    if not _env_on(mgr, log) or not lines or UPDATING not in lines[-1]:
        return None
    kept = [{"name": e.name, "value": e.value} for e in ctx.policy.mig_manager.env if e.name != ENV]
    env = [*kept, {"name": ENV, "value": "false"}]
    action = (
        Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"migManager": {"env": env}}})
        if ctx.policy_obj is not None
        else Fix(
            FixOp.SET_ENV,
            f"{namespace_of(mgr) or ctx.namespace}/{owner_ds(mgr) or name_of(mgr)}",
            {"env": {ENV: "false"}},
        )
    )
    restart = ctx.stack.render(Fix.delete_pod(namespace_of(mgr) or ctx.namespace, name_of(mgr)))
    return node_finding(
        view,
        fid="mig.pending",
        sev=Severity.ERROR,
        link="mig",
        cause=f"the MIG change is stuck in 'pending': the MIG manager serves a driver installed on the host, so it "
        f"stops the host's GPU clients through systemd before repartitioning ({ENV}=true), and this node's OS "
        f"({image}) has no systemd to answer; its log ends where the change starts, and the device plugin, GFD and "
        "exporter stay paused, so the node offers no GPUs.",
        evidence=[*evidence, f"node OS: {image}", f"mig-manager log: {ENV}=true", f"mig-manager log ends: {lines[-1]}"],
        fix=ctx.stack.render(action) + f"   # {ENV}=false: apply the layout from the container, without the host's "
        f"systemd (its GPU clients here are pods); then {restart}",
        action=action,
    )
