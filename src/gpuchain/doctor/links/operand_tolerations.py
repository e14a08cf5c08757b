"""An operand DaemonSet missing a toleration its ClusterPolicy lists: the operator's release, not the policy.

The GPU Operator renders each operand's DaemonSet from its release's manifest (assets/state-*/…_daemonset.yaml) and
then applies the ClusterPolicy's spec.daemonsets.tolerations to it (controllers/object_controls.go
applyCommonDaemonsetConfig). Where the DaemonSet still lacks a toleration the policy lists, adding that toleration to
the policy again changes nothing: the release's rendering of that operand is what lacks it. The repair is the release
whose manifest carries it, or, until then, the toleration on the DaemonSet itself (the operator may put its template
back at its next reconcile).

Known: the vGPU device manager's manifest carries no nvidia.com/gpu NoSchedule toleration up to v26.3.3; v26.7.0 adds
it ("Fix: add missing toleration to vgpu-device-manager DaemonSet manifest", NVIDIA/gpu-operator e1863f2,
assets/state-vgpu-device-manager/0600_daemonset.yaml@v26.7.0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuchain.doctor.context import Context
from gpuchain.doctor.placement import Blocker, tolerates


@dataclass(frozen=True, kw_only=True)
class ManifestFix:
    """An operand's DaemonSet whose manifest lacked a toleration, and the release whose manifest carries it."""

    daemonset: str  #: the DaemonSet the operator renders
    key: str  #: the taint key its manifest lacked a toleration for
    fixed: str  #: the first GPU Operator release whose manifest tolerates it
    source: str  #: where that is read


MANIFEST_FIXES = (
    ManifestFix(
        daemonset="nvidia-vgpu-device-manager",
        key="nvidia.com/gpu",
        fixed="v26.7.0",
        source="NVIDIA/gpu-operator assets/state-vgpu-device-manager/0600_daemonset.yaml@v26.7.0",
    ),
)


def policy_lists(ctx: Context, block: Blocker) -> bool:
    """Does the ClusterPolicy's spec.daemonsets.tolerations already tolerate every taint of ``block``?"""
    listed: list[dict[str, Any]] = [t.to_dict() for t in ctx.policy.daemonsets.tolerations]
    return bool(listed) and all(tolerates(listed, t) for t in block.taints or (block.detail,))


def unlisted(ctx: Context, block: Blocker, needed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The policy's tolerations with those of ``needed`` it does not already have (no duplicate)."""
    listed: list[dict[str, Any]] = [t.to_dict() for t in ctx.policy.daemonsets.tolerations]
    taints = block.taints or (block.detail,)
    return [*listed, *(n for n, t in zip(needed, taints, strict=False) if not tolerates(listed, t))]


def manifest_note(ctx: Context, *, daemonset: str, block: Blocker) -> str:
    """Why the policy's toleration did not reach ``daemonset``, with the release whose manifest carries it ("" where
    the policy does not list it)."""
    if block.kind != "taint" or ctx.policy_obj is None or not policy_lists(ctx, block):
        return ""
    keys = {str(t.get("key")) for t in block.taints or (block.detail,)}
    known = next((m for m in MANIFEST_FIXES if m.daemonset == daemonset and m.key in keys), None)
    head = (
        f"{ctx.policy_ref} already lists this toleration in spec.daemonsets.tolerations, and DaemonSet {daemonset} "
        "lacks it: the operator release's rendering of this operand does not carry it, so patching the policy again "
        "changes nothing"
    )
    if known is None:
        return f"{head}; move to a GPU Operator release whose manifest for it does"
    return (
        f"{head}; GPU Operator {known.fixed} or later tolerates {known.key} in its manifest ({known.source}); until "
        "then the toleration on the DaemonSet itself (the operator may put its template back)"
    )
