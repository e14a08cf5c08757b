"""The device plugin link: its config, its pod, its registration (the node's capacity) and the numbers
(lost GPUs, time-slicing, MIG resources); and plugin pods placed on nodes with no GPU."""

from __future__ import annotations

import dataclasses
import re

from gpuchain.common.labels import DEVICE_PLUGIN_CONFIG, MIG_CONFIG, PAUSED_FOR_MIG_CHANGE
from gpuchain.doctor import catalog
from gpuchain.doctor.context import NO_POLICY, Context, NodeView, replicas_in
from gpuchain.doctor.links.common import (
    GPU_COUNT,
    NVML_FOUND,
    Result,
    gpus_present,
    node_finding,
    operand_daemonset,
    operand_log,
    opted_out,
)
from gpuchain.doctor.links.deployed import elsewhere_unplaced, unscheduled
from gpuchain.doctor.links.dra_plugin import check_dra_plugin, check_gpuchain_dra
from gpuchain.doctor.links.failures import not_ready
from gpuchain.doctor.links.gpu_count import missing_gpus
from gpuchain.doctor.links.mig import mig_finding
from gpuchain.doctor.links.mig_empty import layout_repair
from gpuchain.doctor.links.mig_mixed import mixed_refusal
from gpuchain.doctor.links.releases import release_repair, set_release
from gpuchain.doctor.links.stale_resource import stale_finding, stale_resources
from gpuchain.doctor.links.toolkit import (
    NO_DEVICES,
    NO_NVML,
    NVML_DEVICES_DENIED,
    devices_denied,
    needs_sys_admin,
    nvml_evidence,
    runtime_not_default,
)
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.owners import HELM_RELEASE, chart_of, owner_daemonset, owner_ds
from gpuchain.doctor.pods import PodState, pod_state
from gpuchain.doctor.releases import defect, image_version, showing, version_of
from gpuchain.doctor.snapshot import PRODUCT
from gpuchain.doctor.stacks.base import GPU_NODE_LABELS, is_dra_plugin, is_gpu_node
from gpuchain.gpu import xid as xids
from gpuchain.kube.allocator import DRA, allocator_of
from gpuchain.kube.gpu_resources import node_gpu_resources, pod_gpu_requests
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN, deploy_label, enabled
from gpuchain.remediation.gpuloop import loop_evidence
from gpuchain.remediation.model import CONDITION_TYPE, PODS_ANNOTATION, find_condition, node_view

#: What NVIDIA's config-manager and gpuchain's plugin write when the config key does not exist (catalog.yaml).
CONFIG_MISSING = (
    "k8s-device-plugin.config-does-not-exist",
    "gpuchain-device-plugin.config-key-missing",
    "k8s-device-plugin.unable-to-load-config",
)


