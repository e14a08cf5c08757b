"""The driver pod held in its driver manager (the k8s-driver-manager init container) by a wait that never ends:
the MOFED wait GPUDirect RDMA asks for, and a drain that waits on a pod already terminating on the node. Their logs
say only that they wait (at info level, or as a drain timeout), so no error line names the cause; the ClusterPolicy's
RDMA keys say which MOFED it waits for, and the named pod's own state why its drain never ends."""

from __future__ import annotations

import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.model import NOT_SIMULATED, Fix
from gpuchain.doctor.pods import PodState
from gpuchain.kube.objects import Obj, name_of, namespace_of

#: The driver manager's words while it waits for MOFED (catalog.yaml).
MOFED_WAIT = "k8s-driver-manager.waiting-for-mofed"

#: The pod a drain names as it evicts it or waits for it to go, as kubectl's drain helper writes it
#: (kubernetes/kubectl pkg/drain/drain.go@v0.33.0: "evicting pod %s/%s" and "error when waiting for pod %q in
#: namespace %q to terminate: %v"), which the driver manager runs for its drain and GPU pod eviction.
DRAINED_POD = re.compile(
    r"evicting pod (?P<ns>[\w.-]+)/(?P<name>[\w.-]+)"
    r'|waiting for pod "(?P<name2>[\w.-]+)" in namespace "(?P<ns2>[\w.-]+)"'
)


def mofed_wait(ctx: Context, *, state: PodState, log: str) -> Known | None:
    """The driver pod held in its init container by the driver manager's MOFED wait (GPUDirect RDMA on), with the
    ClusterPolicy change that ends it; None when its log shows no such wait or no ClusterPolicy asks for RDMA."""
    found = catalog.find(log, MOFED_WAIT) if state.waiting_init else None
    if found is None or ctx.policy_obj is None:
        return None
    # Read from the object as written: a ClusterPolicy of another release may carry keys gpuchain's schema drops.
    driver = (ctx.policy_obj.get("spec") or {}).get("driver") or {}
    rdma = driver.get("rdma") or {}
    if not rdma.get("enabled"):
        return None
    spec = driver.get("manager") or {}
    manager = (
        ":".join(
            x
            for x in (
                "/".join(str(spec[k]) for k in ("repository", "image") if spec.get(k)),
                str(spec.get("version") or ""),
            )
            if x
        )
        or "its default release"
    )
    if rdma.get("useHostMofed"):
        # The host's MOFED is loaded as mlx5_core; the MOFED driver container's ready file never appears without
        # that container, and a manager release whose host check looks for the file waits for ever.
        cause = (
            "GPUDirect RDMA is on with MOFED from the host (spec.driver.rdma.useHostMofed=true), and the driver "
            f"manager ({manager}) keeps waiting for MOFED: with a host MOFED only mlx5_core in /proc/modules shows "
            "it, and a driver manager release that checks for the MOFED driver container's ready file "
            "(/run/mellanox/drivers/.driver-ready) instead waits for ever, so the driver never installs."
        )
        fix = (
            "# run a driver manager release whose host-MOFED check reads /proc/modules: set "
            f"spec.driver.manager.version in {ctx.policy_ref} to one before or after the release whose two checks "
            "are swapped; or, with that release, set spec.driver.rdma.useHostMofed=false (its other check is the "
            "/proc/modules one the host's mlx5_core passes); first check the host has MOFED loaded (lsmod | grep "
            "mlx5_core)"
        )
    else:
        cause = (
            "GPUDirect RDMA is on with MOFED from NVIDIA's network operator (spec.driver.rdma.useHostMofed=false), "
            f"and the driver manager ({manager}) keeps waiting for that MOFED driver container to be ready, so the "
            "driver never installs."
        )
        fix = (
            "# deploy the network operator's MOFED driver on this node (its ready file /run/mellanox/drivers/"
            ".driver-ready ends the wait); where MOFED is installed on the host instead, set "
            f"spec.driver.rdma.useHostMofed=true in {ctx.policy_ref}; without RDMA NICs, spec.driver.rdma.enabled=false"
        )
    return Known(cause=cause, evidence=found.evidence(), action=None, fix=fix)


def _named_pods(log: str) -> list[tuple[str, str]]:
    """(namespace, name) of each pod the drain in ``log`` names, in order, once each."""
    named = [(m["ns"] or m["ns2"], m["name"] or m["name2"]) for m in DRAINED_POD.finditer(log)]
    return list(dict.fromkeys(named))


def drain_stuck(ctx: Context, *, view: NodeView, log: str) -> Known | None:
    """The driver pod held by its driver manager's drain waiting on a pod of this node that is already terminating
    (deletionTimestamp set) and never goes: the eviction was granted, so no PodDisruptionBudget or drain flag holds
    it, and waiting longer changes nothing. A pod holding a DRA ResourceClaim cannot finish terminating before the
    DRA kubelet plugin unprepares its claim, and that plugin waits for the driver the drain holds back: a deadlock
    that only a driver manager which skips the drain when no driver is loaded (NVIDIA/k8s-driver-manager#217) ends
    by itself. None when the drain names no terminating pod of this node."""
    on_node = {(namespace_of(p), name_of(p)): p for p in view.workloads}
    stuck: list[Obj] = [
        pod
        for key in _named_pods(log)
        if (pod := on_node.get(key)) is not None and (pod.get("metadata") or {}).get("deletionTimestamp")
    ]
    if not stuck:
        return None
    pod = stuck[0]
    ns, name = namespace_of(pod) or "", name_of(pod)
    since = (pod.get("metadata") or {}).get("deletionTimestamp")
    force = Fix.delete_pod(ns, name, force=True, **{NOT_SIMULATED: "a pod stuck terminating is not simulated"})
    claims = [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("resourceClaims") or []]
    evidence = [
        f"driver manager's drain waits on pod {ns}/{name}",
        f"pod {ns}/{name} on {view.name} terminating since {since} (metadata.deletionTimestamp)",
    ]
    if claims:
        evidence.append(f"pod {ns}/{name} holds ResourceClaim(s) {', '.join(claims)} (spec.resourceClaims)")
        return Known(
            cause=f"the driver manager drains the node before installing the driver, and pod {ns}/{name} holds a "
            "DRA ResourceClaim: it cannot finish terminating until the DRA kubelet plugin unprepares the claim, and "
            "that plugin cannot start without the driver the drain holds back, so neither ever goes ahead.",
            evidence=tuple(evidence),
            action=force,
            fix=f"{ctx.stack.render(force)}   # ends this deadlock once; for the next reboot run a k8s-driver-manager "
            "that skips the drain when no NVIDIA module is loaded (NVIDIA/k8s-driver-manager#217): set "
            f"spec.driver.manager.version in {ctx.policy_ref or 'the ClusterPolicy'} to a release with it",
        )
    return Known(
        cause=f"the driver manager drains the node before installing the driver and waits for pod {ns}/{name}, which "
        "was evicted but is stuck terminating (a finalizer, a volume its kubelet cannot unmount, a process that "
        "ignores SIGTERM), so the drain never ends and the driver never installs.",
        evidence=tuple(evidence),
        action=force,
        fix=f"{ctx.stack.render(force)}   # the pod is already being deleted; its controller starts it again once the "
        "driver is up",
    )
