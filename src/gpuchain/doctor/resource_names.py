"""Pending GPU pods that ask for a GPU under a name no node offers, while the GPU nodes offer the same GPUs under
another name: the device plugin's naming, not a lack of GPUs.

NVIDIA's device plugin names what it announces from its settings. With MIG strategy mixed every MIG slice is
``nvidia.com/mig-<profile>`` and a GPU in MIG mode is no ``nvidia.com/gpu`` (NVIDIA/k8s-device-plugin
cmd/nvidia-device-plugin/mig-strategy.go; reported in kai-scheduler/KAI-Scheduler#1876). With time-slicing or MPS
and ``renameByDefault: true`` the replicas are ``nvidia.com/gpu.shared`` (NVIDIA/k8s-device-plugin README, "With
CUDA Time-Slicing"; answered in NVIDIA/k8s-device-plugin#1150). A pod that asks for the other name waits on
"Insufficient" forever: no node added or GPU freed makes it fit. The repair is the name in the pod's resources, or
the plugin setting that makes the name it asks for.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from gpuchain.doctor.context import Context
from gpuchain.doctor.model import Finding, NodeChain, Severity
from gpuchain.doctor.pods import unschedulable_message
from gpuchain.doctor.scheduling import owner_of, resource_paths, resources_fix
from gpuchain.kube.gpu_resources import GPU, MIG_PREFIX, node_gpu_resources, pod_gpu_requests
from gpuchain.kube.objects import name_of, namespace_of

#: The name time-slicing and MPS give their replicas with renameByDefault (NVIDIA/k8s-device-plugin api/config/v1).
SHARED = GPU + ".shared"
#: The node label the GPU Operator's MIG manager reads for the layout (whole GPUs: all-disabled).
#: The device plugin's finding for a config whose per-resource rename it ignores (links/plugin_rename).
RENAME_IGNORED = "device-plugin.rename-ignored"
MIG_CONFIG = "nvidia.com/mig.config"


def _offered(ctx: Context) -> Counter[str]:
    """Allocatable GPU resources summed over the GPU nodes (those with none left out)."""
    total: Counter[str] = Counter()
    for view in ctx.views:
        for name, count in node_gpu_resources(view.node, "allocatable").items():
            if count > 0:
                total[name] += count
    return total


def _instead(asked: str, offered: Counter[str]) -> tuple[str, str] | None:
    """(the name the nodes offer instead, why) for a name no node offers; None where no other name explains it."""
    migs = [name for name, _ in offered.most_common() if name.startswith(MIG_PREFIX)]
    if asked == GPU and migs:
        return migs[0], "mig"
    if asked == GPU and SHARED in offered:
        return SHARED, "shared"
    if asked == SHARED and GPU in offered:
        return GPU, "unshared"
    if asked.startswith(MIG_PREFIX) and migs:
        return migs[0], "profile"
    if asked.startswith(MIG_PREFIX) and GPU in offered:
        return GPU, "no-mig"
    return None


def _other_way(ctx: Context, why: str, asked: str, node: str) -> str:
    """The plugin-side alternative: the setting that makes the nodes offer the name the pod asks for (``node``: one
    GPU node that offers the other name)."""
    if why == "mig":
        policy = (
            f"kubectl patch clusterpolicy {ctx.policy_name} --type merge -p "
            '\'{"spec":{"mig":{"strategy":"single"}}}\' where every MIG GPU has one profile, '
            if ctx.policy_obj is not None
            else "the plugin's MIG_STRATEGY=single where every MIG GPU has one profile, "
        )
        return f"{policy}or whole GPUs: kubectl label node {node} {MIG_CONFIG}=all-disabled --overwrite"
    config = (
        "the device plugin's config (the ConfigMap ClusterPolicy spec.devicePlugin.config.name names)"
        if ctx.policy_obj is not None
        else "the device plugin's config (its chart's config.map)"
    )
    if why == "shared":
        return (
            f"renameByDefault: false under sharing.timeSlicing (or sharing.mps) in {config}, so the replicas keep "
            f"the name {GPU}"
        )
    if why == "unshared":
        return f"renameByDefault: true under sharing.timeSlicing (or sharing.mps) in {config}"
    if why == "no-mig":
        return f"a MIG layout with that profile on the GPU nodes: kubectl label node {node} {MIG_CONFIG}=<layout>"
    return f"a MIG layout that has {asked.removeprefix(MIG_PREFIX)}: kubectl label node {node} {MIG_CONFIG}=<layout>"


CAUSES = {
    "mig": "the GPU nodes run MIG with the mixed strategy, so the device plugin offers MIG slices as "
    "nvidia.com/mig-<profile> and a GPU in MIG mode is no nvidia.com/gpu",
    "shared": "the device plugin shares its GPUs (time-slicing or MPS) with renameByDefault, so it offers the "
    "replicas as nvidia.com/gpu.shared and no nvidia.com/gpu",
    "unshared": "the device plugin offers whole nvidia.com/gpu: no sharing config renames them to "
    "nvidia.com/gpu.shared",
    "profile": "the GPU nodes' MIG layout has no slice of that profile",
    "no-mig": "the GPU nodes offer whole GPUs (MIG off, or the single strategy) and no MIG slice by profile",
}


def misnamed(ctx: Context, chains: list[NodeChain], offers: frozenset[str]) -> tuple[list[Finding], set[int]]:
    """Findings for Pending GPU pods waiting on a GPU resource name no node offers where the GPU nodes offer GPUs
    under another name, one per owning object, and the pods they explain (by id). None while a node's root takes its
    GPUs away (a link in ``offers`` broken) and leaves it offering nothing: the name it would offer is then unknown,
    and that root is the cause. A broken node that still lists GPUs (a NotReady node keeps the allocatable its
    kubelet last posted) says which names it offers, so it hides no other name."""
    if not ctx.pending:
        return [], set()  # no Pending pod (most clusters): no pass over every GPU node's resources
    offered = _offered(ctx)
    findings: dict[str, Finding] = {}
    explained: set[int] = set()
    listing = {v.name for v in ctx.views if any(n > 0 for n in node_gpu_resources(v.node, "allocatable").values())}
    taken = any(
        c.node not in listing
        and (
            c.broken_link in offers
            or any(f.root and f.severity is Severity.ERROR and f.link in offers for f in c.findings)
        )
        for c in chains
    )
    # A node whose root is its MIG layout (MIG-capable, no slice carved) explains the pods waiting for slices: the name
    # they ask for is the one its strategy serves, the layout is what is missing.
    unlaid = any(f.root and f.severity is Severity.ERROR and f.link == "mig" for c in chains for f in c.findings)
    # A node whose plugin ignores its config's per-resource rename (links/plugin_rename) is the root of the pods that
    # ask for the renamed name: its config meant to offer it, so the pods do not ask for a wrong one.
    rename_ignored = any(
        f.root and f.severity is Severity.ERROR and f.id == RENAME_IGNORED for c in chains for f in c.findings
    )
    if not offered or taken:
        return [], explained
    for pod in ctx.pending:
        msg = unschedulable_message(pod)
        asked = [r for r in pod_gpu_requests(pod) if r not in offered]
        if (
            not msg
            or "Insufficient nvidia.com/" not in msg
            or not asked
            or (unlaid and asked[0].startswith(MIG_PREFIX))
        ):
            continue
        owner = owner_of(pod)
        if owner.ref in findings:
            explained.add(id(pod))
            continue
        instead = _instead(asked[0], offered)
        if instead is None:
            continue
        wanted, why = instead
        if why == "unshared" and rename_ignored:
            explained.add(id(pod))
            continue
        node = next(v.name for v in ctx.views if node_gpu_resources(v.node, "allocatable").get(wanted, 0) > 0)
        ops: list[dict[str, Any]] = []
        for path, value in resource_paths(pod, owner, asked[0]):
            renamed = f"{path.rpartition('/')[0]}/{wanted.replace('/', '~1')}"
            ops += [{"op": "remove", "path": path}, {"op": "add", "path": renamed, "value": value}]
        action = resources_fix(owner, ops)
        pod_ref = f"{namespace_of(pod)}/{name_of(pod)}"
        names = ", ".join(f"{n}: {c}" for n, c in sorted(offered.items()))
        findings[owner.ref] = Finding(
            id="workload.resource-name-not-offered",
            severity=Severity.ERROR,
            link="mig" if why in ("mig", "profile", "no-mig") else "device-plugin",
            cause=f"GPU pod {pod_ref} ({owner.kind} {owner.name}) is Pending on Insufficient {asked[0]}, a name no "
            f"node offers: {CAUSES[why]}. No node added or GPU freed makes it fit; the pod asks for the wrong name.",
            evidence=(
                f"pod {pod_ref} asks for {json.dumps(pod_gpu_requests(pod), sort_keys=True)}",
                f"GPU nodes offer (allocatable) {names}",
                f"scheduler: {msg}",
            ),
            fix=ctx.stack.render(action) + f"   # ask for {wanted}; or {_other_way(ctx, why, asked[0], node)}",
            root=True,
            action=action,
        )
        explained.add(id(pod))
    return list(findings.values()), explained
