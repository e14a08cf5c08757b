"""GPUs the device plugin took out of allocatable: a GPU lost or failed (the numbers, the pods bound to it, the
repair its Xid needs by the one Xid table), and GPUs it marked unhealthy on application Xids while they still serve
(the plugin restarted, and the release or setting that skips those Xids)."""

from __future__ import annotations

import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.kernel_log import Seen, scrape_gpus
from gpuchain.doctor.links.common import Known, node_finding
from gpuchain.doctor.links.releases import set_release, with_release
from gpuchain.doctor.links.xid_events import PLUGIN_XID, XID_NUMBER, gpu_step
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.pods import pod_state
from gpuchain.doctor.releases import image_version, version_of
from gpuchain.gpu import xid as xids
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN
from gpuchain.remediation.gpuloop import loop_evidence
from gpuchain.remediation.model import CONDITION_TYPE, PODS_ANNOTATION, node_view


def gpu_lost(ctx: Context, *, view: NodeView, res: str, cap: int, alloc: int, physical: int | None) -> Finding:
    """A GPU fell off the bus (or went unhealthy): the numbers, the published fault, the pods bound to it."""
    health = node_view(view.node)
    condition = health.condition
    bound = sorted(
        {
            "/".join(ref.split("/")[:2])
            for f in health.faults.values()
            for u in f.covers
            for ref in health.pods.get(u, ())
        }
    )
    gpu_pods = [p for p in view.workloads if pod_gpu_requests(p)]
    hung = sorted(
        f"{p['metadata'].get('namespace')}/{p['metadata']['name']}" for p in gpu_pods if not pod_state(p).ready
    )
    holders = sorted(f"{p['metadata'].get('namespace')}/{p['metadata']['name']}" for p in gpu_pods)
    events = [str(e.get("message")) for e in view.events if e.get("involvedObject", {}).get("kind") == "Node"]
    victims = bound or hung
    evidence = [
        f"{res}: allocatable {alloc}, capacity {cap}" + (f", {physical} GPUs on the node" if physical else ""),
        f"condition {CONDITION_TYPE}={condition.status} ({condition.reason}): {condition.message}"
        if condition is not None and not condition.healthy
        else "",
        *(f"event: {m}" for m in events[:2]),
        f"pods bound to the failed GPU ({PODS_ANNOTATION}): {', '.join(bound)}" if bound else "",
        f"GPU pods not ready (likely on the lost GPU): {', '.join(hung)}" if hung and not bound else "",
        f"GPU pods on the node: {', '.join(holders[:8])}" if holders and not victims else "",
    ]
    plugin = view.pod(DEVICE_PLUGIN)
    plugin_log = ctx.log(plugin, ctx.container(DEVICE_PLUGIN)) if plugin is not None else ""
    # NVIDIA's plugin and gpuchain's log the XID and the GPU it hit (internal/rm/health.go).
    hits = [ln.strip() for ln in plugin_log.splitlines() if PLUGIN_XID.regex.search(ln)]
    evidence += [*(f"device plugin log: {ln}" for ln in hits[:3]), *([PLUGIN_XID.cite()] if hits else [])]
    evidence += loop_evidence(view.node)  # where gpuchain's repair loop stands with each GPU
    answering = not any(f.lost for f in health.faults.values()) and not catalog.find(
        "\n".join([plugin_log, *events]), "nvml.gpu-lost"
    )
    marked = _application_xids(hits) if answering else ()
    own = _own_mark(ctx, view, plugin, plugin_log, evidence) if answering and not hits else None
    if own is not None:
        return own
    if plugin is not None and marked:
        return _xid_marked(ctx, view, plugin, marked, evidence)
    # A GPU off the bus (Xid 79: NVIDIA restarts the machine) is the node's hardware: the plugin only relays it.
    off_bus = any(xids.describe(c).needs() is xids.Resolution.REBOOT_NODE for c in _codes(hits))
    # One delete per pod: kubectl applies the last -n to every name of one command, so pods of several
    # namespaces in one command would be looked for in the last namespace only.
    targets = " && ".join(f"kubectl delete pod -n {v.split('/')[0]} {v.split('/')[1]}" for v in victims[:3])
    # Only pods it can name go in the command; the rest of the work is said as a comment, so the line pastes.
    evict = f"kubectl cordon {view.name}" + (
        f" && {targets}   # then: " if targets else "   # then delete the pods on the lost GPU; "
    )
    # The Xids it logged are repaired as the one Xid table says for each, on the GPU the line names; a GPU taken
    # out with no such Xid logged (NVML lost it, gpuchain's repair loop published the fault) gets the general repair.
    repair = _xid_repair(ctx, view, hits) or LOST_REPAIR
    action = Fix(FixOp.HARDWARE, view.name, {"action": repair, "fact": "replace-gpu"})
    return node_finding(
        view,
        fid="gpu.lost",
        sev=Severity.ERROR,
        link="node" if off_bus else "device-plugin",
        cause=f"{max(cap - alloc, len(health.faults))} of {cap} {res} devices are unhealthy (a GPU fell off the bus or "
        "failed); the device plugin stopped handing them out, but pods already bound to them keep running on a "
        "dead GPU until they are evicted.",
        evidence=evidence,
        fix=evict + ctx.stack.render(action).removeprefix("# "),
        action=action,
    )


