"""MIG mode on with no MIG device carved: the GPUs' layout is gone, whatever the links above it say.

MIG mode is a setting the GPU keeps across a reboot; its GPU and compute instances are not (NVIDIA's MIG user guide:
created instances do not persist across a reset or reboot, which is why mig-parted ships a systemd service, and the
MIG manager applies its node's layout again each time it starts). On a GPU in MIG mode without instances:

- the device plugin has nothing to announce: with the mixed strategy it serves one resource per MIG profile it finds
  (none) and not the GPU itself, so the kubelet keeps the resources it served before the reboot at 0
  (``nvidia.com/mig-1g.5gb: 0``: a resource no plugin serves any more stays in capacity at 0); with the single
  strategy it refuses the node (catalog k8s-device-plugin.mig-no-instances, read by the plugin's check);
- CUDA finds no usable device ("all CUDA-capable devices are busy or unavailable"), so NVIDIA's validator never
  completes its CUDA step and the plugin waits behind it;
- nvidia-smi prints its MIG devices table with "No MIG devices found".

Each is read here as the MIG link broken, with the repair: the layout applied again and kept across reboots (the MIG
manager's layout label, or mig-parted and its nvidia-mig-manager service on a node without one), or MIG mode off.
"""

from __future__ import annotations

import re
from typing import cast

from gpuchain.common.labels import MIG_CAPABLE, MIG_CONFIG
from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.evidence import Failure, failures
from gpuchain.doctor.links.common import node_finding, operand_daemonset, opted_out
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.pods import pod_state, unschedulable_message
from gpuchain.kube.gpu_resources import node_gpu_resources, pod_gpu_requests
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN, MIG_MANAGER, enabled

#: nvidia-smi's empty MIG devices table, and CUDA's refusal of a context (catalog.yaml).
NO_MIG_DEVICES = "nvidia-smi.no-mig-devices"
CUDA_UNAVAILABLE = "cuda.devices-unavailable"
#: The prefix of the resources the device plugin's mixed strategy serves, one per MIG profile.
MIG_RESOURCE = "nvidia.com/mig-"
#: The plugin's registration line (catalog.yaml), naming the resource it registered.
REGISTERED = "k8s-device-plugin.registered"
#: mig-parted's systemd unit and the drop-in it reads its selected layout from (NVIDIA/mig-parted deployments/systemd:
#: nvidia-mig-manager.service, MIG_PARTED_SELECTED_CONFIG in its override.conf, layouts in /etc/nvidia-mig-manager).
SERVICE = "nvidia-mig-manager.service"
OVERRIDE = "/etc/systemd/system/nvidia-mig-manager.service.d/override.conf"
LAYOUTS = "/etc/nvidia-mig-manager/config.yaml"
#: The unit orders itself only after nvidia-persistenced and nvidia-fabricmanager (NVIDIA/mig-parted
#: deployments/systemd/nvidia-mig-manager.service@v0.15.0), and its service.sh applies the MIG devices only with the
#: nvidia module loaded ("No nvidia module loaded, skipping MIG device config"): on a host whose driver loads later
#: at boot, its boot run lays nothing out.
ORDERING = "After= and Wants= the unit that loads the driver, e.g. nvidia-persistenced.service"
#: The label GFD writes with the MIG strategy the node's GPUs are served with (NVIDIA/k8s-device-plugin
#: internal/lm/mig-strategy_test.go@v0.17.1 expects nvidia.com/mig.strategy among its labels).
STRATEGY_LABEL = "nvidia.com/mig.strategy"


def _texts(ctx: Context, view: NodeView, found: list[Failure] | None) -> list[tuple[str, str]]:
    """Every word the doctor read on this node, with where it came from: the failing containers' messages and
    logs (``found``: `failures` of the node, when the caller has them), and the logs it read of the running ones."""
    out = [(f.describe(), f.text) for f in (failures(ctx, view) if found is None else found)]
    if not ctx.logs_read:
        return out
    for pod in view.pods:
        if not ctx.logged(pod):
            continue
        spec = pod.get("spec") or {}
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            text = ctx.log(pod, str(c.get("name", "")))
            if text:
                out.append((f"pod {name_of(pod)} ({c.get('name')})", text))
    return out


