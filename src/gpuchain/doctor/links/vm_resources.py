"""VMs that wait for a passthrough GPU the node's KubeVirt GPU device plugin has but does not announce as asked.

NVIDIA's KubeVirt GPU device plugin (standalone, or the GPU Operator's sandbox device plugin) announces a node's
vfio-pci GPUs under a resource named from the device ID's line in the pci.ids it bundles (``nvidia.com/GA102GL_A10``;
`gpuchain.doctor.passthrough`). A VM asks for that name (its ``deviceName``, which KubeVirt's virt-launcher pod carries
as a resource request), and waits Unschedulable ("Insufficient nvidia.com/<name>") while no node announces it. Two
releases of the plugin changed what it announces (releases.yaml, symptoms vm-unregistered and vm-misnamed): v1.0.0
registers nothing for a GPU its pci.ids does not name, and releases before v1.2.2 mis-read pci.ids and name GPUs by
the bare device ID. A plugin that runs ready says nothing of either; the node's capacity and the waiting VM do.

The repair is the release that fixed it, set where the plugin's image comes from: ``sandboxDevicePlugin.version`` of
the ClusterPolicy (the operator renders the DaemonSet from it), else the plugin DaemonSet's image. A newer release
renames the resource (its pci.ids names the model), so the VMs' ``deviceName`` and KubeVirt's
``permittedHostDevices`` must then name what the node announces. Where the plugin already runs a fixed release and
still names the GPUs by ID, its pci.ids lacks the model: the VM asks for ``nvidia.com/<id>``.
"""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.links.releases import operator_release
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.owners import owner_daemonset, owner_ds
from gpuchain.doctor.passthrough import (
    PLUGIN_IMAGE,
    asked_passthrough,
    bare_ids,
    found_groups,
    passthrough_resources,
    unnamed,
)
from gpuchain.doctor.pods import unschedulable_message
from gpuchain.doctor.releases import Defect, defect, image_version, release_of
from gpuchain.kube.objects import Obj, name_of, namespace_of

#: The ClusterPolicy block the GPU Operator renders its sandbox device plugin from.
POLICY_KEY = "sandboxDevicePlugin"
#: The sandbox device plugin each GPU Operator release ships by default, from the release it first does
#: (NVIDIA/gpu-operator deployments/gpu-operator/values.yaml sandboxDevicePlugin.version at each tag).
OPERATOR_SHIPS = (
    ("v22.9.0", "v1.2.1"),
    ("v23.6.0", "v1.2.2"),
    ("v23.9.0", "v1.2.3"),
    ("v23.9.1", "v1.2.4"),
    ("v24.3.0", "v1.2.7"),
    ("v24.6.0", "v1.2.9"),
    ("v24.9.0", "v1.2.10"),
    ("v25.3.0", "v1.3.1"),
    ("v25.3.3", "v1.4.0"),
    ("v26.3.0", "v1.5.0"),
    ("v26.7.0", "v1.6.0"),
)


def _waiting(ctx: Context) -> dict[str, list[Obj]]:
    """Passthrough resource -> the Pending pods the scheduler finds no node with enough of it for (worked out once
    per diagnosis)."""
    memo = ctx.memo.get("vm_resources.waiting")
    if isinstance(memo, dict):
        return memo
    out: dict[str, list[Obj]] = {}
    for pod in ctx.pending:
        asked = asked_passthrough(pod)
        msg = unschedulable_message(pod) if asked else None
        for name in sorted(asked):
            if msg and f"Insufficient {name}" in msg:
                out.setdefault(name, []).append(pod)
    ctx.memo["vm_resources.waiting"] = out
    return out


def _offered(ctx: Context) -> set[str]:
    """The passthrough resources some node announces with a count above zero."""
    memo = ctx.memo.get("vm_resources.offered")
    if isinstance(memo, set):
        return memo
    out = {k for v in ctx.views for k, n in passthrough_resources(v.node).items() if n > 0}
    ctx.memo["vm_resources.offered"] = out
    return out


def _container(pod: Obj) -> dict[str, object]:
    return next(
        (c for c in (pod.get("spec") or {}).get("containers") or () if PLUGIN_IMAGE in str(c.get("image", ""))), {}
    )