def _own_mark(ctx: Context, view: NodeView, plugin: Obj | None, log: str, evidence: list[str]) -> Finding | None:
    """GPUs the plugin marked unhealthy for a reason of its own, logged in words of its own that the catalog knows
    (NVML refusing it the health events of an older GPU), with no Xid and no GPU lost: the GPUs serve, and the repair
    is that line's (the plugin's release that stopped marking them, or its setting), not the hardware's."""
    if plugin is None:
        return None
    said = catalog.known_error(log, link="device-plugin")
    if said is None or said.entry.component != NVIDIA_PLUGIN:
        return None
    known = Known(
        cause=f"the device plugin marked the node's GPUs unhealthy for a reason of its own, not a GPU failure: "
        f"{said.entry.cause}",
        evidence=(*(e for e in evidence if e), *said.evidence("device plugin log")),
        action=None,
        fix=f"# {said.entry.fix}",
    )
    known = with_release(ctx, view=view, pod=plugin, operand=DEVICE_PLUGIN, known=known, log=log)
    return node_finding(
        view,
        fid="device-plugin.marked-unhealthy",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=known.cause,
        evidence=list(known.evidence),
        fix=known.fix,
        action=known.action,
    )


#: The repair of a GPU the plugin took out where it logged no Xid that names one (NVML lost the GPU, or gpuchain's
#: repair loop published the fault).
LOST_REPAIR = "reset the GPU (nvidia-smi -r) or reboot the node; replace the GPU if it falls off again"
#: The GPU the plugin's XidCriticalError line names: "on Device=%s" with its UUID (internal/rm/health.go@v0.20.0), or
#: its device name then ", uuid=%s" (GKE's plugin, as sim/scenarios/gke-gpu-fell-off-bus.yaml quotes it).
XID_DEVICE = re.compile(r"Device=([^\s,;]+)(?:, uuid=([^\s,;]+))?")


def _xid_repair(ctx: Context, view: NodeView, hits: list[str]) -> str:
    """The repair of the Xids the plugin's XidCriticalError ``hits`` name that need the GPU itself repaired, each as
    the one Xid table says (`xid_events`: a reset or a reboot, and what to check after it), on the GPU the line names
    where the node's exporter scrape gives that GPU's bus id ("a GPU" where none does); "" where none needs it."""
    gpus, _ = scrape_gpus(ctx, view)
    bus_of = {gpu.uuid: bus for bus, gpu in gpus.items() if gpu.uuid}
    seen: dict[tuple[int, str], Seen] = {}
    for line in hits:
        code, device = XID_NUMBER.search(line), XID_DEVICE.search(line)
        if code is None:
            continue
        uuid = (device.group(2) or device.group(1)) if device else ""
        one = seen.setdefault((int(code.group(1)), uuid), Seen(code=int(code.group(1)), bus=bus_of.get(uuid)))
        one.add(line, "device plugin log", 1, warned=True)
        one.count = len(one.lines)  # the plugin logs each occurrence: its lines are the Xid's count
    repairs = [s for s in seen.values() if xids.describe(s.code).needs().repairs]
    return "; ".join(gpu_step(s, gpus) for s in repairs[:4])


#: The release of NVIDIA's device plugin from which it skips each application Xid it did not always skip: v0.9.0 and
#: earlier skip 31, 43 and 45 only (nvidia.go@v0.9.0 checkHealth); v0.10.0 adds 13 and 68 and reads
#: DP_DISABLE_HEALTHCHECKS as a list of more Xids to skip (cmd/nvidia-device-plugin/nvidia.go@v0.10.0
#: applicationErrorXids, getAdditionalXids); v0.17.1 adds 109 (internal/rm/health.go@v0.17.1, pull request #1171).
SKIPPED_SINCE = {13: "v0.10.0", 68: "v0.10.0", 109: "v0.17.1"}
#: The repository name of NVIDIA's device plugin image (nvcr.io/nvidia/k8s-device-plugin), whose releases those are.
NVIDIA_PLUGIN = "k8s-device-plugin"
#: NVIDIA's plugin's variable naming Xids it skips besides its own list (gpuchain.gpu.xid reads it the same way).
DISABLE_XIDS = xids.ENV_DISABLE


