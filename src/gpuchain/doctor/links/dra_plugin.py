"""NVIDIA's DRA driver kubelet plugin in the device-plugin link's place: it publishes the node's GPUs as
ResourceSlices instead of node capacity, and its chart's init container waits for the driver.

Facts from NVIDIA/k8s-dra-driver-gpu: the chart (deployments/helm/nvidia-dra-driver-gpu, templates/
kubeletplugin.yaml) runs init container ``init-container`` with ``hack/kubelet-plugin-prestart.sh``, which
loops every 10 s and leaves only once ``nvidia-smi`` from the driver under ``NVIDIA_DRIVER_ROOT`` (the chart's
``nvidiaDriverRoot``, default ``/``) exits 0; its own hint for a driver the GPU Operator manages is
``--set nvidiaDriverRoot=/run/nvidia/driver`` (GKE's install path is ``/home/kubernetes/bin/nvidia``).
"""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.dra_conflict import GPU_DRA_DRIVERS, published_devices
from gpuchain.doctor.driver_soname import unlocated
from gpuchain.doctor.evidence import install_driver, refused_message
from gpuchain.doctor.host_dirs import PROVIDED_BY
from gpuchain.doctor.links.common import Result, node_finding, placement_fix, said_in
from gpuchain.doctor.links.dra_stale import check_stale_plugin
from gpuchain.doctor.links.not_ready import not_ready
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.next_steps import last_line, shape_of
from gpuchain.doctor.owners import HELM_RELEASE, owner_daemonset, owner_ds
from gpuchain.doctor.placement import blocker
from gpuchain.doctor.pods import PodState, pod_state, start_refused
from gpuchain.doctor.scheduling import GPUCHAIN_DRA_DS, install_dra
from gpuchain.doctor.stacks.base import is_dra_plugin
from gpuchain.kube.allocator import ALLOCATOR_LABEL, DRA
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN, DRIVER, Operand

WHAT = "NVIDIA DRA kubelet plugin pod"
#: The chart a fix upgrades (helm repo nvidia = https://helm.ngc.nvidia.com/nvidia, as NVIDIA's docs add it).
CHART = "nvidia/nvidia-dra-driver-gpu"
#: The prestart script's line for a driver root whose fixed search directories hold no NVML library
#: (hack/kubelet-plugin-prestart.sh@2a3d430: "libnvidia-ml.so.1: not found, "); its error then asks to "review the
#: DRA driver's 'nvidiaDriverRoot' Helm chart variable" where the path is unexpected, else the driver's install.
ABSENT = "libnvidia-ml.so.1: not found"
#: Where the GPU Operator's driver container puts the driver on the host (its driverInstallDir).
OPERATOR_DRIVER_ROOT = next(root for root, link in PROVIDED_BY if link == "driver")