def _zero_mig_resources(ctx: Context, view: NodeView) -> list[str]:
    """The evidence that the plugin, running, serves none of the MIG resources the node served before: every
    ``nvidia.com/mig-*`` in capacity at 0, no GPU announced, and the plugin's log (read) with no registration of a
    MIG resource ([] where any of that does not hold, e.g. a kubelet that forgot a registration the plugin made)."""
    capacity = node_gpu_resources(view.node)
    mig = {k: v for k, v in capacity.items() if k.startswith(MIG_RESOURCE)}
    plugin = view.pod(DEVICE_PLUGIN)
    if not mig or any(mig.values()) or capacity.get("nvidia.com/gpu", 0) > 0 or plugin is None:
        return []
    state = pod_state(plugin)
    names = [str(c.get("name", "")) for c in (plugin.get("spec") or {}).get("containers") or []]
    log = "\n".join(ctx.log(plugin, n) for n in names)
    registered = catalog.find(log, REGISTERED)
    if not state.ready or not log or (registered is not None and MIG_RESOURCE in registered.line):
        return []
    return [
        f"node {view.name} capacity: {', '.join(f'{k}: {v}' for k, v in sorted(capacity.items()))}",
        f"{state.describe()}: its log registers no {MIG_RESOURCE}* resource",
    ]


#: The plugin's MIG strategy in its arguments (--mig-strategy=single) and its wait with no device (catalog.yaml).
STRATEGY = re.compile(r"--mig-strategy[= ](\w+)")
NO_DEVICES = "k8s-device-plugin.no-devices"


def _strategy_found_none(ctx: Context, view: NodeView) -> list[str]:
    """The evidence that a running plugin with a MIG strategy (single, mixed), NVML loaded, found no device on a node
    whose capacity still names nvidia.com/gpu at 0 (what it served before): such a plugin serves a MIG-enabled GPU
    only through its MIG devices, so finding none means none is carved ([] where any of that does not hold)."""
    plugin = view.pod(DEVICE_PLUGIN)
    if plugin is None or node_gpu_resources(view.node).get("nvidia.com/gpu", -1) != 0:
        return []
    containers = (plugin.get("spec") or {}).get("containers") or []
    strategy = _plugin_strategy(plugin)
    log = "\n".join(ctx.log(plugin, str(c.get("name", ""))) for c in containers)
    said = catalog.find(log, NO_DEVICES)
    if strategy not in ("single", "mixed") or said is None or catalog.known_error(log) is not None:
        return []
    return [f"{pod_state(plugin).describe()}: mig strategy {strategy}", *said.evidence("says"), "nvidia.com/gpu: 0"]


def _plugin_strategy(plugin: Obj) -> str:
    """The MIG strategy the plugin pod runs with: its --mig-strategy argument, else its MIG_STRATEGY ("" if none)."""
    containers = (plugin.get("spec") or {}).get("containers") or []
    words = [str(a) for c in containers for a in [*(c.get("command") or []), *(c.get("args") or [])]]
    env = {str(e.get("name")): str(e.get("value", "")) for c in containers for e in c.get("env") or []}
    return next((m.group(1) for w in words if (m := STRATEGY.search(w))), env.get("MIG_STRATEGY", ""))


def _strategy(ctx: Context, view: NodeView) -> str:
    """The MIG strategy this node is served with: the label GFD writes (nvidia.com/mig.strategy), else the plugin
    pod's own setting, else the ClusterPolicy's spec.mig.strategy ("" where nothing says)."""
    plugin = view.pod(DEVICE_PLUGIN)
    policy = (((ctx.policy_obj or {}).get("spec") or {}).get("mig") or {}).get("strategy")
    return view.labels.get(STRATEGY_LABEL) or (_plugin_strategy(plugin) if plugin else "") or str(policy or "")


