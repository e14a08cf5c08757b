"""The driver pod held in its driver manager (the k8s-driver-manager init container) by a wait that never ends:
the MOFED wait GPUDirect RDMA asks for, and a drain of the node that cannot remove a pod on it. Their logs say only
that they wait (at info level, or as a drain timeout), so no error line names the cause; the ClusterPolicy's RDMA keys
say which MOFED it waits for, and the pods' own state, their PodDisruptionBudgets and the driver manager's settings
why its drain never ends (`drains`)."""

from __future__ import annotations

import re
from typing import Any

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.links.dra_stale import DRA_DRIVER_DEPLOY
from gpuchain.doctor.links.drains import Drainer, blockers, held_by
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp
from gpuchain.doctor.pods import PodState
from gpuchain.kube.objects import Obj, annotations_of, name_of, namespace_of
from gpuchain.operator.upgrade import STATE_LABEL, UPGRADE_REQUIRED

#: The driver manager's words while it waits for MOFED (catalog.yaml).
MOFED_WAIT = "k8s-driver-manager.waiting-for-mofed"
DRIVER_MANAGER = "k8s-driver-manager"
#: The node annotation by which the GPU Operator's upgrade controller takes the drain over: the driver manager then
#: neither evicts nor drains (NVIDIA/k8s-driver-manager cmd/driver-manager/main.go@v0.12.0, isAutoDrainEnabled).
UPGRADE_ENABLED = "nvidia.com/gpu-driver-upgrade-enabled"
#: The catalog's lines of a drain refused or failed (catalog.yaml): the state says which pod and why.
DRAIN_LINES = (
    "kubectl-drain.local-storage",
    "kubectl-drain.unmanaged-pods",
    "kube-apiserver.eviction-pdb",
    "k8s-driver-manager.drain-failed",
    "k8s-driver-manager.gpu-pods-not-drained",
    "k8s-driver-manager.dra-claim-holders",
)
#: The driver manager's drain settings the GPU Operator's driver DaemonSet sets unless the ClusterPolicy's
#: spec.driver.manager.env says otherwise (NVIDIA/gpu-operator assets/state-driver/0500_daemonset.yaml@v25.10.1).
MANAGER_DEFAULTS = {"ENABLE_GPU_POD_EVICTION": "true", "ENABLE_AUTO_DRAIN": "false"}

#: The driver manager's line as its GPU pod eviction starts (NVIDIA/k8s-driver-manager internal/kubernetes/client.go
#: @v0.12.0, "Identifying GPU pods to delete"): the eviction is at work, whether or not the node is cordoned.
EVICTING = re.compile(r"Identifying GPU pods to delete")