def _config_missing(ctx: Context, view: NodeView) -> Finding | None:
    if "configmaps" in ctx.snapshot.absent or ctx.policy_unknown:
        return None  # a dump without the stack's ConfigMaps or the policy naming one: nothing to compare
    labelled = view.labels.get(DEVICE_PLUGIN_CONFIG)
    key = labelled or ctx.policy.device_plugin.config.default
    if not key:
        return None
    configs = ctx.plugin_configs()
    if not labelled and configs is None:
        return None
    pod = view.pod(DEVICE_PLUGIN)
    state = pod_state(pod) if pod is not None else None
    log = (
        operand_log(ctx, view=view, operand=DEVICE_PLUGIN, container=state.container, last=state.last_log)
        if state
        else ""
    )
    said = catalog.find(log, *CONFIG_MISSING)
    named = ctx.policy.device_plugin.config.name
    if named and named not in ctx.configmaps:
        return _configmap_missing(ctx, view, name=named, key=key, state=state)
    if configs is None and said is None and catalog.known_error(log, "device-plugin") is not None:
        # The configs are out of sight (a chart's own ConfigMap) and the plugin names another failure of its own:
        # its words, read by its link's check, outrank a guess that the label's config is missing.
        return None
    # The ConfigMap the plugin reads holds the key: fine, unless the plugin itself says it is missing
    # (its words outrank what the dump shows: a mount of another map, a key added after it started).
    if configs is not None and key in configs and said is None:
        return None
    cm = ", ".join(ctx.plugin_configmaps())
    keys = ", ".join(sorted(configs or {})) or "none"
    if configs is None and state is not None and state.ready and said is None:
        # No ClusterPolicy names the plugin's ConfigMap (a standalone plugin's chart mounts its own), so
        # the doctor cannot see the configs; a missing key stops the plugin (its config-manager fails),
        # and this one runs and says nothing of it: the label names a config the plugin has.
        return None
    where = (
        f"ConfigMap {ctx.namespace}/{cm} (keys: {keys})"
        if cm
        else "no ConfigMap (spec.devicePlugin.config.name is empty)"
    )
    default = ctx.policy.device_plugin.config.default
    if labelled:
        source = f"the node label {DEVICE_PLUGIN_CONFIG}={key}"
        usable = default if default and configs and default in configs else None
        action = Fix(FixOp.LABEL_NODE, view.name, {DEVICE_PLUGIN_CONFIG: usable})
    else:
        source = f"spec.devicePlugin.config.default={key} of ClusterPolicy {ctx.policy_name}"
        existing = sorted(configs or {})[:1]
        action = Fix(
            FixOp.PATCH_POLICY,
            ctx.policy_name,
            {"spec": {"devicePlugin": {"config": {"default": existing[0] if existing else ""}}}},
        )
    fix = ctx.stack.render(action)
    return node_finding(
        view,
        fid="device-plugin.config-missing",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=f"{source} names a config that {where} does not have, so the device plugin refuses to start.",
        evidence=[source, where, state.describe() if state else "", *(said.evidence() if said else ())],
        fix=fix,
        action=action,
    )


#: The kubelet's Event when a pod's ConfigMap volume names no ConfigMap (pkg/volume/configmap: "configmap %q not
#: found", under operation_generator's "MountVolume.SetUp failed for volume %q : %v").
FAILED_MOUNT = "FailedMount"


def _configmap_missing(ctx: Context, view: NodeView, *, name: str, key: str, state: PodState | None) -> Finding:
    """The policy names a plugin ConfigMap that does not exist: the operator still mounts it, so the plugin's pod
    never starts (its volume cannot be set up). The ConfigMap is created with the key the policy's default names,
    holding a config v1 that keeps the plugin's defaults; dropping the policy's config is the other repair."""
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ctx.namespace}}
    action = Fix(FixOp.CREATE, "", {**config, "data": {key: "version: v1\n"}})
    mounts = [
        f"event {FAILED_MOUNT} on {(e.get('involvedObject') or {}).get('name')}: {e.get('message')}"
        for e in view.events
        if e.get("reason") == FAILED_MOUNT and f'"{name}"' in str(e.get("message", ""))
    ]
    return node_finding(
        view,
        fid="device-plugin.config-missing",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=f"spec.devicePlugin.config.name of {ctx.policy_ref} names ConfigMap {ctx.namespace}/{name}, which does "
        "not exist: the operator mounts it into the device plugin's pod, whose volume cannot be set up, so the plugin "
        "never starts.",
        evidence=[f"no ConfigMap {ctx.namespace}/{name}", *mounts[:1], state.describe() if state else ""],
        fix=ctx.stack.render(action) + f"   # config {key!r} with the plugin's defaults (add your settings to it); "
        f"or drop spec.devicePlugin.config (name and default) from {ctx.policy_ref} to run the plugin without one",
        action=action,
    )