def _driver_root(pod: Obj) -> str:
    """The NVIDIA_DRIVER_ROOT the pod's containers are given ("/" where unset or empty, as the prestart script
    reads it)."""
    spec = pod.get("spec") or {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for env in c.get("env") or []:
            if env.get("name") == "NVIDIA_DRIVER_ROOT":
                return str(env.get("value") or "/")
    return "/"


def _where_driver_is(ctx: Context, view: NodeView) -> tuple[str, str]:
    """Where this node's driver is on the host, and what says so: the GPU Operator's driver container on the
    node, the stack's own driver root (GKE's installer), else the host's own install under /."""
    driver = view.pod(DRIVER)
    if driver is not None:
        return OPERATOR_DRIVER_ROOT, f"driver pod {name_of(driver)} on the node installs it at {OPERATOR_DRIVER_ROOT}"
    if ctx.stack.driver_root:
        return ctx.stack.driver_root, f"{ctx.stack.title} installs it at {ctx.stack.driver_root}"
    return "/", "no driver container runs on the node: the host's own driver, under /"


def _held_for_driver(ctx: Context, view: NodeView, pod: Obj, state: PodState) -> Result:
    """The plugin held in its init container, which waits for a driver under its NVIDIA_DRIVER_ROOT: pointed
    elsewhere than where this node's driver is, the chart's value is the fault (device-plugin link); pointed
    right, no working driver answers there (driver link)."""
    given = _driver_root(pod)
    wanted, why = _where_driver_is(ctx, view)
    ns = (pod.get("metadata") or {}).get("namespace") or ctx.namespace
    where = f"init container {state.waiting_init}" if state.waiting_init else state.container
    held = f"{where}: NVIDIA_DRIVER_ROOT={given}"
    stuck = (
        f"is held in its init container {state.waiting_init}, which waits until nvidia-smi runs from the driver under "
        f"NVIDIA_DRIVER_ROOT={given}"
        if state.waiting_init
        else f"is {state.status}: it locates the driver's libraries (libnvidia-ml.so) under NVIDIA_DRIVER_ROOT={given} "
        "and exits when they are not there (cmd/gpu-kubelet-plugin/nvlib.go newDeviceLib)"
    )
    rerun = ctx.stack.render(Fix.delete_pod(ns, name_of(pod)))
    if given.rstrip("/") != wanted.rstrip("/"):
        ds = owner_daemonset(ctx, pod)
        release = ((ds.get("metadata") or {}).get("labels") or {}).get(HELM_RELEASE) or "<release>"
        finding = node_finding(
            view,
            fid="device-plugin.not-ready",
            sev=Severity.ERROR,
            link="device-plugin",
            cause=f"NVIDIA's DRA kubelet plugin {stuck}; this node's driver is at {wanted}, so it never finishes and "
            "the node's GPUs are published to no ResourceSlice.",
            evidence=[state.describe(), held, why],
            fix=f"helm upgrade {release} {CHART} -n {ns} --reuse-values --set nvidiaDriverRoot={wanted}   # the "
            "chart's driver root where this node's driver is; its pods restart with it",
        )
        return Result(LinkState.BROKEN, f"DRA plugin waits for a driver at {given}", (finding,))
    ds = owner_daemonset(ctx, pod)
    release = ((ds.get("metadata") or {}).get("labels") or {}).get(HELM_RELEASE) or "<release>"
    elsewhere = (
        f"; or, where the node's OS keeps the driver's files under another prefix, point the chart's driver root at "
        f"it: helm upgrade {release} {CHART} -n {ns} --reuse-values --set nvidiaDriverRoot=<that prefix> (the "
        "plugin looks only in usr/bin, bin, sbin and usr/lib64, usr/lib, lib64 and their <arch>-linux-gnu below it)"
        if ABSENT in ctx.log(pod, state.waiting_init or state.container)
        else ""
    )
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"{install_driver(ctx)} (nvidia-smi must run from {wanted}){elsewhere}; then {rerun}",
            NOT_SIMULATED: "whether the host's driver answers is a fact of the node no scenario names",
        },
    )
    finding = node_finding(
        view,
        fid="driver.not-installed",
        sev=Severity.ERROR,
        link="driver",
        cause=f"NVIDIA's DRA kubelet plugin is held in its init container {state.waiting_init}, which leaves only once "
        f"nvidia-smi runs from the driver under NVIDIA_DRIVER_ROOT={given}, where this node's driver is: no working "
        "driver answers there, so no GPU is published for the node.",
        evidence=[state.describe(), held, why],
        fix=ctx.stack.render(action),
        action=action,
    )
    return Result(LinkState.BROKEN, "no driver answers for the DRA plugin", (finding,))


def _empty_slices(ctx: Context, view: NodeView) -> list[str]:
    """The names of the GPU DRA drivers' ResourceSlices for this node that carry no device."""
    return [
        name_of(s)
        for s in ctx.snapshot.resource_slices
        if (spec := s.get("spec") or {}).get("driver") in GPU_DRA_DRIVERS
        and spec.get("nodeName") == view.name
        and not spec.get("devices")
    ]


