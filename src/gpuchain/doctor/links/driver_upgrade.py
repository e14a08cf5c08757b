"""A node the GPU Operator's driver upgrade controller holds in a state that waits on its pods, or left in
upgrade-failed after that wait failed (NVIDIA/k8s-operator-libs pkg/upgrade, common_manager.go and pod_manager.go):

- wait-for-jobs-required waits for the pods spec.driver.upgradePolicy.waitForCompletion.podSelector selects to finish,
  for ever when its timeoutSeconds is 0 (the default);
- pod-deletion-required deletes the node's GPU pods with kubectl's drain helper under spec.driver.upgradePolicy.
  podDeletion (force, deleteEmptyDir, timeoutSeconds; the chart's driver.upgradePolicy.gpuPodDeletion), and moves to
  drain-required where that fails and drain.enable is set, else to upgrade-failed;
- drain-required drains the node under spec.driver.upgradePolicy.drain (enable, force, podSelector, deleteEmptyDir,
  timeoutSeconds), upgrade-failed where that fails;
- upgrade-failed is left only once the node's driver pod runs the new driver (ProcessUpgradeFailedNodes), which the
  controller restarts only from pod-restart-required: a node failed on its pods stays failed until they go and the
  node is labelled upgrade-required again.

The node stays cordoned meanwhile, so its GPUs take no work. The pods on it, their PodDisruptionBudgets and the
ClusterPolicy's settings say what the wait is for (`drains.blockers`)."""

from __future__ import annotations

from typing import Any

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.links.drains import MAX_BLOCKERS, NOT_SIMULATED_NOTE, Drainer, blockers, held_by
from gpuchain.doctor.model import Fix, FixOp, LinkState, Severity
from gpuchain.doctor.stacks.inferred_policy import unread
from gpuchain.kube.objects import labels_of, name_of, namespace_of
from gpuchain.kube.selectors import match_labels
from gpuchain.operator.upgrade import DRAIN_REQUIRED, FAILED, POD_DELETION, STATE_LABEL, UPGRADE_REQUIRED, WAIT_FOR_JOBS

#: What the operator adds to the drain's pod selector: a pod labelled nvidia.com/gpu-driver-upgrade-drain.skip=true is
#: never drained (NVIDIA/gpu-operator controllers/upgrade_controller.go@v26.7.0, UpgradeSkipDrainLabelSelector).
SKIP_DRAIN = "nvidia.com/gpu-driver-upgrade-drain.skip!=true"
#: podDeletion's and drain's timeoutSeconds where the ClusterPolicy sets none (NVIDIA/k8s-operator-libs
#: api/upgrade/v1alpha1/upgrade_spec.go, kubebuilder default).
DEFAULT_TIMEOUT = 300


def _policy_fix(ctx: Context, section: str, key: str, value: Any) -> Fix:
    """The ClusterPolicy change that sets spec.driver.upgradePolicy.<section>.<key>."""
    patch = {"spec": {"driver": {"upgradePolicy": {section: {key: value}}}}}
    return Fix(FixOp.PATCH_POLICY, ctx.policy_name, {**patch, **NOT_SIMULATED_NOTE})


def _setting(section: str, key: str) -> str:
    """A setting as the ClusterPolicy and the gpu-operator chart spell it (the chart's values name podDeletion
    gpuPodDeletion: NVIDIA/gpu-operator deployments/gpu-operator/values.yaml)."""
    chart = "gpuPodDeletion" if section == "podDeletion" else section
    return f"spec.driver.upgradePolicy.{section}.{key}=true (Helm driver.upgradePolicy.{chart}.{key})"


def _drainer(ctx: Context, policy: dict[str, Any], section: str) -> Drainer:
    """The upgrade controller's pod deletion (GPU pods only) or node drain, with the ClusterPolicy's settings."""
    spec = policy.get(section) or {}
    seconds = int(spec.get("timeoutSeconds", DEFAULT_TIMEOUT))
    return Drainer(
        who="the upgrade controller's " + ("GPU pod deletion" if section == "podDeletion" else "node drain"),
        force=bool(spec.get("force")),
        delete_emptydir=bool(spec.get("deleteEmptyDir")),
        gpu_only=section == "podDeletion",
        selector=",".join(x for x in (str(spec.get("podSelector") or ""), SKIP_DRAIN) if x)
        if section == "drain"
        else "",
        force_setting=_setting(section, "force"),
        emptydir_setting=_setting(section, "deleteEmptyDir"),
        force_fix=_policy_fix(ctx, section, "force", True),
        emptydir_fix=_policy_fix(ctx, section, "deleteEmptyDir", True),
        timeout=f"spec.driver.upgradePolicy.{section}.timeoutSeconds={seconds}"
        + (" (no timeout: it retries for ever)" if seconds == 0 else " (then the node is marked upgrade-failed)"),
    )


