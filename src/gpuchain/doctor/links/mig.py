"""The MIG link: the layout a node asks for, how far the MIG manager got, and MIG turned on outside
the cluster with no manager."""

from __future__ import annotations

import re

import yaml

from gpuchain.common.labels import (
    DEPLOY_PREFIX,
    MIG_CAPABLE,
    MIG_CONFIG,
    MIG_CONFIG_STATE,
    MIG_CONFIG_STATE_REASON,
    PAUSED_FOR_MIG_CHANGE,
)
from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.evidence import Failure
from gpuchain.doctor.links.common import Result, node_finding, operand_daemonset
from gpuchain.doctor.links.mig_empty import mig_without_instances
from gpuchain.doctor.links.mig_host_clients import host_clients_hang
from gpuchain.doctor.links.mig_left import mig_left_on
from gpuchain.doctor.links.mig_partition import partition_failed
from gpuchain.doctor.links.mig_wait import client_stuck
from gpuchain.doctor.links.releases import release_repair
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.pods import pod_state
from gpuchain.doctor.releases import showing
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.mig.config import CONFIGMAP_KEY
from gpuchain.operator.operands import DEVICE_PLUGIN, GFD, MIG_MANAGER, deploy_label

#: mig-parted's line when a MIG mode change waits for a GPU reset or a reboot (catalog.yaml).
MODE_CHANGE_PENDING = "mig-parted.mode-change-pending"
RESET_FAILED = "mig-parted.reset-failed"
APPLY_FAILED = "mig-parted.apply-failed"
#: The MIG manager's words when it returns from a change before restoring the operands it paused (catalog.yaml).
WEDGED = ("mig-manager.wait-pods-deleted", "mig-manager.restart-validator")
#: The ConfigMap of layouts NVIDIA's operator gives its MIG manager when the ClusterPolicy names none
#: (gpu-operator controllers/object_controls.go@v25.3.0 MigPartedDefaultConfigMapName), key config.yaml.
DEFAULT_LAYOUTS = "default-mig-parted-config"
#: The MIG manager's two steps as it logs them (mig-parted cmd/nvidia-mig-manager/main.go@v0.12.1): a failure
#: after the first and before the second is the MIG mode change not taking effect, which waits for a GPU
#: reset or a reboot whatever the layout says.
MODE_STEP = "Applying the MIG mode change from the selected config to the node"
CONFIG_STEP = "Applying the selected MIG config to the node"
#: nvidia-smi's words when a GPU it must reset is held (NVML_ERROR_IN_USE: "the GPU is currently in use").
IN_USE = re.compile(r"in use by another client|currently being used by one or more other processes", re.IGNORECASE)