#: The pod a drain names as it evicts it, retries its eviction or waits for it to go, as kubectl's drain helper
#: writes it (kubernetes/kubectl pkg/drain/drain.go@v0.34.9: "evicting pod %s/%s", "error when evicting pods/%q -n
#: %q (will retry after 5s): %v", "error when waiting for pod %q in namespace %q to terminate: %v"), which the driver
#: manager runs for its drain and GPU pod eviction: each passed the drain's filters.
DRAINED_POD = re.compile(
    r"evicting pod (?P<ns>[\w.-]+)/(?P<name>[\w.-]+)"
    r'|waiting for pod "(?P<name2>[\w.-]+)" in namespace "(?P<ns2>[\w.-]+)"'
    r'|evicting pods/"(?P<name3>[\w.-]+)" -n "(?P<ns3>[\w.-]+)"'
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
    named = [
        (m["ns"] or m["ns2"] or m["ns3"], m["name"] or m["name2"] or m["name3"]) for m in DRAINED_POD.finditer(log)
    ]
    return list(dict.fromkeys(named))


def _env(ctx: Context, pod: Obj) -> dict[str, str]:
    """The driver manager's environment (name -> value): its init container's as the pod's spec sets it, over the
    ClusterPolicy's spec.driver.manager.env, over the operator's DaemonSet defaults, which the operator always
    renders: a key the pod lacks is one its spec as read does not carry (a simulated pod), not one left unset."""
    inits = (pod.get("spec") or {}).get("initContainers") or []
    manager: Obj = next((c for c in inits if c.get("name") == DRIVER_MANAGER), {})
    policy = (((ctx.policy_obj or {}).get("spec") or {}).get("driver") or {}).get("manager") or {}
    return {
        **MANAGER_DEFAULTS,
        **{str(e.get("name")): str(e.get("value", "")) for e in policy.get("env") or []},
        **{str(e.get("name")): str(e.get("value", "")) for e in manager.get("env") or [] if "value" in e},
    }


def _on(value: str | None) -> bool:
    """A boolean flag's environment value as urfave/cli reads it (Go's strconv.ParseBool); unset is false."""
    return (value or "").strip() in ("1", "t", "T", "true", "TRUE", "True")


def _timeout(value: str) -> str:
    """DRAIN_TIMEOUT_SECONDS as evidence; a Go duration, 0 (the operator's 0s) meaning no end (kubectl pkg/drain)."""
    endless = value.strip().rstrip("s") in ("", "0")
    return f"DRAIN_TIMEOUT_SECONDS={value or '0s'}" + (" (no timeout: it retries for ever)" if endless else "")


def _env_fix(ctx: Context, name: str) -> Fix:
    """The ClusterPolicy change that sets the driver manager's ``name`` to true: spec.driver.manager.env is a list,
    which a merge patch replaces whole, so the patch carries the policy's other entries too."""
    spec = ((ctx.policy_obj or {}).get("spec") or {}).get("driver") or {}
    entries = [dict(e) for e in (spec.get("manager") or {}).get("env") or [] if e.get("name") != name]
    entries.append({"name": name, "value": "true"})
    return Fix(
        FixOp.PATCH_POLICY,
        ctx.policy_name,
        {"spec": {"driver": {"manager": {"env": entries}}}, NOT_SIMULATED: "a drain held by a pod is not simulated"},
    )


def manager_drainers(ctx: Context, view: NodeView, pod: Obj, log: str) -> list[Drainer]:
    """The drains the driver pod's driver manager runs on this node, in its order, with the settings its init
    container has (NVIDIA/k8s-driver-manager cmd/driver-manager/main.go@v0.12.0): the GPU pod eviction
    (ENABLE_GPU_POD_EVICTION; GPU pods only, no pod selector), then, where that fails or the module stays held, the
    node drain (ENABLE_AUTO_DRAIN; DRAIN_POD_SELECTOR_LABEL narrows it). Both take DRAIN_USE_FORCE and
    DRAIN_DELETE_EMPTYDIR_DATA. None where the node's nvidia.com/gpu-driver-upgrade-enabled=true hands both to the
    upgrade controller. A drain its log shows at work counts even where the settings say it is off (a release with
    other defaults)."""
    if annotations_of(view.node).get(UPGRADE_ENABLED) == "true":
        return []
    env = _env(ctx, pod)
    named = _named_pods(log)
    settings: dict[str, Any] = {
        "force": _on(env.get("DRAIN_USE_FORCE")),
        "delete_emptydir": _on(env.get("DRAIN_DELETE_EMPTYDIR_DATA")),
        "force_setting": "the driver manager's DRAIN_USE_FORCE=true (spec.driver.manager.env; Helm driver.manager.env)",
        "emptydir_setting": "the driver manager's DRAIN_DELETE_EMPTYDIR_DATA=true "
        "(spec.driver.manager.env; Helm driver.manager.env)",
        "force_fix": _env_fix(ctx, "DRAIN_USE_FORCE"),
        "emptydir_fix": _env_fix(ctx, "DRAIN_DELETE_EMPTYDIR_DATA"),
        "passed": frozenset(named),
        "timeout": _timeout(env.get("DRAIN_TIMEOUT_SECONDS", "")),
        "dra_why": "the driver manager stops it while the driver is replaced, and it cannot run without the driver",
        "dra_note": "for the next reboot run a k8s-driver-manager that skips the eviction when no NVIDIA module is "
        "loaded (v0.12.0 on, NVIDIA/k8s-driver-manager#217): set spec.driver.manager.version in "
        f"{ctx.policy_ref} to v0.12.0 or later",
    }
    drains = []
    evicts, drains_node = _on(env.get("ENABLE_GPU_POD_EVICTION")), _on(env.get("ENABLE_AUTO_DRAIN"))
    if evicts:
        drains.append(Drainer(who="the driver manager's GPU pod eviction", gpu_only=True, **settings))
    if drains_node or (not evicts and (named or catalog.find(log, *DRAIN_LINES))):
        selector = env.get("DRAIN_POD_SELECTOR_LABEL", "")
        drains.append(Drainer(who="the driver manager's node drain", gpu_only=False, selector=selector, **settings))
    return drains


def drain_held(ctx: Context, *, view: NodeView, state: PodState, pod: Obj, log: str) -> Known | None:
    """The driver pod held in its driver manager by a drain of this node that cannot finish: the pods it must remove
    and cannot (`drains.blockers`: stuck terminating, refused by the drain's settings, held by a
    PodDisruptionBudget), each with the change that ends the wait. Only where the drain is at work: the node is
    cordoned (the driver manager cordons before it evicts) or its log shows the drain or the GPU pod eviction
    (`EVICTING`), and no other failure its log
    names comes first. None when nothing on the node holds it."""
    if DRIVER_MANAGER not in (state.waiting_init, state.container):
        return None
    other = catalog.known_error(log)
    if other is not None and other.entry.id not in DRAIN_LINES:
        return None
    cordoned = bool((view.node.get("spec") or {}).get("unschedulable"))
    if not (cordoned or _named_pods(log) or EVICTING.search(log) or catalog.find(log, *DRAIN_LINES)):
        return None
    for drainer in manager_drainers(ctx, view, pod, log):
        found = blockers(ctx, view, drainer)
        if found:
            return held_by(found, extra=(("node cordoned (spec.unschedulable)",) if cordoned else ()))
    return _claims_held(ctx, view)


def _claims_held(ctx: Context, view: NodeView) -> Known | None:
    """Pods holding DRA ResourceClaims on a node where the upgrade controller owns the drain: the driver manager
    evicts none of them, and refuses to stop the DRA kubelet plugin (and so to replace the driver) while any holds a
    GPU claim ("cannot drain the DRA kubelet-plugin: pod(s) still hold GPU resource claims", NVIDIA/k8s-driver-manager
    cmd/driver-manager/main.go@v0.12.0). None where the driver manager evicts itself or no DRA driver runs here."""
    if annotations_of(view.node).get(UPGRADE_ENABLED) != "true" or DRA_DRIVER_DEPLOY not in view.labels:
        return None
    holders = [
        p
        for p in view.workloads
        if (p.get("spec") or {}).get("resourceClaims") and not (p.get("metadata") or {}).get("deletionTimestamp")
    ]
    if not holders:
        return None
    refs = [f"{namespace_of(p) or 'default'}/{name_of(p)}" for p in holders]
    delete = Fix.delete_pod(
        namespace_of(holders[0]) or "default", name_of(holders[0]), **{NOT_SIMULATED: "a DRA claim is not simulated"}
    )
    retry = Fix(FixOp.LABEL_NODE, view.name, {STATE_LABEL: UPGRADE_REQUIRED})
    others = f"; the same for {', '.join(refs[1:5])}" if len(refs) > 1 else ""
    return Known(
        cause=f"the driver manager must stop the DRA kubelet plugin before it replaces the driver, and pod(s) "
        f"{', '.join(refs[:5])} on the node still hold DRA ResourceClaims; the upgrade controller owns the drain here "
        f"({UPGRADE_ENABLED}=true), so the driver manager evicts none of them and the driver is not replaced.",
        evidence=(
            f"annotation {UPGRADE_ENABLED}=true, label {DRA_DRIVER_DEPLOY}={view.labels[DRA_DRIVER_DEPLOY]}",
            f"pods holding ResourceClaims (spec.resourceClaims) on {view.name}: {', '.join(refs[:5])}",
        ),
        action=delete,
        fix=f"{ctx.stack.render(delete)}   # its controller starts it again once the driver is up{others}; or let "
        f"the upgrade controller delete them: {ctx.stack.render(retry)}",
    )