def _application_xids(lines: list[str]) -> tuple[int, ...]:
    """The Xids the plugin's XidCriticalError ``lines`` name when every one of them is an application error: one of
    the Xids NVIDIA's plugin itself skips as "Application errors: the GPU should still be healthy" (its
    ignoredXids: `gpuchain.gpu.xid.default_ignored`), or one NVIDIA's Xid catalog clears by restarting the
    application; () when a line names another (a hardware Xid: the GPU itself needs the repair) or none does."""
    codes = _codes(lines)
    return tuple(codes) if codes and all(xids.still_serves(c) for c in codes) else ()


def _codes(lines: list[str]) -> list[int]:
    """The Xid numbers the plugin's XidCriticalError ``lines`` name, once each, in order."""
    return sorted({int(m.group(1)) for ln in lines if (m := XID_NUMBER.search(ln))})


def _xid_marked(ctx: Context, view: NodeView, plugin: Obj, codes: tuple[int, ...], evidence: list[str]) -> Finding:
    """GPUs the device plugin took out on application Xids while the GPU itself still answers: NVIDIA's plugin never
    returns a device it marked unhealthy to healthy (internal/plugin/server.go@v0.20.0: "there is no way to recover
    from the Unhealthy state"), so the mark outlives the application that caused it until the plugin restarts. The
    repair is the restart; what keeps it from coming back is the release that skips those Xids, or
    DP_DISABLE_HEALTHCHECKS naming them."""
    state = pod_state(plugin)
    restart = Fix.delete_pod(
        state.restart_in(ctx.namespace),
        state.name,
        **{NOT_SIMULATED: "an application Xid's mark in the plugin is not a scenario fact"},
    )
    named = ", ".join(f"{c} ({xids.describe(c).meaning})" for c in codes)
    return node_finding(
        view,
        fid="device-plugin.xid-marked",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=f"the device plugin marked GPUs unhealthy on Xid {named}, which NVIDIA's plugin skips or NVIDIA's Xid "
        "catalog clears by restarting the application: application errors (the GPU should still be healthy, and "
        "nothing here says it stopped answering), but the plugin never clears a mark it made, so the GPU stays out "
        "of allocatable until the plugin restarts; no reset or replacement is needed.",
        evidence=[*evidence, *(f"Xid {c}: {xids.describe(c).meaning} ({xids.source()})" for c in codes)],
        fix=ctx.stack.render(restart) + "   # restarts the device plugin, which announces the GPUs healthy again; "
        f"so the next Xid {codes[0]} does not take one out again: {_skip_xids(ctx, plugin, codes)}",
        action=restart,
    )


def _skip_xids(ctx: Context, pod: Obj, codes: tuple[int, ...]) -> str:
    """The lasting change for a plugin that marks GPUs unhealthy on application Xids: NVIDIA's release that skips
    them where the running one predates it, else DP_DISABLE_HEALTHCHECKS naming them (its list form from v0.10.0)."""
    container: Obj = next(iter((pod.get("spec") or {}).get("containers") or []), {})
    name, tag = image_version(str(container.get("image", "")))
    listed = ",".join(map(str, codes))
    if name != NVIDIA_PLUGIN:
        return f"take Xid {listed} out of the Xids the plugin's own health check settings act on"
    running = version_of(tag)
    since = sorted((version_of(SKIPPED_SINCE[c]) or (0, 0, 0), SKIPPED_SINCE[c]) for c in codes if c in SKIPPED_SINCE)
    newer = [v for parsed, v in since if running is not None and running < parsed]
    if newer:
        image = f"{str(container.get('image', '')).rpartition(':')[0]}:{newer[-1]}"
        ctr = str(container.get("name", ""))
        _, move = set_release(ctx, pod=pod, operand=DEVICE_PLUGIN, container=ctr, image=image)
        return f"{move}   # {newer[-1]} and later skip Xid {', '.join(map(str, codes))} as application errors"
    ns = namespace_of(pod) or ctx.namespace
    if ns == ctx.namespace and ctx.policy_obj is not None:
        # The operator renders the plugin's DaemonSet from its policy: the variable goes there, or it is undone.
        kept = [{"name": e.name, "value": e.value} for e in ctx.policy.device_plugin.env if e.name != DISABLE_XIDS]
        env = [*kept, {"name": DISABLE_XIDS, "value": listed}]
        return ctx.stack.render(Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"devicePlugin": {"env": env}}}))
    target = f"{ns}/{owner_ds(pod) or ctx.ds(DEVICE_PLUGIN)}"
    return ctx.stack.render(Fix(FixOp.SET_ENV, target, {"env": {DISABLE_XIDS: listed}}))