def _ready_unpublished(ctx: Context, view: NodeView, pod: Obj, state: PodState) -> Result:
    """NVIDIA's DRA kubelet plugin runs ready and no ResourceSlice carries a GPU of this node. Ready proves its
    driver root right: the plugin locates the driver's libraries under NVIDIA_DRIVER_ROOT and initialises NVML
    before it serves, and exits when it cannot (k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/nvlib.go newDeviceLib
    "failed to locate driver libraries", called from device_state.go NewDeviceState@v25.12.0). It publishes the
    GPUs it enumerated at its start once and never looks again (driver.go PublishResources), so an empty slice is
    a plugin that started before the driver had initialised the GPUs, and no slice is its registration with the
    kubelet lost: either way a new plugin pod, started once the driver lists the GPUs, publishes them."""
    ns = (pod.get("metadata") or {}).get("namespace") or ctx.namespace
    empty = _empty_slices(ctx, view)
    evidence = [
        state.describe(),
        f"NVIDIA_DRIVER_ROOT={_driver_root(pod)}: the plugin serves only once it found the driver's libraries there",
        f"ResourceSlice {empty[0]} of the node carries no device"
        if empty
        else f"no ResourceSlice of {', '.join(GPU_DRA_DRIVERS)} for {view.name}",
    ]
    action = Fix.delete_pod(ns, name_of(pod), **{NOT_SIMULATED: "NVIDIA's DRA plugin is not simulated"})
    if empty:
        why = (
            "it published its ResourceSlice with no device: it enumerates the GPUs once, at its start, and started "
            "before the driver had initialised them (its driver root is right, or it would not run)."
        )
        then = "   # once nvidia-smi lists the node's GPUs: the new plugin pod enumerates them again and republishes"
    else:
        why = "its registration with the kubelet is lost."
        then = "   # a new plugin pod registers with the kubelet and publishes the GPUs"
    finding = node_finding(
        view,
        fid="device-plugin.dra-unpublished",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=f"the {WHAT} runs ready, but no ResourceSlice publishes this node's GPUs, so no claim can be allocated "
        "one here: " + why,
        evidence=evidence,
        fix=ctx.stack.render(action) + then,
        action=action,
    )
    return Result(LinkState.BROKEN, "no ResourceSlice published for the node's GPUs", (finding,))


def check_dra_plugin(ctx: Context, *, view: NodeView, pod: Obj, state: PodState, log: str) -> Result:
    """The device-plugin link served by NVIDIA's DRA kubelet plugin: ready is working (its GPUs are
    ResourceSlices, never node capacity), held in its init container is the driver it waits for, else its
    pod's failure read as any operand's."""
    if state.ready:
        behind = check_stale_plugin(ctx, view=view, pod=pod, state=state)
        if behind is not None:
            return behind
        published = published_devices(ctx.snapshot).get(view.name, {})
        if published or "resourceslices" in ctx.snapshot.absent:
            counts = ", ".join(f"{d}: {n} devices" for d, n in sorted(published.items())) or "not in the dump"
            return Result(
                LinkState.OK, f"NVIDIA DRA kubelet plugin Running: GPUs published as ResourceSlices ({counts})"
            )
        return _ready_unpublished(ctx, view, pod, state)
    if state.waiting_init and not state.failing:
        return _held_for_driver(ctx, view, pod, state)
    if not catalog.known_error(log) and _driver_root(pod).rstrip("/") != _where_driver_is(ctx, view)[0].rstrip("/"):
        return _held_for_driver(ctx, view, pod, state)  # exits where no driver library is under its root
    unlinked = _host_library_unlinked(ctx, view=view, pod=pod, state=state, log=log)
    if unlinked is not None:
        return unlinked
    return not_ready(
        ctx,
        view=view,
        operand=DEVICE_PLUGIN,
        link="device-plugin",
        what=WHAT,
        state=state,
        log=log,
        cause=f"the {WHAT} is {state.status}, so the node's GPUs are published to no ResourceSlice.",
    )