def mig_finding(ctx: Context, view: NodeView) -> Finding | None:
    """The node's MIG change that failed or is stuck (pending, rebooting), with what the MIG manager's
    log says and the change that repairs it; None when the layout applied or none was asked."""
    state = view.labels.get(MIG_CONFIG_STATE)
    wanted = view.labels.get(MIG_CONFIG)
    if state not in ("pending", "rebooting", "failed"):
        # The label says nothing is under way, but a manager that cannot start applies no layout at all.
        return _manager_failing(ctx, view, view.pod(MIG_MANAGER), [f"{MIG_CONFIG}={wanted}"]) if wanted else None
    reason = ((view.node.get("metadata") or {}).get("annotations") or {}).get(MIG_CONFIG_STATE_REASON, "")
    paused = sorted(k.removeprefix(DEPLOY_PREFIX) for k, v in view.labels.items() if v == PAUSED_FOR_MIG_CHANGE)
    mgr = view.pod(MIG_MANAGER)
    evidence = [
        f"{MIG_CONFIG}={wanted}, {MIG_CONFIG_STATE}={state}",
        f"{MIG_CONFIG_STATE_REASON}: {reason}" if reason else "",
        f"operands paused: {', '.join(paused)}" if paused else "",
        pod_state(mgr).describe() if mgr is not None else "no mig-manager pod on this node",
    ]
    log = ctx.log(mgr, ctx.container(MIG_MANAGER)) if mgr is not None else ""
    pending = catalog.find(log, MODE_CHANGE_PENDING)
    reset = catalog.find(log, RESET_FAILED)
    if state == "failed" and reset is not None and IN_USE.search(log):
        # The reset found the GPUs held (nvidia-smi's words for NVML_ERROR_IN_USE): free them, then apply.
        ns = namespace_of(mgr or {}) or ctx.namespace
        restart = ctx.stack.render(Fix.delete_pod(ns, name_of(mgr))) if mgr is not None else "delete its pod"
        free = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "unload the nvidia_drm kernel module (rmmod nvidia_drm) and stop the other GPU clients "
                "(nvidia-persistenced, fabric manager, monitoring agents) so the MIG manager can reset the GPUs; "
                f"then restart the MIG manager so it applies {wanted!r} again on start ({restart}); load nvidia_drm "
                "again afterwards",
                NOT_SIMULATED: "kernel modules holding a GPU are not simulated",
            },
        )
        return node_finding(
            view,
            fid="mig.failed",
            sev=Severity.ERROR,
            link="mig",
            cause=f"the MIG manager could not apply layout {wanted!r}: {reset.entry.cause}",
            evidence=[*evidence, *reset.evidence("mig-manager log")],
            fix=ctx.stack.render(free),
            action=free,
        )
    if state == "failed" and pending is not None:
        # The mode change is written to the GPU and waits for a reset; where the manager could not
        # reset the GPUs, only a reboot commits it. Another layout label would wait the same way.
        reboot = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "reboot the node so the pending MIG mode change takes effect; to let the MIG manager "
                "reboot it itself, set WITH_REBOOT=true in spec.migManager.env of the ClusterPolicy",
                "drain": True,
                NOT_SIMULATED: "a pending MIG mode change is not simulated",
            },
        )
        return node_finding(
            view,
            fid="mig.failed",
            sev=Severity.ERROR,
            link="mig",
            cause=f"the MIG manager could not apply layout {wanted!r}: {pending.entry.cause}",
            evidence=[*evidence, *pending.evidence("mig-manager log")],
            fix=ctx.stack.render(reboot),
            action=reboot,
        )
    if state == "failed":
        return _failed_layout(ctx, view, wanted or "", reason, log, evidence)
    if paused and state == "pending":
        waited = client_stuck(ctx, view, mgr=mgr, evidence=evidence)
        if waited is not None:
            return waited
    if mgr is not None and paused and state == "pending":
        wedged = _wedged(ctx, view, mgr, wanted or "", log, evidence)
        if wedged is not None:
            return wedged
    failing = _manager_failing(ctx, view, mgr, evidence) or host_clients_hang(
        ctx, view=view, mgr=mgr, log=log, evidence=evidence
    )
    if failing is not None:
        return failing
    cancel = Fix(FixOp.LABEL_NODE, view.name, {MIG_CONFIG: None, MIG_CONFIG_STATE: None})
    return node_finding(
        view,
        fid="mig.pending",
        sev=Severity.ERROR,
        link="mig",
        cause=f"the MIG change to {wanted!r} is stuck in {state!r}"
        + (f" ({reason})" if reason else "")
        + "; the device plugin, GFD and exporter stay paused until it finishes, so the node offers no GPUs.",
        evidence=evidence,
        fix=ctx.stack.render(cancel) + "   # cancels the change; or let it finish: the MIG manager needs the GPUs "
        f"free (kubectl drain {view.name} --ignore-daemonsets, then kubectl uncordon {view.name})"
        + (
            f"; or restart the MIG manager so it applies it again on start "
            f"({ctx.stack.render(Fix.delete_pod(namespace_of(mgr) or ctx.namespace, name_of(mgr)))})"
            if mgr is not None
            else ""
        ),
        action=cancel,
    )