def _image(ctx: Context, pod: Obj) -> tuple[str, str]:
    """(the plugin's image, its container's name): its DaemonSet's template where the snapshot has it (what the
    cluster is set to run, and what the repair changes), else the pod's."""
    own = _container(pod)
    name = str(own.get("name", ""))
    template = ((owner_daemonset(ctx, pod).get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in template.get("containers") or ():
        if container.get("name") == name and PLUGIN_IMAGE in str(container.get("image", "")):
            return str(container["image"]), name
    return str(own.get("image", "")), name


def _first_shipping(release: str) -> str:
    """The first GPU Operator release whose chart ships the sandbox device plugin ``release`` or later ("" where none
    known does)."""
    want = release_of(release, PLUGIN_IMAGE)
    for operator, shipped in OPERATOR_SHIPS:
        got = release_of(shipped, PLUGIN_IMAGE)
        if want is not None and got is not None and got >= want:
            return operator
    return ""


def _shipped_by(operator: str) -> str:
    """The sandbox device plugin the GPU Operator release ``operator`` ships ("" where it is not known)."""
    running = release_of(operator, "gpu-operator")
    shipped = ""
    for first, plugin in OPERATOR_SHIPS:
        at = release_of(first, "gpu-operator")
        if running is not None and at is not None and at <= running:
            shipped = plugin
    return shipped


def _repair(ctx: Context, *, pod: Obj, image: str, container: str, found: Defect) -> tuple[Fix, str]:
    """The plugin at ``found``'s fixed release, set where its image comes from: the ClusterPolicy's
    sandboxDevicePlugin.version for the GPU Operator's sandbox device plugin, else its DaemonSet's image. Where the
    running operator's own release ships a fixed plugin, the policy pins an older one: its version is the target."""
    ns = namespace_of(pod) or ctx.namespace
    fixed = found.fixed_in
    if ns == ctx.namespace and ctx.policy_obj is not None:
        operator = operator_release(ctx)[0]
        shipped = _shipped_by(operator)
        pinned = ((ctx.policy_obj.get("spec") or {}).get(POLICY_KEY) or {}).get("version")
        if shipped and not found.covers(shipped):
            held = f"the ClusterPolicy pins {pinned}" if pinned else "its DaemonSet runs an older one"
            target, why = shipped, f"the release GPU Operator {operator} ships ({held})"
        else:
            first = _first_shipping(fixed)
            target = fixed
            why = f"{fixed} or later" + (f"; GPU Operator {first} and later ship it by default" if first else "")
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {POLICY_KEY: {"version": target}}})
        return action, f"{ctx.stack.render(action)}   # {POLICY_KEY}.version: {why}"
    ds = owner_ds(pod) or "<the plugin's DaemonSet>"
    target = f"{image.rpartition(':')[0] or image}:{fixed}"
    action = Fix(
        FixOp.PATCH_DAEMONSET,
        f"{ns}/{ds}",
        {
            "spec": {"template": {"spec": {"containers": [{"name": container, "image": target}]}}},
            NOT_SIMULATED: "the KubeVirt GPU device plugin is not simulated",
        },
    )
    return action, f"kubectl -n {ns} set image ds/{ds} {container}={target}   # {fixed} or later"


def _vm_side(bare: str, asked: str) -> str:
    """The user's side of a rename: the VM's deviceName and KubeVirt's permitted resource name."""
    device = bare.removeprefix("nvidia.com/").upper()
    return (
        f"set deviceName: {bare} (not {asked}) in the VM's spec.domain.devices.gpus (or hostDevices), and "
        f"resourceName: {bare} for pciDeviceSelector 10DE:{device} in the KubeVirt CR's "
        "spec.configuration.permittedHostDevices.pciHostDevices"
    )


def _device(resource: str) -> str:
    """The device ID a bare-ID resource names (lower case, as sysfs and the plugin's log write it)."""
    return resource.removeprefix("nvidia.com/").lower()


def _pods(waiting: dict[str, list[Obj]], names: list[str]) -> list[str]:
    return [
        f"pod {namespace_of(p)}/{name_of(p)} Pending: {unschedulable_message(p)}" for n in names for p in waiting[n]
    ][:3]


