"""Two device plugins on one node that register the same resource name with its kubelet.

The kubelet's device manager keeps one endpoint per resource name: a registration for a name already registered
replaces the endpoint it had ("always accepts newest device plugin", addEndpoint in kubernetes
pkg/kubelet/cm/devicemanager/manager.go before v1.25; PluginConnected's ``m.endpoints[resourceName] = ...`` from
v1.25), and the node's capacity for that name is the device list of whichever plugin registered last. Two DaemonSets
whose plugins both serve ``nvidia.com/gpu`` on a node (the GPU Operator's or NVIDIA's chart's beside HAMi's, which
splits each GPU into vGPUs under the same name by default, charts/hami/values.yaml resourceName@v2.5.1, or two
NVIDIA plugin releases) therefore make the node's count flip with each restart: after a reboot it is one per physical
GPU where HAMi's split was meant, or HAMi's split where the other plugin's whole GPUs were, and pods are admitted
against devices the plugin that allocates them does not know.

The repair leaves one plugin per name on the node: a sharing plugin the user added (HAMi) is kept and the other is
turned off there (the GPU Operator's per-node deploy label nvidia.com/gpu.deploy.device-plugin=false, or
devicePlugin.enabled=false where HAMi runs on every node the operator's plugin serves; NVIDIA's chart uninstalled or
kept off those nodes); else the stack's own plugin is kept. The other way is a resource name of its own for the
second plugin (HAMi's chart value resourceName), which its pods then request.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gpuchain.common.remember import remembered
from gpuchain.doctor import catalog
from gpuchain.doctor.bottlerocket import away_from
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known, Result, node_finding, said_by
from gpuchain.doctor.links.not_ready import known_not_ready
from gpuchain.doctor.model import Fix, FixOp, LinkState, Severity
from gpuchain.doctor.owners import owner_daemonset, owner_ds
from gpuchain.doctor.pods import pod_state
from gpuchain.doctor.stacks.base import runs_nvidia_plugin
from gpuchain.doctor.stacks.hami import is_hami_plugin
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN, deploy_label

Check = Callable[[Context, NodeView], Result]

GPU = "nvidia.com/gpu"
#: DaemonSets that run the device plugin's image without being a plugin: GPU feature discovery (the chart's and the
#: operator's, from v0.15 in the plugin's image) and the MPS control daemon (NVIDIA/k8s-device-plugin
#: deployments/helm/nvidia-device-plugin/templates).
NOT_A_PLUGIN = re.compile(r"feature-discovery|gfd|mps-control-daemon", re.IGNORECASE)
#: The name HAMi's plugin serves, in its device config (charts/hami/templates/scheduler/device-configmap.yaml:
#: nvidia.resourceCountName, from the chart's resourceName).
HAMI_NAME = re.compile(r"resourceCountName:\s*\"?([\w./-]+)")
#: The Helm release that installed an object (Helm's own annotation).
HELM_RELEASE = "meta.helm.sh/release-name"


def _hami_name(ctx: Context, ds: Obj) -> str:
    """The resource name HAMi's plugin serves: its device config's, where the snapshot holds that ConfigMap, else
    the chart's default."""
    for cm in ctx.snapshot.configmaps:
        if namespace_of(cm) != namespace_of(ds):
            continue
        found = HAMI_NAME.search(" ".join(str(v) for v in (cm.get("data") or {}).values()))
        if found is not None:
            return found.group(1)
    return GPU


def _serves(ctx: Context, ds: Obj) -> tuple[str, str] | None:
    """(resource name, who) for a device plugin DaemonSet that serves an NVIDIA GPU name; None for any other."""
    if is_hami_plugin(ds):
        return _hami_name(ctx, ds), "HAMi's device plugin"
    if NOT_A_PLUGIN.search(name_of(ds)):
        return None
    ours = name_of(ds) == ctx.ds(DEVICE_PLUGIN) and namespace_of(ds) == ctx.namespace
    if ours and ctx.stack.policy_resource:
        return GPU, "the GPU Operator's device plugin"
    if ours or runs_nvidia_plugin(ds):
        return GPU, "NVIDIA's device plugin"
    return None


@remembered
def _plugins(ctx: Context) -> int:
    """How many of the snapshot's DaemonSets serve an NVIDIA GPU name: worked out once a diagnosis, since a clash
    needs two and most clusters run one, so no node's pods need reading for it."""
    return sum(_serves(ctx, ds) is not None for ds in ctx.snapshot.daemonsets)