def _manager_failing(ctx: Context, view: NodeView, mgr: Obj | None, evidence: list[str]) -> Finding | None:
    """A MIG manager pod that cannot run (crash loop, error) for a reason the catalog knows from its source (a custom
    layout file it is not given, a host file it cannot read): it applies no layout until that is repaired, so the
    repair is the entry's, not cancelling the change. None where the pod runs or says nothing the catalog knows."""
    state = pod_state(mgr) if mgr is not None else None
    if mgr is None or state is None or state.ready or not state.failing:
        return None
    log = ctx.log(mgr, state.container or ctx.container(MIG_MANAGER))
    said = catalog.known_error("\n".join((log, state.last_log, state.message)), "mig")
    if said is None:
        return None
    ns = namespace_of(mgr) or ctx.namespace
    repair = said.entry.repair(view.name, namespace=ns, pod=name_of(mgr))
    # Where the release the manager runs is known to write this (releases.yaml), the release that fixed it first.
    release = release_repair(ctx, view=view, pod=mgr, operand=MIG_MANAGER, shown=showing("log", said.entry.id))
    return node_finding(
        view,
        fid="mig.not-ready",
        sev=Severity.ERROR,
        link="mig",
        cause=f"the MIG manager pod {name_of(mgr)} is {state.status}, so it applies no MIG layout: {said.entry.cause}"
        + (f" {release.cause}" if release else ""),
        evidence=[
            *(e for e in evidence if not e.startswith("pod ")),
            state.describe(),
            *said.evidence("mig-manager log"),
            *(release.evidence if release else ()),
        ],
        fix=f"{release.fix}; otherwise: {repair}" if release else f"# {repair}",
        action=release.action if release else None,
    )


def _wedged(ctx: Context, view: NodeView, mgr: Obj, wanted: str, log: str, evidence: list[str]) -> Finding | None:
    """A change left pending with the operands paused by a MIG manager that no longer works on it: its log says it
    returned before restoring them, or it runs a release whose own history says it does that (releases.yaml,
    mig-paused). Restarting it applies the layout again on start (the repair now); the release that fixed it keeps
    it from coming back. None where neither says so (it may still be waiting for the GPUs)."""
    said = catalog.find(log, *WEDGED)
    release = release_repair(ctx, view=view, pod=mgr, operand=MIG_MANAGER, shown=showing("mig-paused"))
    if said is None and release is None:
        return None
    restart = Fix.delete_pod(namespace_of(mgr) or ctx.namespace, name_of(mgr))
    then = f"; then {release.fix.removeprefix('# ')}" if release else ""
    why = said.entry.cause if said else (release.cause[:1].lower() + release.cause[1:] if release else "")
    return node_finding(
        view,
        fid="mig.pending",
        sev=Severity.ERROR,
        link="mig",
        cause=f"the MIG change to {wanted!r} is stuck in 'pending' and the device plugin, GFD and exporter stay "
        f"paused, so the node offers no GPUs: {why}",
        evidence=[
            *evidence,
            *(said.evidence("mig-manager log") if said else ()),
            *(release.evidence if release else ()),
        ],
        fix=ctx.stack.render(restart) + f"   # on start the MIG manager applies {wanted!r} again and restores the "
        f"paused operands{then}",
        action=restart,
    )