def _waited_jobs(ctx: Context, view: NodeView, policy: dict[str, Any]) -> tuple[str, list[str], str, Fix] | None:
    """wait-for-jobs-required with no timeout and selected pods still running: (cause, evidence, fix, action)."""
    wait = policy.get("waitForCompletion") or {}
    selector = str(wait.get("podSelector") or "")
    if not selector or int(wait.get("timeoutSeconds") or 0) != 0:
        return None  # no selector: the controller moves on at once; a timeout: it moves on by itself
    running = [
        p
        for p in view.workloads
        if match_labels(selector, labels_of(p)) and (p.get("status") or {}).get("phase") in ("Running", "Pending")
    ]
    if not running:
        return None
    refs = [f"{namespace_of(p) or 'default'}/{name_of(p)}" for p in running]
    timeout = _policy_fix(ctx, "waitForCompletion", "timeoutSeconds", 3600)
    cause = (
        f"the driver upgrade waits, before it deletes any pod, for the pods spec.driver.upgradePolicy.waitForCompletion"
        f".podSelector ({selector}) selects on this node to complete, with timeoutSeconds 0 (wait for ever), and "
        f"{', '.join(refs[:MAX_BLOCKERS])} still run, so the node stays cordoned and the driver is not upgraded."
    )
    evidence = [f"waitForCompletion.podSelector {selector} selects running pod(s) {', '.join(refs[:MAX_BLOCKERS])}"]
    by_hand = Fix.delete_pod(namespace_of(running[0]) or "default", name_of(running[0]), **NOT_SIMULATED_NOTE)
    fix = (
        f"{ctx.stack.render(timeout)}   # waits at most an hour, then deletes them (Helm driver.upgradePolicy."
        f"waitForCompletion.timeoutSeconds); or end them yourself: {ctx.stack.render(by_hand)}"
    )
    return cause, evidence, fix, timeout


def upgrade_held(ctx: Context, view: NodeView, *, failing: bool) -> Result | None:
    """The driver link of a node the upgrade controller holds on its pods (wait-for-jobs-required, pod-deletion-
    required, drain-required) or left upgrade-failed, with the pods that hold it and the change that ends the wait.
    None where the node is in no such state, the source has no ClusterPolicy to read the settings from, or no pod on
    the node holds it (the upgrade is then merely under way). Nor where the driver pod itself fails (``failing``): in
    these states the controller has not restarted it, so its own failure comes first, and a node marked
    upgrade-failed may be so for it (a new driver that never validated)."""
    state = view.labels.get(STATE_LABEL, "")
    if failing or state not in (WAIT_FOR_JOBS, POD_DELETION, DRAIN_REQUIRED, FAILED) or ctx.policy_obj is None:
        return None
    if unread(ctx.stack, "driver.upgradePolicy"):
        # A policy read back from the DaemonSets shows no upgrade policy; the state label itself says autoUpgrade is on
        # (the controller removes every node's label where it is off: NVIDIA/gpu-operator
        # controllers/upgrade_controller.go@v26.7.0 removeNodeUpgradeStateLabels). Only a failed upgrade that no pod
        # holds under either drain section is named without knowing which section the policy turns on.
        pods_hold = any(blockers(ctx, view, _drainer(ctx, {}, section)) for section in ("drain", "podDeletion"))
        return _failed(ctx, view, [f"label {STATE_LABEL}={state}"]) if state == FAILED and not pods_hold else None
    policy = ((ctx.policy_obj.get("spec") or {}).get("driver") or {}).get("upgradePolicy") or {}
    evidence = [f"label {STATE_LABEL}={state}"]
    action: Fix | None
    if state == WAIT_FOR_JOBS:
        waited = _waited_jobs(ctx, view, policy)
        if waited is None:
            return None
        cause, more, fix, action = waited
        evidence += more
    else:
        drain_on = bool((policy.get("drain") or {}).get("enable"))
        section = "drain" if state == DRAIN_REQUIRED or (state == FAILED and drain_on) else "podDeletion"
        found = blockers(ctx, view, _drainer(ctx, policy, section))
        if not found:
            return _failed(ctx, view, evidence) if state == FAILED else None
        held = held_by(found)
        evidence += held.evidence
        cause, fix, action = held.cause, held.fix, held.action
        if state == FAILED:
            retry = Fix(FixOp.LABEL_NODE, view.name, {STATE_LABEL: UPGRADE_REQUIRED})
            cause += " The controller marked the node upgrade-failed and leaves it so (cordoned) until it is retried."
            fix += f"; then retry the upgrade: {ctx.stack.render(retry)}"
    finding = node_finding(
        view,
        fid="driver.upgrade-held",
        sev=Severity.ERROR,
        link="driver",
        cause=cause,
        evidence=evidence,
        fix=fix,
        action=action,
    )
    return Result(LinkState.BROKEN, f"driver upgrade held on the node's pods ({state})", (finding,))


def _failed(ctx: Context, view: NodeView, evidence: list[str]) -> Result:
    """A node left upgrade-failed with no pod holding it and its driver pod not failing: whatever failed the upgrade
    (a drain, a driver that did not validate in time) is gone, but upgrade-failed is a state the controller leaves
    only on its own reading of the driver pod, and the node stays marked (cordoned, where the controller cordoned it)
    until someone labels it upgrade-required: the controller then retries, skipping the steps already done, and
    uncordons it at the end (NVIDIA/k8s-operator-libs pkg/upgrade, ProcessUpgradeRequiredNodes and
    ProcessUpgradeFailedNodes)."""
    retry = Fix(FixOp.LABEL_NODE, view.name, {STATE_LABEL: UPGRADE_REQUIRED})
    cordoned = bool((view.node.get("spec") or {}).get("unschedulable"))
    finding = node_finding(
        view,
        fid="driver.upgrade-failed",
        sev=Severity.ERROR,
        link="driver",
        cause="the GPU Operator's driver upgrade controller marked the node upgrade-failed"
        + (" and keeps it cordoned, so its GPUs take no new work" if cordoned else ", so it upgrades no further")
        + "; nothing holds the node now (no pod blocks a drain, the driver pod is not failing), and the controller "
        "retries only once the node is labelled upgrade-required.",
        evidence=[*evidence, *(["spec.unschedulable: true"] if cordoned else [])],
        fix=f"{ctx.stack.render(retry)}   # the controller retries the upgrade, skips the steps already done and "
        "uncordons the node when the driver validates",
        action=retry,
    )
    return Result(LinkState.BROKEN, "driver upgrade left failed on the node (upgrade-failed)", (finding,))
