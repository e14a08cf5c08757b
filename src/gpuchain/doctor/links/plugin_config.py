"""What the device plugin's settings ask of the cluster and the node, and the finding where they do not get it: the
config its node label or policy names (and the ConfigMap that holds it), the MIG strategy its GPUs' layout must fit
(mig.strategy single refusing a mixed or empty layout), and the privileges its settings need (SYS_ADMIN)."""

from __future__ import annotations

import dataclasses

from gpuchain.common.labels import DEVICE_PLUGIN_CONFIG, MIG_CONFIG
from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding, operand_log
from gpuchain.doctor.links.mig import mig_finding
from gpuchain.doctor.links.mig_empty import layout_repair
from gpuchain.doctor.links.mig_mixed import mixed_refusal
from gpuchain.doctor.links.plugin_config_seen import mounted_unseen
from gpuchain.doctor.links.releases import release_repair
from gpuchain.doctor.model import Finding, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.owners import HELM_RELEASE, chart_of, owner_daemonset, owner_ds
from gpuchain.doctor.pods import PodState, pod_state
from gpuchain.doctor.releases import defect, showing
from gpuchain.doctor.snapshot import PRODUCT
from gpuchain.doctor.stacks.inferred_policy import unread
from gpuchain.kube.objects import Obj, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN

#: What NVIDIA's config-manager and gpuchain's plugin write when the config key does not exist (catalog.yaml).
CONFIG_MISSING = (
    "k8s-device-plugin.config-does-not-exist",
    "gpuchain-device-plugin.config-key-missing",
    "k8s-device-plugin.unable-to-load-config",
)


def config_missing(ctx: Context, view: NodeView) -> Finding | None:
    if "configmaps" in ctx.snapshot.absent or ctx.policy_unknown or unread(ctx.stack, "devicePlugin.config"):
        return None  # a dump without the stack's ConfigMaps or the policy naming one: nothing to compare
    labelled = view.labels.get(DEVICE_PLUGIN_CONFIG)
    key = labelled or ctx.policy.device_plugin.config.default
    if not key:
        return None
    configs = ctx.plugin_configs()
    if configs is not None and mounted_unseen(ctx):
        configs = None  # its pod mounts a ConfigMap the dump lacks: out of sight, not empty (plugin_config_seen)
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


def mig_invalid(ctx: Context, *, view: NodeView, evidence: list[str]) -> Result:
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


def no_sys_admin(ctx: Context, *, view: NodeView, pod: Obj, state: PodState, needs: str, evidence: list[str]) -> Result:
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


def mig_empty(ctx: Context, *, view: NodeView, evidence: list[str], said: str) -> Result:
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