#: The plugin's driver-root lookup asks for the driver library by its SONAME link, resolving it under the root and
#: the usual library directories, and never globs for the versioned file (NVIDIA/k8s-dra-driver-gpu's nvml
#: DriverRoot.findFile "error locating %q", GetNVMLPath looking up "libnvidia-ml.so.1"); the driver's installer
#: and packages leave that link to ldconfig, which creates it beside libnvidia-ml.so.<version>. Its NVML loader and
#: go-nvlib's probe say the same in glibc's words: `driver_soname.unlocated` reads every component's wording.


def _host_library_unlinked(ctx: Context, *, view: NodeView, pod: Obj, state: PodState, log: str) -> Result | None:
    """The plugin exits finding no driver library by its SONAME under a driver root that is where this node's host
    driver is (no driver container runs here): the host's driver install lacks that name, either its library links
    (ldconfig's) are gone beside the versioned file or the driver's user-space is not installed: the driver link,
    repaired on the host, and the plugin's chart is right as it is. None elsewhere (an operator's driver pod, a root
    the chart points elsewhere: `_held_for_driver`)."""
    said = unlocated(log)
    wanted, why = _where_driver_is(ctx, view)
    if said is None or view.pod(DRIVER) is not None or _driver_root(pod).rstrip("/") != wanted.rstrip("/"):
        return None
    lib, root = said.lib, wanted.rstrip("/") or "/"
    base, stem = wanted.rstrip("/"), lib.partition(".so")[0]
    ns = (pod.get("metadata") or {}).get("namespace") or ctx.namespace
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"on the host, look for {lib} under {root} (ls -l {base}/usr/lib*/{stem}.so* "
            f"{base}/usr/lib/*-linux-gnu/{stem}.so*): where only the versioned file is there, the driver's library "
            f"links are missing: run ldconfig on the host, which creates the {lib} symlink to it (or reinstall "
            "the driver); "
            f"where no version is there, {install_driver(ctx)}; then "
            + ctx.stack.render(Fix.delete_pod(ns, name_of(pod))),
            "drain": False,
            NOT_SIMULATED: "the host's library links are a fact of the node no scenario names",
        },
    )
    finding = node_finding(
        view,
        fid="driver.library-unlinked",
        sev=Severity.ERROR,
        link="driver",
        cause=f"the {WHAT} is {state.status}: it finds no {lib} under NVIDIA_DRIVER_ROOT={_driver_root(pod)}, where "
        f"this node's host driver is. It looks the library up by that link name only, which ldconfig creates beside "
        "the driver's versioned library: the host driver's library links are missing (or its user-space is not "
        "installed), so no GPU of the node is published.",
        evidence=[state.describe(), f"log: {said.said}", why],
        fix=ctx.stack.render(action),
        action=action,
    )
    return Result(LinkState.BROKEN, f"host driver has no {lib}", (finding,))


def _gpuchain_dra_pod(ctx: Context, view: NodeView) -> Obj | None:
    """gpuchain's DRA plugin pod on this node (a pod of DaemonSet ``gpuchain-dra-plugin``), if any."""
    return next((p for p in view.workloads if owner_ds(p) == GPUCHAIN_DRA_DS), None)


def _before_restart(ctx: Context, *, view: NodeView, pod: Obj, log: str, known: catalog.Match | None) -> str:
    """What gpuchain's failing DRA plugin needs before its pod is started again: the catalog's repair of the line it
    knows, else the repair of the unknown line's shape (`next_steps.shape_of`: its last error line, the runtime's
    refusal, its last line), as a comment ending in "then "; "" where neither names one (the restart is the step)."""
    if known is not None:
        return f"# {known.entry.fix}; then "
    line = catalog.unknown_error(log) or ""
    found = shape_of(ctx, link="device-plugin", said=(line, refused_message(view, pod), last_line(log)), node=view.name)
    return f"# {found.action} (gpuchain answers the line by its shape: {found.what}); then " if found else ""