def _lost(ctx: Context, view: NodeView, res: str, cap: int, alloc: int, physical: int | None) -> Finding:
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
    xid = catalog.entry("k8s-device-plugin.xid-critical")
    hits = [ln.strip() for ln in plugin_log.splitlines() if xid.regex.search(ln)]
    evidence += [*(f"device plugin log: {ln}" for ln in hits[:3]), *([xid.cite()] if hits else [])]
    evidence += loop_evidence(view.node)  # where gpuchain's repair loop stands with each GPU
    answering = not any(f.lost for f in health.faults.values()) and not catalog.find(
        "\n".join([plugin_log, *events]), "nvml.gpu-lost"
    )
    marked = _application_xids(hits) if answering else ()
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
    action = Fix(
        FixOp.HARDWARE,
        view.name,
        {
            "action": "reboot (power-cycle) the node so the GPU comes back on the bus; if it falls off again, check "
            "its seating, power and cooling, or replace the GPU"
            if off_bus
            else "reset the GPU (nvidia-smi -r) or reboot the node; replace the GPU if it falls off again",
            "fact": "replace-gpu",
        },
    )
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


#: The Xid number in the plugin's XidCriticalError line (catalog k8s-device-plugin.xid-critical).
XID_NUMBER = re.compile(r"Xid=(\d+)")
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


def _count_findings(
    ctx: Context, view: NodeView, capacity: dict[str, int], allocatable: dict[str, int]
) -> list[Finding]:
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
    findings += [_lost(ctx, view, res, cap, alloc, physical) for res, cap, alloc in short]
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
            if ctx.policy_unknown
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


def _mig_invalid(ctx: Context, view: NodeView, evidence: list[str]) -> Result:
    product = view.labels.get(PRODUCT, "")
    if ctx.policy_obj is not None:
        patch = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"mig": {"strategy": "mixed"}}})
        action: Fix | None = patch
        fix = ctx.stack.render(patch) + f"   # or give every GPU one profile: {MIG_CONFIG}=all-1g.10gb"
    else:
        action = None
        fix = (
            ctx.stack.render(
                Fix(FixOp.SET_ENV, f"{ctx.namespace}/{ctx.ds(DEVICE_PLUGIN)}", {"env": {"MIG_STRATEGY": "mixed"}})
            )
            + "   # or give every GPU the same MIG profile"
        )
    return Result(
        LinkState.BROKEN,
        "MIG layout does not fit mig.strategy=single",
        (
            node_finding(
                view,
                fid="mig.invalid-for-strategy",
                sev=Severity.ERROR,
                link="mig",
                cause="mig.strategy is single but this node's GPUs do not all carry one and the same MIG profile, so "
                "the device plugin refuses the layout and announces nothing, and feature discovery labels the product "
                "-MIG-INVALID.",
                evidence=[
                    f"{PRODUCT}={product}" if product else "",
                    f"{MIG_CONFIG}={view.labels.get(MIG_CONFIG, '?')}",
                    *evidence,
                ],
                fix=fix,
                action=action,
            ),
        ),
    )