def passthrough_finding(ctx: Context, view: NodeView, pod: Obj) -> Finding | None:
    """The node's KubeVirt GPU plugin ``pod`` runs, yet a VM waits for a passthrough GPU of it: the plugin registered
    none of the node's GPUs, or named them by bare device ID while the VM asks for a model name, or registered fewer
    than it found (its log). None where no VM waits, or nothing ties the wait to this node's plugin."""
    waiting = _waiting(ctx)
    if not waiting:
        return None
    announced = {k: v for k, v in passthrough_resources(view.node).items() if v > 0}
    offered = _offered(ctx)
    unoffered = sorted(k for k in waiting if k not in offered)
    image, container = _image(ctx, pod)
    component, tag = image_version(image)
    log = ctx.log(pod, container)
    groups, no_name = found_groups(log), unnamed(log)
    said = [f"log: Error: Could not find device name for device id: {d}" for d in no_name][:2]
    said += [f"log: device {d}: {len(g)} IOMMU group(s) found ({', '.join(sorted(g))})" for d, g in groups.items()]
    plugin = f"KubeVirt GPU device plugin: {image}"
    if not announced:
        hit = defect(component, tag, "vm-unregistered")
        if not unoffered or hit is None:
            return None
        action, text = _repair(ctx, pod=pod, image=image, container=container, found=hit)
        ids = ", ".join(no_name) or "<device id>"
        return node_finding(
            view,
            fid="vm.passthrough-unregistered",
            sev=Severity.ERROR,
            link="device-plugin",
            cause=f"the node's KubeVirt GPU device plugin runs but announces no passthrough GPU, and VMs wait for "
            f"{', '.join(unoffered)}, which no node announces: {hit.cause}",
            evidence=[plugin, *said, *_pods(waiting, unoffered), f"release note: {hit.line}", hit.cite()],
            fix=f"{text}; it then announces the GPUs under their pci.ids name, or as nvidia.com/{ids} where its "
            f"pci.ids lacks the model: the VMs' deviceName must name what the node then announces",
            action=action,
        )
    bare = bare_ids(view.node)
    if not bare:
        return None
    short = [name for name, count in bare.items() if name in waiting and len(groups.get(_device(name), ())) > count]
    if not unoffered and not short:
        return None
    hit = defect(component, tag, "vm-misnamed")
    named = ", ".join(f"{k}: {v}" for k, v in sorted(bare.items()))
    evidence = [plugin, f"node {view.name} capacity {named}", *said, *_pods(waiting, unoffered + short)]
    if hit is not None:
        action, text = _repair(ctx, pod=pod, image=image, container=container, found=hit)
        why = (
            f"registers fewer of them than it found ({', '.join(short)})"
            if short
            else f"while VMs wait for {', '.join(unoffered)}, which no node announces"
        )
        return node_finding(
            view,
            fid="vm.passthrough-misnamed",
            sev=Severity.ERROR,
            link="device-plugin",
            cause=f"the node's KubeVirt GPU device plugin announces its GPUs by bare PCI device ID ({named}) and "
            f"{why}: {hit.cause}",
            evidence=[*evidence, f"release note: {hit.line}", hit.cite()],
            fix=f"{text}; the GPUs are then announced under their pci.ids model name: the VMs' deviceName (and "
            "KubeVirt's permittedHostDevices resourceName) must name it",
            action=action,
        )
    if not unoffered:
        return None  # a fixed release registering fewer than it found: no known defect says why
    first = sorted(bare)[0]
    return node_finding(
        view,
        fid="vm.passthrough-misnamed",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=f"the node's KubeVirt GPU device plugin ({tag}) announces its GPUs by bare PCI device ID ({named}): its "
        f"pci.ids does not name the model, so VMs asking for {', '.join(unoffered)} find no node with it.",
        evidence=evidence,
        fix=f"# where those VMs mean this node's GPUs (PCI 10DE:{_device(first).upper()}), ask for the name it "
        f"announces: {_vm_side(first, unoffered[0])}; or run a later KubeVirt GPU device plugin release whose pci.ids "
        "names the model",
    )