def check_gpuchain_dra(ctx: Context, view: NodeView) -> Result:
    """A node whose GPUs the label gives to gpuchain's DRA plugin has no nvidia.com/gpu capacity by design; the
    link works when the plugin publishes the node's GPUs in a ResourceSlice. Followed down the DRA chain where it
    does not: no plugin DaemonSet (the chart's dra.enabled off), none placed on the node (a taint or selector),
    its pod not running, or running with nothing published (its registration with the kubelet lost)."""
    published = published_devices(ctx.snapshot).get(view.name, {})
    label = f"{ALLOCATOR_LABEL}={DRA}"
    if "resourceslices" in ctx.snapshot.absent:
        return Result(LinkState.OK, f"the node's GPUs are the DRA driver's ({label}; ResourceSlices not in the dump)")
    if published:
        counts = ", ".join(f"{d}: {n} devices" for d, n in sorted(published.items()))
        return Result(LinkState.OK, f"the node's GPUs are the DRA driver's ({label}; ResourceSlices: {counts})")
    ds = next((d for d in ctx.snapshot.daemonsets if name_of(d) == GPUCHAIN_DRA_DS), None)
    pod = _gpuchain_dra_pod(ctx, view)
    state = pod_state(pod) if pod is not None else None
    evidence = [f"node label {label}", f"no ResourceSlice of {GPU_DRA_DRIVERS[0]} for {view.name}"]
    cause = (
        f"the node's GPUs are given to gpuchain's DRA plugin ({label}), so it announces no nvidia.com/gpu by design, "
        "but no ResourceSlice publishes them: no claim can be allocated a GPU here"
    )
    action: Fix | None
    if ds is None:
        action, fix = install_dra(ctx)
        why = ": no gpuchain-dra-plugin DaemonSet runs (the chart's dra.enabled is off)."
    elif pod is None:
        block = blocker(ds, view.node)
        action = placement_fix(ctx, view=view, ds=ds, block=block) if block is not None else None
        restart = f"kubectl -n {namespace_of(ds) or ctx.namespace} rollout restart daemonset {GPUCHAIN_DRA_DS}"
        fix = ctx.stack.render(action) if action is not None else restart
        why = f": the {GPUCHAIN_DRA_DS} DaemonSet places no pod on the node" + (
            f" ({block.describe()})." if block is not None else " although it admits it."
        )
    elif state is not None and not state.ready:
        ns = namespace_of(pod) or ctx.namespace
        log = "\n".join((state.last_log, state.message, ctx.log(pod, state.container or "dra-plugin")))
        said = said_in(log)
        known = catalog.known_error("\n".join(said))
        evidence += [state.describe(), *said]
        action = Fix.delete_pod(ns, name_of(pod), **{NOT_SIMULATED: "gpuchain's DRA plugin is not simulated"})
        fix = _before_restart(ctx, view=view, pod=pod, log=log, known=known) + ctx.stack.render(action)
        why = f": its DRA plugin pod is {state.status}."
    else:
        ns = namespace_of(pod) or ctx.namespace
        action = Fix.delete_pod(ns, name_of(pod), **{NOT_SIMULATED: "gpuchain's DRA plugin is not simulated"})
        fix = ctx.stack.render(action) + "   # a new plugin pod registers with the kubelet and publishes the GPUs"
        evidence.append(state.describe() if state else "")
        why = ": its DRA plugin pod runs but published nothing (its registration with the kubelet is lost)."
    finding = node_finding(
        view,
        fid="device-plugin.dra-unpublished",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=cause + why,
        evidence=evidence,
        fix=fix,
        action=action,
    )
    return Result(LinkState.BROKEN, "no ResourceSlice published for the node's GPUs", (finding,))