def _asked_slices(ctx: Context) -> dict[str, list[str]]:
    """The MIG resources Pending GPU pods wait for on Insufficient, with the pods (namespace/name) asking each: the
    cluster's answer, worked out once a diagnosis (`memo`; every mixed node without slices asks, twice with a
    finding). Its readers do not change it."""
    known = ctx.memo.get("asked_slices")
    if known is not None:
        return cast("dict[str, list[str]]", known)
    asked: dict[str, list[str]] = {}
    for pod in ctx.pending:
        msg = unschedulable_message(pod) or ""
        for name in pod_gpu_requests(pod):
            if name.startswith(MIG_RESOURCE) and f"Insufficient {name}" in msg:
                asked.setdefault(name, []).append(f"{namespace_of(pod)}/{name_of(pod)}")
    ctx.memo["asked_slices"] = asked
    return asked


def _mixed_serves_no_slice(ctx: Context, view: NodeView) -> list[str]:
    """The evidence that a MIG-capable node served with the mixed strategy carries no MIG device while pods wait for
    MIG slices: the mixed strategy serves a GPU in MIG mode only as its MIG devices (nvidia.com/mig-<profile>, NVIDIA/
    k8s-device-plugin cmd/nvidia-device-plugin/mig-strategy.go), so a node that serves none of them at all has none
    carved, whatever it serves of whole GPUs beside ([] where any of that does not hold)."""
    capacity = node_gpu_resources(view.node)
    if view.labels.get(MIG_CAPABLE) != "true" or _strategy(ctx, view) != "mixed":
        return []
    if any(v > 0 for k, v in capacity.items() if k.startswith(MIG_RESOURCE)):
        return []
    asked = _asked_slices(ctx)
    if not asked:
        return []
    served = ", ".join(f"{k}: {v}" for k, v in sorted(capacity.items())) or "no GPU resource"
    return [
        f"{MIG_CAPABLE}=true, MIG strategy mixed; node {view.name} capacity: {served} (no {MIG_RESOURCE}* served)",
        *(f"Pending on Insufficient {name}: {', '.join(pods[:4])}" for name, pods in sorted(asked.items())),
    ]


def _layout(ctx: Context, view: NodeView) -> str:
    """The layout that carves what the node served before (mig-parted's ``all-<profile>`` layouts), else what the
    Pending pods wait for, or "" when neither names a single profile."""
    profiles = sorted(k.removeprefix(MIG_RESOURCE) for k in node_gpu_resources(view.node) if k.startswith(MIG_RESOURCE))
    if not profiles and view.labels.get(MIG_CAPABLE) == "true":
        profiles = sorted(k.removeprefix(MIG_RESOURCE) for k in _asked_slices(ctx))
    return f"all-{profiles[0]}" if len(profiles) == 1 else ""


def mig_without_instances(ctx: Context, view: NodeView, *, found: list[Failure] | None = None) -> Finding | None:
    """GPUs of this node in MIG mode with no MIG device on them (nvidia-smi's empty table, the plugin serving none
    of the MIG resources it served, or CUDA refusing every context on a MIG-capable node that announces no GPU):
    the MIG link, with the layout applied again and kept, or MIG off. None where nothing says so. ``found``: the
    node's `failures`, when the caller has them."""
    texts = _texts(ctx, view, found)
    evidence: list[str] = []
    for where, text in texts:
        said = catalog.find(text, NO_MIG_DEVICES)
        if said is not None:
            evidence = [where, *said.evidence("says")]
            break
    evidence = evidence or _zero_mig_resources(ctx, view) or _strategy_found_none(ctx, view)
    # Pods waiting for slices on a mixed node that serves none: no MIG device carved, MIG mode itself unread.
    unlaid = [] if evidence else _mixed_serves_no_slice(ctx, view)
    evidence = evidence or unlaid
    capacity = node_gpu_resources(view.node)
    capable = view.labels.get(MIG_CAPABLE) == "true" or any(k.startswith(MIG_RESOURCE) for k in capacity)
    if not evidence and capable and not any(capacity.values()):
        for where, text in texts:
            said = catalog.find(text, CUDA_UNAVAILABLE)
            if said is not None:
                evidence = [where, *said.evidence("says"), f"{MIG_CAPABLE}=true, no GPU announced in capacity"]
                break
    if not evidence:
        return None
    action, fix = layout_repair(ctx, view)
    return node_finding(
        view,
        fid="mig.no-instances",
        sev=Severity.ERROR,
        link="mig",
        cause=(
            "this node's MIG-capable GPUs carry no MIG device, so the device plugin's mixed strategy serves no MIG "
            "slice and the pods that ask for one wait: the layout was never applied, or MIG mode survived a reboot and "
            "the GPU and compute instances did not, until a layout is applied again."
            if unlaid
            else "this node's GPUs are in MIG mode with no MIG device carved on them: MIG mode survives a reboot, the "
            "GPU and compute instances do not, so CUDA finds no usable device and the device plugin has nothing to "
            "announce until a layout is applied again."
        ),
        evidence=[f"{MIG_CONFIG}={view.labels.get(MIG_CONFIG, '(none)')}", *evidence],
        fix=fix,
        action=action,
    )


