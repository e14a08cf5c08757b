"""The device plugin's registration as the node's capacity shows it: no GPU announced (the plugin not registered
with the kubelet, or no pod of it on the node), and the numbers of an announced node (GPUs lost, missing or stale
resources, time-slicing replicas, MIG resources)."""

from __future__ import annotations

from gpuchain.common.labels import DEVICE_PLUGIN_CONFIG, MIG_CONFIG
from gpuchain.doctor import catalog
from gpuchain.doctor.context import NO_POLICY, Context, NodeView, replicas_in
from gpuchain.doctor.links.common import GPU_COUNT, Result, gpus_present, node_finding, operand_daemonset
from gpuchain.doctor.links.gpu_count import missing_gpus
from gpuchain.doctor.links.kubelet_defects import allocatable_held
from gpuchain.doctor.links.plugin_health import gpu_lost
from gpuchain.doctor.links.stale_resource import stale_finding, stale_resources
from gpuchain.doctor.links.toolkit import NO_DEVICES
from gpuchain.doctor.model import Finding, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.pods import PodState
from gpuchain.doctor.stacks.inferred_policy import unread
from gpuchain.kube.objects import name_of
from gpuchain.operator.operands import DEVICE_PLUGIN
from gpuchain.remediation.model import find_condition, node_view