#: The kubelet's Warning Event reasons for a pod whose claims it could not have prepared, and for a container the
#: runtime refused to create (kubernetes pkg/kubelet/events/event.go@v1.34.4: FailedPrepareDynamicResources,
#: FailedToCreateContainer = "Failed", the latter "Error: %v" with the runtime's message).
DRA_EVENTS = ("FailedPrepareDynamicResources", "Failed")
#: What the DRA path says when a pod's GPU claims cannot be set up (catalog.yaml), most specific first: NVIDIA's
#: plugin's reasons, the runtime's missing CDI spec of a claim, then the kubelet's own words around them.
DRA_PREPARE = (
    "k8s-dra-driver-gpu.claim-config-invalid",
    "k8s-dra-driver-gpu.mps-with-dynamic-mig",
    "k8s-dra-driver-gpu.mig-profile-missing",
    "k8s-dra-driver-gpu.mig-mode-disabled",
    "k8s-dra-driver-gpu.device-unhealthy",
    "k8s-dra-driver-gpu.device-not-allocatable",
    "k8s-dra-driver-gpu.imex-dns-names-driver-too-old",
    "k8s-dra-driver-gpu.checkpoint-corrupted",
    "k8s-dra-driver-gpu.device-already-allocated",
    "k8s-dra-driver-gpu.mig-create-failed",
    "k8s-dra-driver-gpu.cdi-spec-failed",
    "cdi.unresolvable-dra-claim",
    "k8s-dra-driver-gpu.prepare-failed",
    "kubelet.dra-driver-not-registered",
    "kubelet.dra-prepare-failed",
)
#: The kubelet's words, which wrap any DRA driver's error: a GPU's only where the message names a GPU DRA driver.
KUBELET_WORDS = frozenset({"kubelet.dra-driver-not-registered", "kubelet.dra-prepare-failed"})
#: Repairs done on the node before the plugin restarts (its checkpoint file), not by the restart alone.
ON_NODE = frozenset({"k8s-dra-driver-gpu.checkpoint-corrupted", "k8s-dra-driver-gpu.device-already-allocated"})
#: Answers about the claim itself or the device it was given (its config, a MIG profile or mode, an unhealthy or
#: vanished GPU, a feature the node's driver lacks): restarting the plugin changes nothing, the entry's repair does.
CLAIM_SIDE = frozenset(DRA_PREPARE[:7])
#: Failures of a claim the kubelet holds as prepared: it never asks the plugin again, so the pod is recreated.
PREPARED_CLAIM = frozenset({"cdi.unresolvable-dra-claim"})


def _gpu_dra_said(text: str) -> catalog.Match | None:
    """The entry that knows what the DRA path said in ``text``, where it is about a GPU claim: NVIDIA's plugin's
    own words or a GPU claim's CDI name, or the kubelet's naming a GPU DRA driver."""
    found = catalog.find(text, *DRA_PREPARE)
    if found is None or (found.entry.id in KUBELET_WORDS and not any(d in text for d in GPU_DRA_DRIVERS)):
        return None
    return found


def node_dra_plugin(ctx: Context, view: NodeView) -> Obj | None:
    """The GPU DRA kubelet plugin pod on this node: NVIDIA's (its kubelet-plugin DaemonSet's before another pod of
    its image, a compute domain's daemon) or gpuchain's. Searched in every pod only for a node with a failing
    claim: beside a running device plugin, NVIDIA's plugin pod is not the node's device-plugin operand pod."""
    here = _dra_plugin_pods(ctx).get(view.name, [])
    return min(here, key=lambda p: not owner_ds(p).endswith(("kubelet-plugin", GPUCHAIN_DRA_DS)), default=None)