def _mig_unmanaged(ctx: Context, view: NodeView) -> Finding | None:
    """A MIG-capable node the MIG manager was never placed on (no deploy label, no layout label) while
    the operands that enumerate its GPUs fail with nothing the catalog knows: the GPUs' MIG mode was set
    outside the cluster (before the operator came), so no one manages it (NVIDIA/gpu-operator#287)."""
    if (
        view.labels.get(MIG_CAPABLE) != "true"
        or view.labels.get(MIG_CONFIG)
        or deploy_label(MIG_MANAGER) in view.labels
        or operand_daemonset(ctx, MIG_MANAGER) is None
    ):
        return None
    failing = []
    for operand in (DEVICE_PLUGIN, GFD):
        pod = view.pod(operand)
        if pod is None:
            return None
        state = pod_state(pod)
        if not state.failing:
            return None
        if catalog.known_error(ctx.log(pod, state.container or ctx.container(operand)) + "\n" + state.message):
            return None
        failing.append(state.describe())
    if len(set(failing)) < 2:
        # Both fail when the GPUs' MIG mode is the cause; one alone fails for its own reason (its config),
        # and one pod that serves both (gpuchain's node agent) fails for whatever stops it.
        return None
    manage = Fix(FixOp.LABEL_NODE, view.name, {deploy_label(MIG_MANAGER): "true", MIG_CONFIG: "all-disabled"})
    return node_finding(
        view,
        fid="mig.unmanaged",
        sev=Severity.ERROR,
        link="mig",
        cause="the node's GPUs are MIG-capable, the MIG manager was never placed on it (no "
        f"{deploy_label(MIG_MANAGER)} label) and the operands that enumerate its GPUs fail: MIG mode was turned "
        "on outside the cluster, so the GPUs carry no layout the device plugin and GFD can use.",
        evidence=[f"{MIG_CAPABLE}=true, no {MIG_CONFIG} label, no {deploy_label(MIG_MANAGER)} label", *failing],
        fix=ctx.stack.render(manage) + "   # puts the MIG manager on the node; give it the layout you want instead of "
        "all-disabled (e.g. nvidia.com/mig.config=all-1g.5gb), or turn MIG off on the host (nvidia-smi -mig 0)",
        action=manage,
    )


def mig_root(ctx: Context, view: NodeView, *, found: list[Failure] | None = None) -> Finding | None:
    """A MIG state that stops the links above it (the device plugin, GFD and exporter wait for the
    layout): a change that failed or hangs, MIG on GPUs the MIG manager does not manage, GKE's partitioner failing
    (`partition_failed`), or MIG mode on with no MIG device carved (`mig_without_instances`). ``found``: the node's
    `failures`, when the caller has them."""
    stuck = mig_finding(ctx, view) if view.labels.get(MIG_CONFIG) else _mig_unmanaged(ctx, view)
    return stuck or partition_failed(ctx, view) or mig_without_instances(ctx, view, found=found)


def check_mig(ctx: Context, view: NodeView) -> Result:
    """MIG: the requested layout and how far the MIG manager got."""
    wanted = view.labels.get(MIG_CONFIG)
    if not wanted:
        return Result(LinkState.SKIPPED, "MIG not requested")
    finding = mig_finding(ctx, view) or mig_left_on(ctx, view)
    if finding is not None:
        return Result(LinkState.BROKEN, f"{wanted}: {view.labels.get(MIG_CONFIG_STATE)}", (finding,))
    return Result(LinkState.OK, f"{wanted}: {view.labels.get(MIG_CONFIG_STATE, 'unknown')}")


def _layouts(data: dict[str, str] | None) -> list[str] | None:
    """The layout names of a MIG manager ConfigMap's config.yaml (mig-configs), None when the ConfigMap
    is not in the dump or its config cannot be read (then nothing is said about it)."""
    if data is None:
        return None
    try:
        config = yaml.safe_load(data.get(CONFIGMAP_KEY) or "") or {}
    except yaml.YAMLError:
        return None
    layouts = config.get("mig-configs") if isinstance(config, dict) else None
    return sorted(str(k) for k in layouts) if isinstance(layouts, dict) else None