def _no_sys_admin(ctx: Context, view: NodeView, pod: Obj, state: PodState, needs: str, evidence: list[str]) -> Result:
    """The plugin cannot initialise NVML because its container was given fewer privileges than its settings
    need: NVIDIA's chart adds SYS_ADMIN for them, values that set the securityContext by hand drop it."""
    container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
    name = str(container.get("name", ""))
    grant = {"name": name, "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}
    patch = Fix(
        FixOp.PATCH_DAEMONSET,
        f"{(pod.get('metadata') or {}).get('namespace', ctx.namespace)}/{owner_ds(pod)}",
        {"spec": {"template": {"spec": {"containers": [grant]}}}},
    )
    security = container.get("securityContext") or {}
    labels = (owner_daemonset(ctx, pod).get("metadata") or {}).get("labels") or {}
    chart_name, chart, version = chart_of(ctx, labels)
    found = defect(chart_name, version, "no-sys-admin") if labels.get(HELM_RELEASE) else None
    fix = ctx.stack.render(patch) + (
        "   # and the same in the chart's values (securityContext.capabilities.add=[SYS_ADMIN], or no securityContext "
        "override), so the next upgrade keeps it"
    )
    if found is not None:  # the chart release that renders SYS_ADMIN for these settings, the patch until then
        release = f"helm upgrade {labels[HELM_RELEASE]} {chart} -n {namespace_of(pod)} --version {found.fixed_in}"
        fix = f"{release} --reuse-values   # the chart release that grants it; until then: {ctx.stack.render(patch)}"
    return Result(
        LinkState.BROKEN,
        "device plugin without SYS_ADMIN",
        (
            node_finding(
                view,
                fid="device-plugin.privileges-missing",
                sev=Severity.ERROR,
                link="device-plugin",
                cause=f"the device plugin runs with {needs}, for which NVIDIA's chart gives its container SYS_ADMIN, "
                "but its securityContext grants neither SYS_ADMIN nor privileged, so NVML cannot be initialised in it "
                "and no GPU is announced.",
                evidence=[
                    *evidence,
                    f"container {name} securityContext: {security or 'none'}",
                    *((f"chart {chart_name}-{version}: {found.cause}", found.cite()) if found else ()),
                ],
                fix=fix,
                action=patch,
            ),
        ),
    )


#: The plugin's words for a MIG-enabled GPU with no MIG instance on it (catalog.yaml, two releases).
MIG_EMPTY = (
    "k8s-device-plugin.mig-no-instances",
    "k8s-device-plugin.mig-device-unconfigured",
    "k8s-device-plugin.mig-device-invalid",
)


def _mig_empty(ctx: Context, view: NodeView, evidence: list[str], said: str) -> Result:
    """MIG mode on with no instance carved: the plugin refuses the node, and the fault is the MIG layout (the MIG
    manager's finding where it has one, else the layout to apply or MIG mode off) -- but under mig-strategy mixed its
    release that refuses such a GPU (`mixed_refusal`); a release that may refuse it is named beside the layout."""
    plugin = view.pod(DEVICE_PLUGIN)
    release = release_repair(ctx, view=view, pod=plugin, operand=DEVICE_PLUGIN, shown=showing("log", said))
    if release is not None:
        evidence = [*evidence, *release.evidence]
    mixed = f"; under mig-strategy mixed the plugin release is the fault instead: {release.fix}" if release else ""
    managed = mig_finding(ctx, view)
    action, fix = layout_repair(ctx, view)
    if refused := mixed_refusal(ctx, view=view, said=said, evidence=evidence, layout=managed.fix if managed else fix):
        return refused
    if managed is not None:
        found = dataclasses.replace(managed, evidence=(*managed.evidence, *evidence), fix=managed.fix + mixed)
        return Result(LinkState.BROKEN, "MIG on with no instance", (found,))
    return Result(
        LinkState.BROKEN,
        "MIG on with no instance",
        (
            node_finding(
                view,
                fid="mig.no-instances",
                sev=Severity.ERROR,
                link="mig",
                cause="MIG mode is on for this node's GPUs but no MIG instance is carved on them, so the device plugin "
                "(mig.strategy single) refuses the node and announces no GPU: the MIG layout was never applied.",
                evidence=[f"{MIG_CONFIG}={view.labels.get(MIG_CONFIG, '(none)')}", *evidence],
                fix=fix + mixed,
                action=action,
            ),
        ),
    )


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


def check_device_plugin(ctx: Context, view: NodeView) -> Result:
    """Device plugin: config label, pod state, registration (node capacity) and the numbers."""
    missing = _config_missing(ctx, view)
    if missing is not None:
        return Result(LinkState.BROKEN, "config label names a missing config", (missing,))
    pod = view.pod(DEVICE_PLUGIN)
    capacity, allocatable = node_gpu_resources(view.node), node_gpu_resources(view.node, "allocatable")
    announced = {k: v for k, v in capacity.items() if v > 0}
    invalid_product = view.labels.get(PRODUCT, "").endswith("-MIG-INVALID")
    state = pod_state(pod) if pod is not None else None
    log = (
        operand_log(ctx, view=view, operand=DEVICE_PLUGIN, container=state.container, last=state.last_log)
        if state
        else ""
    )
    if pod is not None and state is not None and is_dra_plugin(pod):
        return check_dra_plugin(ctx, view=view, pod=pod, state=state, log=log)
    nvml = catalog.find(log, *NO_NVML)
    mig_line = catalog.find(log, "k8s-device-plugin.invalid-mig-configuration")
    mig_empty = catalog.find(log, *MIG_EMPTY)
    if pod is None:
        if view.labels.get(deploy_label(DEVICE_PLUGIN)) == PAUSED_FOR_MIG_CHANGE:
            mig = mig_finding(ctx, view)
            return Result(LinkState.BROKEN, "paused for a MIG change", (mig,) if mig else ())
        if opted_out(view, DEVICE_PLUGIN) or not enabled(ctx.policy, DEVICE_PLUGIN):
            foreign = elsewhere_unplaced(ctx, view=view, operand=DEVICE_PLUGIN, link="device-plugin")
            return foreign or Result(LinkState.SKIPPED, "device plugin not deployed here")
        absent = unscheduled(ctx, view=view, operand=DEVICE_PLUGIN, link="device-plugin") if not announced else None
        if absent is not None:
            return absent
    elif state is not None and mig_empty:
        return _mig_empty(ctx, view, [state.describe(), *mig_empty.evidence()], mig_empty.entry.id)
    elif state is not None and (mig_line or (invalid_product and not announced)):
        return _mig_invalid(ctx, view, [state.describe(), *(mig_line.evidence() if mig_line else ())])
    elif state is not None and not announced and (denied := catalog.find(log, NVML_DEVICES_DENIED)):
        return devices_denied(ctx, view=view, evidence=[state.describe(), *denied.evidence()])
    elif state is not None and nvml and not announced and pod is not None and (needs := needs_sys_admin(pod, log)):
        return _no_sys_admin(ctx, view, pod, state, needs, nvml_evidence(state, nvml=nvml, log=log))
    elif state is not None and nvml and not announced and NVML_FOUND not in log:  # found: the runtime gave it
        return runtime_not_default(ctx, view=view, evidence=nvml_evidence(state, nvml=nvml, log=log))
    elif state is not None and not state.ready:
        return not_ready(
            ctx,
            view=view,
            operand=DEVICE_PLUGIN,
            link="device-plugin",
            what="device plugin pod",
            state=state,
            log=log,
            cause=f"the device plugin pod is {state.status}, so the kubelet gets no GPU devices.",
        )
    defective = _defective_release(ctx, view, pod) if pod is not None and state is not None and state.ready else None
    if defective is not None:
        return defective
    if not announced and allocator_of(view.node) == DRA:  # kube.allocator: none by design
        return check_gpuchain_dra(ctx, view)
    if not announced:
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
    findings = _count_findings(ctx, view, capacity, allocatable)
    summary = ", ".join(
        f"{k.removeprefix('nvidia.com/')} {allocatable.get(k, v)}/{v}" for k, v in sorted(capacity.items())
    )
    errors = [f for f in findings if f.severity is not Severity.INFO]
    return Result(LinkState.DEGRADED if errors else LinkState.OK, summary, tuple(findings))


def _gpu_node_affinity(gpu_nodes: list[Obj], node: Obj) -> dict[str, object] | None:
    """A node affinity term every GPU node matches and ``node`` does not: a GPU label they all carry, else
    their instance types (None when nothing tells them apart)."""
    for key in GPU_NODE_LABELS:
        if all(labels_of(n).get(key) for n in gpu_nodes) and not labels_of(node).get(key):
            return {"key": key, "operator": "Exists"}
    types = sorted({labels_of(n).get(INSTANCE_TYPE, "") for n in gpu_nodes} - {""})
    if types and labels_of(node).get(INSTANCE_TYPE) not in types:
        return {"key": INSTANCE_TYPE, "operator": "In", "values": types}
    return None


INSTANCE_TYPE = "node.kubernetes.io/instance-type"


def plugin_off_gpu_nodes(ctx: Context) -> list[Finding]:
    """Device plugin pods failing on nodes with no NVIDIA GPU: the DaemonSet selects no GPU nodes, so it
    lands where no driver can be (the runtime hook fails, NVML finds nothing). The repair is the DaemonSet's
    placement, not the node: an affinity the GPU nodes match."""
    gpu_nodes = [n for n in ctx.snapshot.nodes if is_gpu_node(n)]
    others = {name_of(n): n for n in ctx.snapshot.nodes if not is_gpu_node(n)}
    if not gpu_nodes or not others:
        return []
    out = []
    for pod in ctx.snapshot.pods:
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        owner = owner_ds(pod)
        if node not in others or not owner:
            continue
        if DEVICE_PLUGIN.state not in ctx.stack.operands_in(str(meta.get("namespace") or ""), owner):
            continue
        state = pod_state(pod)
        term = _gpu_node_affinity(gpu_nodes, others[str(node)]) if state.failing else None
        if term is None:
            continue
        ns = str(meta.get("namespace") or ctx.namespace)
        affinity = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [term]}]}
            }
        }
        action = Fix(FixOp.PATCH_DAEMONSET, f"{ns}/{owner}", {"spec": {"template": {"spec": {"affinity": affinity}}}})
        said = catalog.known_error("\n".join((state.last_log, state.message)))
        view = NodeView(
            name=str(node),
            node=others[str(node)],
            labels=labels_of(others[str(node)]),
            operand_pods={},
            workloads=[],
            events=[],
        )
        out.append(
            node_finding(
                view,
                fid="device-plugin.off-gpu-node",
                sev=Severity.ERROR,
                link="device-plugin",
                cause=f"the device plugin's DaemonSet {ns}/{owner} places a pod on {node}, a node with no NVIDIA GPU "
                "(no GPU "
                "label, capacity or GPU instance type), where it cannot start: its DaemonSet selects no GPU nodes.",
                evidence=[
                    state.describe(),
                    *(said.evidence("runtime says") if said else ()),
                    f"GPU nodes: {', '.join(sorted(name_of(n) for n in gpu_nodes)[:5])}",
                ],
                fix=ctx.stack.render(action) + "   # a node affinity only the GPU nodes match",
                action=action,
            )
        )
    return out