def serving(ctx: Context, view: NodeView) -> dict[str, list[tuple[Obj, Obj, str]]]:
    """Per resource name, the plugin DaemonSets whose pod runs on the node: (DaemonSet, pod, who)."""
    out: dict[str, list[tuple[Obj, Obj, str]]] = {}
    seen: set[tuple[str, str]] = set()
    for pod in (*view.pods, *view.workloads):
        ds = owner_daemonset(ctx, pod)
        key = (str(namespace_of(ds)), name_of(ds)) if ds else ("", "")
        if not ds or key in seen or (pod.get("status") or {}).get("phase") != "Running":
            continue
        served = _serves(ctx, ds)
        if served is not None:
            seen.add(key)
            out.setdefault(served[0], []).append((ds, pod, served[1]))
    return out


def _nodes_of(ctx: Context, ds: Obj) -> set[str]:
    """The nodes DaemonSet ``ds`` has a pod on."""
    key = (namespace_of(ds), name_of(ds))
    return {
        str((p.get("spec") or {}).get("nodeName") or "")
        for p in ctx.snapshot.pods
        if (namespace_of(p), owner_ds(p)) == key
    }


def _turn_off(ctx: Context, view: NodeView, *, off: Obj, kept: Obj, who: str) -> tuple[Fix, str]:
    """The change that takes plugin DaemonSet ``off`` away from the node, and what it does."""
    if who == "the GPU Operator's device plugin" and ctx.policy_obj is not None:
        if _nodes_of(ctx, off) <= _nodes_of(ctx, kept):
            action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"devicePlugin": {"enabled": False}}})
            return action, "turns off the GPU Operator's device plugin (every node it serves runs the other plugin)"
        action = Fix(FixOp.LABEL_NODE, view.name, {deploy_label(DEVICE_PLUGIN): "false"})
        return action, f"turns off the GPU Operator's device plugin on {view.name} alone"
    release = str(((off.get("metadata") or {}).get("annotations") or {}).get(HELM_RELEASE) or "")
    if _nodes_of(ctx, off) <= _nodes_of(ctx, kept):
        if release:
            action = Fix(FixOp.UNINSTALL, release, {"release": release, "namespace": namespace_of(off)})
            return action, f"uninstalls the release of {name_of(off)} ({who}), which serves no other node"
        gone = {"kind": "DaemonSet", "namespace": namespace_of(off), "name": name_of(off)}
        action = Fix(FixOp.DELETE, f"{namespace_of(off)}/{name_of(off)}", gone)
        return action, f"removes {name_of(off)} ({who}), which serves no other node"
    away = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [view.name]}
    action = away_from(off, away)
    return action, f"keeps {name_of(off)} ({who}) off {view.name}"


def _kept_first(ctx: Context, plugins: list[tuple[Obj, Obj, str]]) -> list[tuple[Obj, Obj, str]]:
    """The plugins in the order of which to keep: a sharing plugin the user added (HAMi's), then the stack's own."""

    def rank(item: tuple[Obj, Obj, str]) -> tuple[bool, bool]:
        ds = item[0]
        ours = name_of(ds) == ctx.ds(DEVICE_PLUGIN) and namespace_of(ds) == ctx.namespace
        return (not is_hami_plugin(ds), not ours)

    return sorted(plugins, key=rank)