def _failed_layout(ctx: Context, view: NodeView, wanted: str, reason: str, log: str, evidence: list[str]) -> Finding:
    """A layout the MIG manager marked failed, repaired through what it reads: the layout in its ConfigMap
    (name and namespace), or what its log or the state reason says, then applied again. Never giving up
    MIG (all-disabled): the node asked for this layout."""
    mgr = view.pod(MIG_MANAGER)
    ns = namespace_of(mgr or {}) or ctx.namespace
    name = ctx.policy.mig_manager.config.name or DEFAULT_LAYOUTS
    where = f"ConfigMap {ns}/{name} (config.yaml, mig-configs)"
    again = (
        ctx.stack.render(Fix.delete_pod(ns, name_of(mgr)))
        if mgr is not None
        else f"kubectl -n {ns} rollout restart daemonset/{ctx.ds(MIG_MANAGER)}"
    )
    layouts = _layouts(ctx.configmaps.get(name))
    if layouts is not None and wanted not in layouts:
        return node_finding(
            view,
            fid="mig.failed",
            sev=Severity.ERROR,
            link="mig",
            cause=f"the node asks for MIG layout {wanted!r}, which the MIG manager's {where} does not define, so it "
            "applies nothing and marks the change failed.",
            evidence=[*evidence, f"layouts in {ns}/{name}: {', '.join(layouts) or 'none'}"],
            fix=f"kubectl -n {ns} edit configmap {name}   # add layout {wanted!r} under mig-configs in config.yaml, or "
            f"label the node with one it defines: kubectl label node {view.name} {MIG_CONFIG}=<"
            + "|".join(layouts[:6])
            + "> --overwrite",
        )
    said = catalog.known_error("\n".join((log, reason)), "mig")
    named = PROFILE_NAMED.search(said.line) if said is not None and said.entry.id in PROFILE_UNLISTED else None
    if said is not None and named is not None:
        return _profile_unlisted(ctx, view, wanted, named, said, evidence, again)
    # mig-parted's wrapper line names no cause of its own: the layout in the ConfigMap is what to repair.
    release = (
        release_repair(ctx, view=view, pod=mgr, operand=MIG_MANAGER, shown=showing("log", said.entry.id))
        if said is not None
        else None
    )
    if said is not None and release is not None:
        # A defect of the manager's release (releases.yaml): the release that fixed it, the layout applied again.
        cause = f"the MIG manager could not apply layout {wanted!r}: {said.entry.cause} {release.cause}"
        work = f"{release.fix.removeprefix('# ')}; otherwise {said.entry.fix}; then {again}"
        evidence = [*evidence, *release.evidence]
    elif said is not None and said.entry.id != APPLY_FAILED:
        cause = f"the MIG manager could not apply layout {wanted!r}: {said.entry.cause}"
        work = f"{said.entry.fix}; then restart the MIG manager so it applies {wanted!r} again ({again})"
    elif MODE_STEP in log and CONFIG_STEP not in log.rsplit(MODE_STEP, 1)[1]:
        cause = (
            f"the MIG manager stopped at the MIG mode change for layout {wanted!r}: the mode did not take effect, "
            "which on most GPUs (and in VMs always) needs a GPU reset the node could not do or a reboot"
        )
        work = (
            f"reboot the node so the pending MIG mode change takes effect (kubectl drain {view.name} "
            "--ignore-daemonsets first), then the MIG manager applies the layout on start; to let it reboot the "
            "node itself, set WITH_REBOOT=true in spec.migManager.env of the ClusterPolicy"
        )
    else:
        cause = f"the MIG manager could not apply layout {wanted!r} from its {where}" + (
            f": {reason}." if reason else "."
        )
        work = (
            f"make layout {wanted!r} in {where} one this node's GPUs take (its device-filter matches their PCI "
            "device ID, and every MIG profile it names is one nvidia-smi mig -lgip lists on the node), then "
            f"restart the MIG manager so it applies it again ({again})"
        )
    action = Fix(FixOp.NODE, view.name, {"action": work, "fact": "mig-applied"})
    fix = ctx.stack.render(action)
    if said is not None and release is not None and release.action is not None:
        # The manager's release is set in the cluster (its policy or DaemonSet), not on the node.
        action, fix = release.action, f"{release.fix}; otherwise {said.entry.fix}; then {again}"
    return node_finding(
        view,
        fid="mig.failed",
        sev=Severity.ERROR,
        link="mig",
        cause=cause,
        evidence=[*evidence, *(said.evidence("mig-manager log" if said.line in log else "says") if said else ())],
        fix=fix,
        action=action,
    )