def layout_repair(ctx: Context, view: NodeView) -> tuple[Fix | None, str]:
    """The layout applied again and kept across reboots: by the MIG manager where the stack runs one for this node
    (it applies its label's layout at every start), else by mig-parted on the host with its systemd service."""
    wanted = view.labels.get(MIG_CONFIG, "")
    layout = _layout(ctx, view)
    managed = (
        operand_daemonset(ctx, MIG_MANAGER) is not None
        and enabled(ctx.policy, MIG_MANAGER)
        and not opted_out(view, MIG_MANAGER)
    )
    mgr = view.pod(MIG_MANAGER)
    plugin = view.pod(DEVICE_PLUGIN)
    if managed and wanted and mgr is not None:
        restart = Fix.delete_pod(namespace_of(mgr) or ctx.namespace, name_of(mgr), fact="mig-applied")
        return restart, ctx.stack.render(restart) + (
            f"   # the MIG manager applies {wanted!r} again when it starts (and at every boot after); or turn MIG "
            f"off: kubectl label node {view.name} {MIG_CONFIG}=all-disabled --overwrite"
        )
    if managed:
        label = Fix(FixOp.LABEL_NODE, view.name, {MIG_CONFIG: layout or "all-disabled"})
        other = (
            "or all-disabled to turn MIG off" if layout else "or a layout of its ConfigMap to use MIG (e.g. all-1g.5gb)"
        )
        return label, ctx.stack.render(label) + (
            f"   # the MIG manager applies the layout now and again at every start, so it survives reboots; {other}"
        )
    again = _plugin_restart(ctx, plugin)
    name = layout or "<layout>"
    work = (
        f"apply the layout with mig-parted (nvidia-mig-parted apply -f {LAYOUTS} -c {name}) and keep it across "
        f"reboots with its {SERVICE} (MIG_PARTED_SELECTED_CONFIG={name} in {OVERRIDE}; systemctl daemon-reload; "
        f"systemctl enable {SERVICE}); where the service is installed, its boot run laid nothing out (it failed, or "
        f"ran before the driver loaded: its service.sh skips the MIG devices with no nvidia module loaded), so "
        f"systemctl restart {SERVICE} now and order it after the driver with a drop-in ({ORDERING}); or turn MIG mode "
        "off (nvidia-smi -mig 0, then reset the GPUs or reboot)" + (f"; then {again}" if again else "")
    )
    action = Fix(FixOp.NODE, view.name, {"action": work, "drain": False, "fact": "mig-applied"})
    if not layout:
        action = Fix(
            FixOp.NODE,
            view.name,
            {"action": work, "drain": False, NOT_SIMULATED: "the layout to carve is the user's choice"},
        )
    return action, ctx.stack.render(action)


def _plugin_restart(ctx: Context, plugin: Obj | None) -> str:
    """The device plugin restarted, so it finds the MIG devices carved after it started ("" with no plugin pod)."""
    if plugin is None:
        return ""
    return ctx.stack.render(Fix.delete_pod(namespace_of(plugin) or ctx.namespace, name_of(plugin)))