def _dra_plugin_pods(ctx: Context) -> dict[str, list[Obj]]:
    """The DRA kubelet plugin pods not finished, by node, in the snapshot's order: found in one pass a diagnosis
    (`Context.memo`), where each node that asked searched every pod of the cluster (on a cluster that allocates its
    GPUs through DRA alone, every node asks)."""
    known = ctx.memo.get("dra_plugin_pods")
    if isinstance(known, dict):
        return known
    found: dict[str, list[Obj]] = {}
    for p in ctx.snapshot.pods:
        node = (p.get("spec") or {}).get("nodeName")
        if (
            node
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and (is_dra_plugin(p) or owner_ds(p) == GPUCHAIN_DRA_DS)
        ):
            found.setdefault(str(node), []).append(p)
    ctx.memo["dra_plugin_pods"] = found
    return found


def stale_dra_plugin(ctx: Context, view: NodeView) -> Result | None:
    """Where the stack deploys no device plugin here, NVIDIA's DRA kubelet plugin that another chart runs on the node,
    ready but serving an older driver than the node's (`dra_stale`); None where none runs or it serves the current
    one."""
    pod = node_dra_plugin(ctx, view)
    state = pod_state(pod) if pod is not None and is_dra_plugin(pod) else None
    if pod is None or state is None or not state.ready:
        return None
    return check_stale_plugin(ctx, view=view, pod=pod, state=state)


def _rank(said: catalog.Match) -> int:
    """How specific what was said is: its entry's place in `DRA_PREPARE`."""
    return DRA_PREPARE.index(said.entry.id)


def _failing_claims(view: NodeView) -> list[tuple[Obj, str, catalog.Match]]:
    """The pods with ResourceClaims on this node, not running ready, whose claims the DRA path fails to set up:
    each with where it was said (an Event's reason, a container's state) and what."""
    # The kubelet prepares claims only for a pod that has some (its DRA manager walks spec.resourceClaims), so a
    # FailedPrepareDynamicResources Event names such a pod even where the dump left the pod's claims out.
    prepared = {
        ((ev.get("involvedObject") or {}).get("namespace"), str((ev.get("involvedObject") or {}).get("name")))
        for ev in view.events
        if ev.get("reason") == DRA_EVENTS[0]
    }
    by_name = {
        (namespace_of(p), name_of(p)): p
        for p in view.workloads
        if ((p.get("spec") or {}).get("resourceClaims") or (namespace_of(p), name_of(p)) in prepared)
        and not pod_state(p).ready
    }
    out: dict[tuple[str | None, str], tuple[Obj, str, catalog.Match]] = {}
    for ev in view.events:
        ref = ev.get("involvedObject") or {}
        key = (ref.get("namespace"), str(ref.get("name")))
        if ev.get("reason") not in DRA_EVENTS or key not in by_name:
            continue
        said = _gpu_dra_said(str(ev.get("message") or ""))
        if said is not None and (key not in out or _rank(said) < _rank(out[key][2])):
            out[key] = (by_name[key], f"event {ev.get('reason')}", said)
    for key, pod in by_name.items():
        said = _gpu_dra_said(start_refused(pod))
        if key not in out and said is not None:
            out[key] = (pod, f"container {pod_state(pod).status}", said)
    return sorted(out.values(), key=lambda f: (namespace_of(f[0]) or "", name_of(f[0])))