#: mig-parted's words for a layout's profile this GPU and driver do not list (catalog.yaml), and in them the
#: profile as the layout writes it and, where mig-parted says it, the name the GPU lists for that slice (logrus
#: escapes the quotes of %q inside its msg="...").
PROFILE_UNLISTED = ("mig-parted.unsupported-mig-device", "mig-parted.profile-not-found")
PROFILE_NAMED = re.compile(r'unsupported MIG Device specified (\S+), expected (\S+) instead|MIG profile \\?"([^"\\]+)')
#: The ConfigMap a fix creates for layouts of the user's own: the operator rewrites its default one.
OWN_LAYOUTS = "custom-mig-parted-config"


def _profile_unlisted(
    ctx: Context,
    view: NodeView,
    wanted: str,
    named: re.Match[str],
    said: catalog.Match,
    evidence: list[str],
    again: str,
) -> Finding:
    """A layout that names a MIG profile by a name this GPU's driver does not use (drivers name a profile by the
    memory they give it): the repair writes the name the GPU lists into the layouts the MIG manager reads, in a
    ConfigMap the operator does not rewrite, or moves the node to a driver that uses the layout's name."""
    written, listed = named.group(1) or named.group(3), named.group(2)
    mgr = view.pod(MIG_MANAGER)
    ns = namespace_of(mgr or {}) or ctx.namespace
    name = ctx.policy.mig_manager.config.name or DEFAULT_LAYOUTS
    driver = f"or move the node to a driver branch that names this profile {written!r}"
    if listed and name == DEFAULT_LAYOUTS and ctx.policy_obj is not None:
        # The layouts' mig-devices key each profile as "<name>": <count>; the layout names stay as they are.
        use = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"migManager": {"config": {"name": OWN_LAYOUTS}}}})
        swap = f's/"{re.escape(written)}":/"{listed}":/g'
        fix = (
            f"kubectl -n {ns} get configmap {name} -o jsonpath='{{.data.config\\.yaml}}' | sed '{swap}' > config.yaml "
            f"&& kubectl -n {ns} create configmap {OWN_LAYOUTS} --from-file=config.yaml && {ctx.stack.render(use)}   "
            f"# layout {wanted!r} with the profile this GPU lists, {listed}, in a ConfigMap of your own "
            f"(spec.migManager.config.name; the operator rewrites {name}); {driver}; then {again}"
        )
    else:
        fix = (
            f"kubectl -n {ns} edit configmap {name}   # in config.yaml, layout {wanted!r}: under mig-devices write "
            f"{listed or 'a profile nvidia-smi mig -lgip lists on the node'} for {written}"
            + (
                f" (a ConfigMap of your own that spec.migManager.config.name names: the operator rewrites {name})"
                if name == DEFAULT_LAYOUTS
                else ""
            )
            + f"; {driver}; then {again}"
        )
    lists = f"which this GPU's driver lists as {listed}" if listed else "which this GPU's driver does not list"
    return node_finding(
        view,
        fid="mig.failed",
        sev=Severity.ERROR,
        link="mig",
        cause=f"the MIG manager could not apply layout {wanted!r}: it names MIG profile {written}, {lists} (a driver "
        "names each profile by the memory it gives it), so the MIG manager undoes the layout and marks it failed.",
        evidence=[*evidence, *said.evidence("mig-manager log")],
        fix=fix,
    )
