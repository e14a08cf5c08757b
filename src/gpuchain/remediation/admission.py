"""Whose GPU health the remediator believes: only what the chart's admission policy let through.

The remediator evicts pods and taints nodes because of a Node's ``GPUHealthy`` condition and its
``gpuchain.io/gpu-faults`` / ``gpu-pods`` annotations. Anyone who can patch Nodes could forge
them, and gpu-health's RBAC has to grant patch on every Node. The chart's
ValidatingAdmissionPolicy ``gpuchain-gpu-health-writes`` (templates/remediation-admission.yaml)
closes that: on Kubernetes >= 1.30 only gpu-health's service account, with a token bound to a pod
on that very node (userInfo.extra ``authentication.kubernetes.io/node-name``), may change them,
and it may change nothing else.

The remediator cannot see who wrote a field, so it checks the conditions under which the policy
guarantees it, each pass (``verify_writes``):

1. the policy and its binding exist, the binding denies (``validationActions`` has ``Deny``) and
   the policy fails closed (``failurePolicy: Fail``);
2. per node (``trusted_since``): the GPUHealthy condition's ``lastHeartbeatTime`` is not older
   than the binding, so it was written while the policy was enforced (gpu-health republishes
   every resync, so a node catches up within one resync).

What this guarantees: a node's health was written by the gpu-health pod on that node, or by
someone who can change or delete the policy (cluster-admin), or by a write that bypassed admission
(etcd). What it does not: that gpu-health on the node tells the truth; a compromised node can
still get pods on its own GPUs evicted, never pods on other nodes. A heartbeat forged before the
policy was bound with a time in the future is accepted once that time has passed; install the
chart before untrusted agents run. While the policy is bound nobody but gpu-health may change GPU
health, cluster admins included (the real API server refuses them with 403 Forbidden); an admin
clears stale conditions by deleting the binding, clearing them and binding it again, after which
only heartbeats from the new binding on are trusted (tests/peers/test_node_write_policy.py).
"""

from __future__ import annotations

import datetime

from gpuchain.kube.kinds import Kind, register_kind
from gpuchain.kube.objects import Obj, created_of

POLICY_NAME = "gpuchain-gpu-health-writes"
VAP = register_kind(
    Kind(
        api_version="admissionregistration.k8s.io/v1",
        kind="ValidatingAdmissionPolicy",
        plural="validatingadmissionpolicies",
        namespaced=False,
    )
)
VAP_BINDING = register_kind(
    Kind(
        api_version="admissionregistration.k8s.io/v1",
        kind="ValidatingAdmissionPolicyBinding",
        plural="validatingadmissionpolicybindings",
        namespaced=False,
    )
)


def verify_writes(policy: Obj | None, binding: Obj | None) -> str | None:
    """Why GPU health on Nodes cannot be trusted now, or None when the policy is enforced."""
    fix = "install the gpuchain chart's remediation part on Kubernetes >= 1.30, or run with --node-writes any"
    if policy is None:
        return f"ValidatingAdmissionPolicy {POLICY_NAME} is missing; {fix}"
    if binding is None:
        return f"ValidatingAdmissionPolicyBinding {POLICY_NAME} is missing; {fix}"
    if (policy.get("spec") or {}).get("failurePolicy", "Fail") != "Fail":
        return f"ValidatingAdmissionPolicy {POLICY_NAME} does not fail closed (failurePolicy must be Fail)"
    spec = binding.get("spec") or {}
    if spec.get("policyName") != POLICY_NAME or "Deny" not in (spec.get("validationActions") or []):
        return f"ValidatingAdmissionPolicyBinding {POLICY_NAME} does not bind the policy with validationActions [Deny]"
    return None


def trusted_since(binding: Obj) -> str:
    """The time from which writes were checked by the policy (the binding's creation)."""
    return created_of(binding)


def written_under_policy(node: Obj, *, since: str, condition_type: str = "GPUHealthy") -> bool:
    """Was the node's GPU health condition last written at or after ``since`` (both RFC 3339)?"""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == condition_type:
            beat, start = _time(str(c.get("lastHeartbeatTime") or "")), _time(since)
            return beat is not None and start is not None and beat >= start
    return True  # nothing published: nothing to trust or distrust


def _time(stamp: str) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