# -- 4. feature discovery, exporter, MIG --------------------------------------------------------


def _defective_release(ctx: Context, view: NodeView, pod: Obj) -> Result | None:
    """A plugin that runs ready but restarted after runs that ended in error, on a release whose own notes name
    that defect (releases.yaml): the release that fixed it is the repair, not another restart."""
    images = {str(c.get("name")): str(c.get("image", "")) for c in (pod.get("spec") or {}).get("containers") or []}
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        last = (cs.get("lastState") or {}).get("terminated") or {}
        image = images.get(str(cs.get("name")), "")
        name, tag = image_version(image)
        found = defect(name, tag, "restarts") if cs.get("restartCount") and last.get("exitCode") else None
        if found is None:
            continue
        fixed = f"{image.rpartition(':')[0]}:{found.fixed_in}"
        action, fix = set_release(ctx, pod=pod, operand=DEVICE_PLUGIN, container=str(cs.get("name")), image=fixed)
        return Result(
            LinkState.DEGRADED,
            f"device plugin {tag} restarts: a known defect of that release",
            (
                node_finding(
                    view,
                    fid="device-plugin.known-defect",
                    sev=Severity.ERROR,
                    link="device-plugin",
                    cause=f"the device plugin {tag} runs but keeps restarting ({cs.get('restartCount')} restarts, the "
                    f"last run ended with exit code {last.get('exitCode')}): {found.cause}",
                    evidence=[
                        f"pod {name_of(pod)}: {image}, {cs.get('restartCount')} restarts, last terminated "
                        f"{last.get('reason') or 'Error'} (exit {last.get('exitCode')})",
                        f"release note: {found.line}",
                        found.cite(),
                    ],
                    fix=fix + f"   # {found.fixed_in}, the release that fixed it (and the chart's image.tag where "
                    "a Helm release renders it)",
                    action=action,
                ),
            ),
        )
    return None