def claims_not_prepared(ctx: Context, view: NodeView) -> Finding | None:
    """GPU pods on this node held in ContainerCreating because the DRA path cannot set up their claims: the kubelet's
    Prepare through the node's DRA kubelet plugin fails (its FailedPrepareDynamicResources Events), or the runtime
    finds no CDI spec for a claim the plugin reported prepared. The node's DRA plugin is the root, the pods its
    consequences; the repair is the plugin's (its checkpoint, its CDI state, its registration), read from what it
    said (catalog.yaml)."""
    failing = _failing_claims(view)
    if not failing:
        return None
    shown, where, said = min(failing, key=lambda f: _rank(f[2]))
    plugin = node_dra_plugin(ctx, view)
    pods = [f"{namespace_of(p)}/{name_of(p)}" for p, _, _ in failing]
    wrapper = catalog.find(said.line, "kubelet.dra-prepare-failed")
    cites = [said.entry.cite(), *([wrapper.entry.cite()] if wrapper and wrapper.entry is not said.entry else [])]
    evidence = [f"{where} on pod {namespace_of(shown)}/{name_of(shown)}", f"says: {said.line}", *cites]
    action: Fix | None
    if plugin is None:
        action = None
        fix = (
            f"# no GPU DRA kubelet plugin pod runs on {view.name}, whose devices the claims were given: have the DRA "
            "driver's kubelet plugin DaemonSet place a pod there; the kubelet's next retry prepares the claims"
        )
    else:
        ns = namespace_of(plugin) or ctx.namespace
        evidence.append(f"DRA kubelet plugin {pod_state(plugin).describe()}")
        restart = Fix.delete_pod(
            ns, name_of(plugin), **{NOT_SIMULATED: "a DRA plugin's prepared claims are not simulated"}
        )
        if said.entry.id in CLAIM_SIDE:
            action = None
            fix = "# " + said.entry.repair(view.name, namespace=ns, pod=name_of(plugin))
        elif said.entry.id in ON_NODE:
            action = Fix(
                FixOp.NODE,
                view.name,
                {
                    "action": said.entry.repair(view.name, namespace=ns, pod=name_of(plugin)),
                    "drain": False,
                    NOT_SIMULATED: "the DRA plugin's checkpoint file is not simulated",
                },
            )
            fix = ctx.stack.render(action)
        else:
            action = restart
            again = [Fix.delete_pod(namespace_of(p) or "default", name_of(p)) for p, _, _ in failing[:3]]
            fix = " && ".join(
                ctx.stack.render(a) for a in (restart, *(again if said.entry.id in PREPARED_CLAIM else ()))
            )
            fix += (
                "   # the claims' pods are made again and their claims prepared anew"
                if said.entry.id in PREPARED_CLAIM
                else "   # the kubelet retries the claims' Prepare with the new plugin pod by itself"
            )
    return Finding(
        id="device-plugin.dra-prepare-failed",
        severity=Severity.ERROR,
        link="device-plugin",
        cause=f"{len(pods)} pod(s) with GPU ResourceClaims on this node stay ContainerCreating, held by the node's DRA "
        f"kubelet plugin: {said.entry.cause}",
        evidence=tuple(evidence),
        fix=fix,
        node=view.name,
        consequences=tuple(f"pod {p}: ContainerCreating, its GPU claims not set up" for p in pods[:8]),
        action=action,
    )


def dra_served(ctx: Context, view: NodeView, operand: Operand) -> Result | None:
    """Where the policy switches the device plugin off, or the source has no ClusterPolicy to say, NVIDIA's DRA kubelet
    plugin on the node serves its GPUs in the device plugin's place: NVIDIA installs the GPU Operator beside its DRA
    driver with the device plugin off (NVIDIA cloud-native-docs gpu-operator/latest/dra-intro-install.html: ``--set
    devicePlugin.enabled=false``), so the link is that plugin's (`stale_dra_plugin`, else skipped), not a plugin
    missing; None for another operand or where no such plugin runs on the node."""
    plugin = node_dra_plugin(ctx, view) if operand is DEVICE_PLUGIN else None
    if plugin is None or not is_dra_plugin(plugin):
        return None
    return stale_dra_plugin(ctx, view) or Result(
        LinkState.SKIPPED, f"no device plugin DaemonSet: NVIDIA's DRA kubelet plugin {name_of(plugin)} serves the GPUs"
    )