def count_findings(
    ctx: Context, *, view: NodeView, capacity: dict[str, int], allocatable: dict[str, int]
) -> list[Finding]:
    """The numbers of a node whose capacity announces GPUs: resources stale or short of their capacity (a GPU lost),
    GPUs missing from the count, time-slicing replicas and MIG resources beyond the physical GPUs."""
    findings: list[Finding] = []
    physical = int(view.labels[GPU_COUNT]) if view.labels.get(GPU_COUNT, "").isdigit() else None
    # The faults annotation is parsed only where the node's GPUHealthy condition says a GPU is unhealthy.
    condition = find_condition(view.node)
    reported = condition is not None and not condition.healthy and bool(node_view(view.node).faults)
    stale = [] if reported else stale_resources(view, capacity, allocatable)
    findings += [stale_finding(view, res, capacity, allocatable) for res in stale]
    short = [
        (res, cap, allocatable.get(res, cap))
        for res, cap in sorted(capacity.items())
        if allocatable.get(res, cap) < cap and res not in stale
    ]
    if reported and not short:
        res = min(capacity)
        short = [(res, capacity[res], allocatable.get(res, capacity[res]))]
    # A kubelet that keeps a re-registered plugin's devices out of allocatable is the node's, not a lost GPU.
    findings += [
        allocatable_held(ctx, view, res=res, cap=cap, alloc=alloc)
        or gpu_lost(ctx, view=view, res=res, cap=cap, alloc=alloc, physical=physical)
        for res, cap, alloc in short
    ]
    whole = not short and not any(r.startswith("nvidia.com/mig-") for r in capacity)
    gpus = capacity.get("nvidia.com/gpu", 0)
    missing = missing_gpus(ctx, view, advertised=gpus, labelled=physical) if whole else None
    findings += [missing] if missing is not None else []
    if physical is None:
        return findings
    gpu_cap = capacity.get("nvidia.com/gpu", 0) + capacity.get("nvidia.com/gpu.shared", 0)
    mig_total = sum(v for k, v in capacity.items() if k.startswith("nvidia.com/mig-"))
    product = view.labels.get("nvidia.com/gpu.product", "")
    if gpu_cap > physical and "-MIG-" not in product:
        key = view.labels.get(DEVICE_PLUGIN_CONFIG) or ctx.policy.device_plugin.config.default or "default"
        configs = ctx.plugin_configs() or {}
        replicas = replicas_in(configs.get(key, "")) or (gpu_cap // physical if physical else None)
        source = (
            f"key {key!r} of the device plugin's ConfigMap ({NO_POLICY} to name it)"
            if ctx.policy_unknown or unread(ctx.stack, "devicePlugin.config")
            else f"ConfigMap {ctx.namespace}/{ctx.policy.device_plugin.config.name} key {key!r}"
        )
        # Only a label the node carries can be removed; a shared default is changed in the policy.
        if view.labels.get(DEVICE_PLUGIN_CONFIG):
            drop = Fix(FixOp.LABEL_NODE, view.name, {DEVICE_PLUGIN_CONFIG: None})
            unshare: Fix | None = drop
            unshare_text = ctx.stack.render(drop) + "   # if the sharing is not intended"
        else:
            unshare = None
            unshare_text = (
                f"remove sharing.timeSlicing from key {key!r} of ConfigMap {ctx.namespace}/"
                f"{ctx.policy.device_plugin.config.name} (kubectl -n {ctx.namespace} edit configmap "
                f"{ctx.policy.device_plugin.config.name}) if the sharing is not intended"
            )
        findings.append(
            node_finding(
                view,
                fid="device-plugin.time-slicing",
                sev=Severity.WARNING,
                link="device-plugin",
                cause=f"capacity shows {gpu_cap} nvidia.com/gpu on {physical} physical GPUs because the device plugin "
                f"config in use shares each GPU {replicas} ways by time-slicing (no memory isolation); fine for small "
                "inference, wrong for training, and easy to leave behind by accident.",
                evidence=[
                    f"capacity nvidia.com/gpu {gpu_cap}, {GPU_COUNT}={physical}",
                    f"nvidia.com/gpu.replicas={view.labels.get('nvidia.com/gpu.replicas', '?')}, "
                    f"nvidia.com/gpu.sharing-strategy={view.labels.get('nvidia.com/gpu.sharing-strategy', '?')}",
                    f"config source: {source}"
                    + (f" (node label {DEVICE_PLUGIN_CONFIG})" if view.labels.get(DEVICE_PLUGIN_CONFIG) else ""),
                ],
                fix=unshare_text,
                action=unshare,
            )
        )
    mig_gpu_single = gpu_cap > physical and "-MIG-" in product
    if mig_total > physical or mig_gpu_single:
        total = mig_total or gpu_cap
        layout = view.labels.get(MIG_CONFIG, "?")
        names = ", ".join(f"{k}={v}" for k, v in sorted(capacity.items()))
        findings.append(
            node_finding(
                view,
                fid="device-plugin.mig-resources",
                sev=Severity.INFO,
                link="device-plugin",
                cause=f"capacity shows {total} GPU devices on {physical} physical GPUs because MIG is on (layout "
                f"{layout}): each GPU is cut into isolated slices, so this count is expected, not a fault.",
                evidence=[f"capacity {names}", f"{GPU_COUNT}={physical}", f"{MIG_CONFIG}={layout}"],
                fix=ctx.stack.render(Fix(FixOp.LABEL_NODE, view.name, {MIG_CONFIG: "all-disabled"}))
                + "   # only if whole GPUs are wanted",
            )
        )
    return findings


def _no_pod(ctx: Context) -> str:
    """What to say when the plugin's DaemonSet admits the node (no taint, selector or refusal found) yet has
    no pod on it: a restart makes no pod where the DaemonSet makes none, so no action is named; its own
    counts are quoted."""
    ds = operand_daemonset(ctx, DEVICE_PLUGIN)
    if ds is None and ctx.stack.chart is not None:
        chart = ctx.stack.chart
        install = Fix(
            FixOp.INSTALL,
            "",
            {"release": chart.release, "chart": chart.chart, "namespace": ctx.namespace, "upgrade": True},
        )
        return ctx.stack.render(install) + f"   # no {ctx.ds(DEVICE_PLUGIN)} DaemonSet runs a device plugin here"
    if ds is None:
        return f"# no {ctx.ds(DEVICE_PLUGIN)} DaemonSet runs a device plugin for this node; install the stack's plugin"
    status = ds.get("status") or {}
    return (
        f"# {name_of(ds)} admits this node but has no pod on it (desired {status.get('desiredNumberScheduled', '?')}, "
        f"current {status.get('currentNumberScheduled', '?')}, ready {status.get('numberReady', '?')}) and recorded "
        "no refusal; a restart of the DaemonSet makes none either"
    )


def not_registered(
    ctx: Context, *, view: NodeView, state: PodState | None, log: str, capacity: dict[str, int]
) -> Result:
    """A node with GPUs whose capacity announces none: the plugin not registered with the kubelet (or registered with
    no devices, or its registration lost), with what its log says of it and the repair: a new pod registers anew,
    the catalog's repair where its own words say why it cannot, or what the DaemonSet shows where it has no pod."""
    registered = catalog.find(log, "k8s-device-plugin.registered")
    problem = catalog.known_error(log) or catalog.find(log, NO_DEVICES)
    odd = catalog.unknown_error(log)
    log_evidence = (
        list(problem.evidence())
        if problem
        else [f"unrecognised: {odd}"]
        if odd
        else [f"log: {registered.line} (but the kubelet did not keep it)", registered.entry.cite()]
        if registered
        else ["log has no 'Registered device plugin' line"]
        if log
        else []
    )
    shown = ", ".join(f"{k}: {v}" for k, v in sorted(capacity.items())) or "no nvidia.com/* resource"
    # The plugin runs but the kubelet does not hold its registration (NVIDIA/k8s-device-plugin#1228):
    # a new pod registers anew, as the plugin does on its own when kubelet.sock is created again.
    # Unless the plugin's own log names why it cannot register (a kubelet of another device plugin API
    # version, the kubelet's socket not where it looks): then a new pod fails the same way, and the
    # repair is what that catalog entry says.
    own = problem.entry if problem is not None and problem.entry.link == "device-plugin" else None
    restart = (
        Fix.delete_pod(state.restart_in(ctx.namespace), state.name, fact="registration")
        if state is not None and own is None
        else None
    )
    present = gpus_present(view)
    cause = (
        "the node has GPUs but its capacity announces none: the device plugin is not registered with "
        "the kubelet (or registered with no devices), so no pod can be given one; this is not "
        "'all GPUs in use'."
    )
    if registered and not problem:
        cause = (
            "the node has GPUs and the running device plugin logged its registration, but the kubelet no longer "
            "holds it (capacity reads none or 0, as after a kubelet restart the plugin missed; "
            "NVIDIA/k8s-device-plugin#1228), so no pod can be given a GPU; this is not 'all GPUs in use'."
        )
    return Result(
        LinkState.BROKEN,
        "no GPU announced in node capacity",
        (
            node_finding(
                view,
                fid="device-plugin.not-registered",
                sev=Severity.ERROR,
                link="device-plugin",
                cause=cause,
                evidence=[
                    f"node {view.name} capacity: {shown}",
                    f"GPUs present: {present}" if present else "",
                    state.describe() if state else "",
                    *log_evidence,
                ],
                fix=ctx.stack.render(restart) + "   # its DaemonSet starts it again and it registers anew"
                if restart
                else f"# {own.repair(view.name, namespace=state.restart_in(ctx.namespace), pod=state.name)}"
                if own and state is not None
                else f"# {own.repair(view.name)}"
                if own
                else _no_pod(ctx),
                action=restart,
            ),
        ),
    )