def beside_another_plugin(check: Check) -> Check:
    """``check`` (the device-plugin link's) with, first, two plugin DaemonSets running on the node that serve one
    resource name the node announces: the kubelet keeps the last registration alone."""

    def checked(ctx: Context, view: NodeView) -> Result:
        if _plugins(ctx) < 2:
            return check(ctx, view)
        capacity = node_gpu_resources(view.node)
        clash = next(((n, ps) for n, ps in serving(ctx, view).items() if len(ps) > 1 and n in capacity), None)
        if clash is None:
            return check(ctx, view)
        name, plugins = clash
        (kept, kept_pod, kept_who), *others = _kept_first(ctx, plugins)
        unmounted = _driver_unmounted(ctx, view, ds=kept, pod=kept_pod, who=kept_who)
        if unmounted is not None:
            return unmounted
        off, _, who = others[0]
        action, does = _turn_off(ctx, view, off=off, kept=kept, who=who)
        hami = is_hami_plugin(kept)
        other_name = (
            "; or keep both and give HAMi's plugin its own resource name (its chart's resourceName, e.g. "
            "--set resourceName=nvidia.com/vgpu, which its pods then request)"
            if hami
            else ""
        )
        fix = (
            f"{ctx.stack.render(action)}   # {does}, so {kept_who} ({name_of(kept)}) alone registers {name} on "
            f"{view.name}{other_name}; then delete pod {name_of(kept_pod)} so it registers again"
        )
        listed = ", ".join(f"{namespace_of(d)}/{name_of(d)} ({w}, pod {name_of(p)})" for d, p, w in plugins)
        finding = node_finding(
            view,
            fid="device-plugin.duplicate-resource",
            sev=Severity.ERROR,
            link="device-plugin",
            cause=f"{len(plugins)} device plugins run on this node and both register {name} with its kubelet, which "
            "keeps one endpoint per resource name and takes the last registration's devices: the node's "
            f"{name} count is whichever plugin registered last (it changes with each restart or reboot), and pods are "
            "admitted against devices the plugin that allocates them does not know.",
            evidence=[f"plugins on {view.name}: {listed}", f"capacity {name}: {capacity.get(name)}"],
            fix=fix,
            action=action,
        )
        return Result(LinkState.BROKEN, f"two device plugins register {name}", (finding,))

    return checked


#: The words of a plugin that finds no NVML library in its container (catalog.yaml: the loader's, NVML's, go-nvlib's).
NO_NVML = ("loader.no-driver-library", "nvml.library-not-found", "go-nvlib.nvml-not-loaded")
#: Where a plugin of another release is given a node image's driver in its container, as the node image's own plugin
#: has it (GKE's: /home/kubernetes/bin/nvidia mounted at /usr/local/nvidia, its lib64 on LD_LIBRARY_PATH).
DRIVER_IN_POD = "/usr/local/nvidia"


def _driver_unmounted(ctx: Context, view: NodeView, *, ds: Obj, pod: Obj, who: str) -> Result | None:
    """The plugin a user added beside the node image's own, failing to load NVML: the node image installs the driver
    under a host directory of its own (``driver_root``, no NVIDIA container toolkit injects it), which only its own
    plugin mounts (Project-HAMi/HAMi#1153 on GKE). Until the added plugin mounts it, it serves nothing, so that is
    the repair before the two plugins' shared name."""
    root = ctx.stack.driver_root
    if not root or name_of(ds) == ctx.ds(DEVICE_PLUGIN):
        return None
    state = pod_state(pod)
    if not state.failing:
        return None
    found = catalog.find(said_by(ctx, pod), *NO_NVML)
    volumes = ((((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes")) or []
    if found is None or any((v.get("hostPath") or {}).get("path", "").rstrip("/") == root for v in volumes):
        return None
    mount = {"name": "nvidia-install-dir-host", "mountPath": DRIVER_IN_POD}
    env = {"name": "LD_LIBRARY_PATH", "value": f"{DRIVER_IN_POD}/lib64"}
    container = {"name": state.container, "volumeMounts": [mount], "env": [env]}
    volume = {"name": "nvidia-install-dir-host", "hostPath": {"path": root}}
    patch = {"spec": {"template": {"spec": {"volumes": [volume], "containers": [container]}}}}
    action = Fix(FixOp.PATCH_DAEMONSET, f"{namespace_of(ds)}/{name_of(ds)}", patch)
    known = Known(
        cause=f"{who} ({name_of(ds)}) cannot load NVML: {ctx.stack.title} installs the driver under {root} on the "
        "host, where no NVIDIA container toolkit injects it into containers, and only the node image's own plugin "
        "mounts it; this plugin serves no GPU until it does.",
        evidence=(*found.evidence(f"{who} says"), f"DaemonSet {namespace_of(ds)}/{name_of(ds)} mounts no {root}"),
        action=action,
        fix=ctx.stack.render(action)
        + f"   # the host's {root} at {DRIVER_IN_POD} with its lib64 on LD_LIBRARY_PATH, as the node image's own "
        f"plugin has it; then delete pod {name_of(pod)}",
    )
    return known_not_ready(view, link="device-plugin", what=f"{who} pod", state=state, known=known)
