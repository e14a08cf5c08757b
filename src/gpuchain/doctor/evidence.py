"""What failing containers say, read the same way on every link: the shared part of the walk.

Two sources, both independent of which stack runs the cluster:

- the evidence catalog (`catalog`, scope "anywhere"): an error line a component or the runtime writes,
  with the link it proves broken, whatever pod shows it. "driver/library version mismatch" is the driver's fault even
  when the container that prints it is the toolkit's validation or the device plugin (its runtime
  hook calls NVML first);
- the validations: NVIDIA's validator runs one init container per link (`Stack.validations`); one
  that fails (StartError, CreateContainerError, RunContainerError, a crash loop, a hook exiting 1)
  breaks that link, and the operands that wait behind it are consequences, never the root.

`failure_at(ctx, view, link, witnessed)` answers, for one link of one node, the first such failure
(of `witnesses`), or None.
The walk asks it before the link's own check, bottom-up, so the lowest link a failure proves broken
is named first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuchain.doctor import catalog
from gpuchain.doctor.catalog import Entry
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.fabric_logs import CUDA_VALIDATION
from gpuchain.doctor.host_dirs import link_making, waits_on_host_path
from gpuchain.doctor.leftover_runtime import leftover_runtime
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.links.cuda_branches import needed
from gpuchain.doctor.links.docker_runtime import docker_toolkit_repair
from gpuchain.doctor.links.fabric import fabric_repair
from gpuchain.doctor.links.releases import release_repair
from gpuchain.doctor.links.stale_plugin_root import stale_plugin_root
from gpuchain.doctor.links.validator_cuda import validation_proves, validation_release
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.next_steps import next_step, shape_first, shape_of, silent_fix
from gpuchain.doctor.node import runtime_scheme, runtime_setup
from gpuchain.doctor.node_image import node_image, nodeadm_left_runc
from gpuchain.doctor.owners import owner_daemonset, repair_target, silent, volumes_spec
from gpuchain.doctor.pods import (
    FAILED_TERMINATION,
    FAILING,
    NOT_CREATED,
    pod_state,
    start_refused,
)
from gpuchain.doctor.releases import NEWEST, showing, version_of
from gpuchain.kube.gpu_resources import node_gpu_resources, pod_gpu_requests
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN, DRIVER, RUNTIME_CLASS_HANDLER, TOOLKIT, Operand

#: The kubelet's message when a hostPath volume of type Directory is not on the host (catalog.yaml).
HOST_PATH_ENTRY = "kubelet.hostpath-not-directory"
HOST_PATH = re.compile(r"hostPath type check failed: (\S+) is not a directory")
#: The finding a message raises where it proves a link broken in any pod (scope "anywhere" in
#: catalog.yaml, or a missing driver on a stack whose node image should carry it).
FINDING_OF = {
    "nvml.version-mismatch": "driver.version-mismatch",
    "cuda.compat-not-supported": "driver.too-old",
    "cuda.system-not-ready": "driver.fabric-manager",
    "nvidia-container-toolkit.cuda-requirement": "driver.too-old",
    "libnvidia-container.brand-requirement": "driver.too-old",
    "k8s-device-plugin.available-devices-failed": "driver.gpu-unavailable",
    "gke-device-plugin.driver-install-disabled": "driver.not-installed",
    "gke-device-plugin.driver-device-missing": "driver.not-installed",
    HOST_PATH_ENTRY: "driver.not-installed",
}
#: The kubelet's waiting reasons for a container it never handed to the runtime: it could not get its image
#: (kubernetes pkg/kubelet/images/types.go@v1.34.4: ErrImagePull, ImagePullBackOff, ErrImageNeverPull,
#: InvalidImageName) or not build its config from the pod spec (pkg/kubelet/kuberuntime/kuberuntime_container.go
#: ErrCreateContainerConfig, "CreateContainerConfigError": a ConfigMap, Secret or key it names is missing).
NOT_STARTED = frozenset(
    {"ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError"}
)
NOT_ON_NODE_IMAGE = "driver.not-on-node-image"
#: The operand whose pod serves each foundation link, whose object a failure of that link's validation repairs.
LINK_OPERANDS: dict[str, Operand] = {"driver": DRIVER, "toolkit": TOOLKIT, "device-plugin": DEVICE_PLUGIN}
#: The finding of an operand container the NVIDIA runtime hook refused to start (`refused_by_hook`).
HOOK_FAILED = "toolkit.hook-failed"
#: The runtime's words that a hook failed without saying why (runc's wrapping, the CLI's prefix): where no
#: entry knows the hook's own message, the toolkit's runtime config is written again.
HOOK_WRAPPERS = ("runc.prestart-hook-failed", "libnvidia-container.initialization-error")
#: Entries that say the toolkit failed but not how: the hook's wrappers, and the operator validator's "toolkit is
#: not ready". Their repair is the node's own runtime set up again (CRI-O's hooks_dir or handler, containerd's
#: config), which only the node's runtime tells; an entry that names its cause keeps its own repair.
TOOLKIT_UNSAID = (*HOOK_WRAPPERS, "gpu-operator.validator-toolkit-not-ready")
#: The catalog's component name for what NVIDIA's container toolkit (its runtime hook, its CLI) writes.
TOOLKIT_COMPONENT = "nvidia-container-toolkit"
#: The loader refusing the toolkit's host binary for a glibc newer than the host's (catalog.yaml).
HOST_GLIBC = "glibc.toolkit-version-not-found"
#: The catalog entries that prove their link broken in whatever pod shows them.
ANYWHERE = tuple(e.id for e in catalog.entries() if e.scope == "anywhere")
#: A running plugin's word that NVML loaded but lists no GPU: where the node image carries the driver and the
#: node announces none, the image's driver does not serve this GPU (catalog on_node_image: driver).
NO_GPU_ON_IMAGE = "k8s-device-plugin.no-devices"
#: The other node-image entries: NVML itself missing in the container, which a running plugin's runtime explains.
NVML_MISSING = tuple(e.id for e in catalog.entries() if e.on_node_image and e.id != NO_GPU_ON_IMAGE)


@dataclass(frozen=True, kw_only=True)
class Failure:
    """A failing container on a node: the pod, the container, its state and every line it left."""

    pod: Obj
    container: str
    reason: str
    text: str  #: waiting message, last terminated message and the log the gather step read
    init: bool
    restarts: int
    #: A host directory a lower link makes that the pod's sandbox waits on, read from its state where no Event said
    #: so (`waits_on_host_path`); "" for a failure its own words show.
    host_path: str = ""

    def describe(self) -> str:
        kind = "init container" if self.init else "container"
        more = f", {self.restarts} restarts" if self.restarts else ""
        return f"pod {name_of(self.pod)}: {kind} {self.container} {self.reason}{more}"


def _failing(status: Obj) -> str | None:
    state = status.get("state") or {}
    waiting = (state.get("waiting") or {}).get("reason")
    if waiting in FAILING:
        return str(waiting)
    term = state.get("terminated") or {}
    if term.get("reason") in FAILED_TERMINATION and term.get("exitCode") not in (0, None):
        return str(term["reason"])
    return None


def _validation_pods(ctx: Context, view: NodeView) -> list[Obj]:
    """Pods on this node in the stack's namespace that no controller owns: the workloads NVIDIA's validator
    starts itself to prove a link (nvidia-cuda-validator, nvidia-device-plugin-validator)."""
    return [
        p
        for p in view.workloads
        if (p.get("metadata") or {}).get("namespace") == ctx.namespace
        and not (p.get("metadata") or {}).get("ownerReferences")
    ]


def pod_failures(ctx: Context, view: NodeView, pod: Obj) -> list[Failure]:
    """The failing containers of one pod, init containers first. A container the runtime refused to create or
    start never wrote a log: its words are the runtime's, in its state and in the kubelet's Warning ``Failed``
    Events of the pod ("Error: " and the runtime's error), which a report may keep where the state lost them."""
    out = []
    status = pod.get("status") or {}
    for key, init in (("initContainerStatuses", True), ("containerStatuses", False)):
        for cs in status.get(key) or []:
            reason = _failing(cs)
            if reason is None:
                continue
            last = (cs.get("lastState") or {}).get("terminated") or {}
            lines = [
                str(((cs.get("state") or {}).get("waiting") or {}).get("message") or ""),
                str(((cs.get("state") or {}).get("terminated") or {}).get("message") or ""),
                str(last.get("message") or ""),
                ctx.log(pod, str(cs.get("name"))),
            ]
            if last.get("reason") in FAILED_TERMINATION and reason == "CrashLoopBackOff":
                reason = f"CrashLoopBackOff (last: {last['reason']})"
            if _refusal(reason):
                lines += runtime_events(view, pod)
            out.append(
                Failure(
                    pod=pod,
                    container=str(cs.get("name")),
                    reason=reason,
                    text="\n".join(x for x in lines if x),
                    init=init,
                    restarts=int(cs.get("restartCount") or 0),
                )
            )
    return sorted(out, key=lambda f: not f.init)


def failures(ctx: Context, view: NodeView) -> list[Failure]:
    """Every failing container of the chain's pods on this node (the validator's own workload pods
    included), init containers first."""
    # pod_state fails a pod on the first container status _failing names: none here, as on most nodes
    failing = [pod for pod, state in view.states if state.failing]
    failing += [pod for pod in _validation_pods(ctx, view) if pod_state(pod).failing]
    if not failing:
        return []
    out = [f for pod in failing for f in pod_failures(ctx, view, pod)]
    return sorted(out, key=lambda f: not f.init)


def _refusal(reason: str) -> bool:
    """Is ``reason`` (a `Failure`'s) the runtime refusing to create or start the container, now or last time?"""
    return reason.removeprefix("CrashLoopBackOff (last: ").removesuffix(")") in NOT_CREATED


def refused_message(view: NodeView, pod: Obj) -> str:
    """The container runtime's message for a container of ``pod`` it refused to create or start: from the
    container's state, else from the pod's Warning ``Failed`` Events; "" when no container was refused."""
    said = start_refused(pod)
    if said:
        return said
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    refused = any(
        (st.get(phase) or {}).get("reason") in NOT_CREATED
        for cs in statuses
        for st in (cs.get("state") or {}, cs.get("lastState") or {})
        for phase in ("terminated", "waiting")
    )
    return (runtime_events(view, pod) or [""])[-1] if refused else ""


def runtime_events(view: NodeView, pod: Obj) -> list[str]:
    """The messages of the kubelet's Warning ``Failed`` Events of ``pod``: where the runtime refused a container,
    its error (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go@v1.34.4 startContainer records
    "Error: " and the error)."""
    return [
        str(e.get("message") or "")
        for e in view.events
        if e.get("reason") == "Failed" and (e.get("involvedObject") or {}).get("name") == name_of(pod)
    ]


def probe_failures(view: NodeView, pod: Obj) -> list[str]:
    """The outputs of ``pod``'s failing probes, from the kubelet's Warning ``Unhealthy`` Events ("Readiness probe
    failed: " and the probe's output, kubernetes pkg/kubelet/prober/prober.go@v1.34.4): a container that runs but
    is not ready writes its reason there, not in its log (the driver pod's nvidia-peermem sidecar)."""
    return [
        str(e.get("message") or "")
        for e in view.events
        if e.get("reason") == "Unhealthy" and (e.get("involvedObject") or {}).get("name") == name_of(pod)
    ]


def refused_workloads(ctx: Context, view: NodeView) -> list[Failure]:
    """GPU pods the runtime refused to start with a message that proves a link broken wherever it shows
    (a version mismatch the runtime hook met in NVML): witnesses for that link, as an operand would be."""
    out = []
    for pod in view.workloads:
        said = start_refused(pod) if pod_gpu_requests(pod) else ""
        if said and catalog.find(said, *ANYWHERE):
            container = str(((pod.get("spec") or {}).get("containers") or [{}])[0].get("name", ""))
            out.append(Failure(pod=pod, container=container, reason="StartError", text=said, init=False, restarts=0))
    return out


def running_says(ctx: Context, view: NodeView) -> list[Failure]:
    """Running operand containers (init containers too: one that waits for a lower link may say why) whose log
    (read by the gather step) holds a message that proves a link broken wherever it shows (catalog scope
    "anywhere", or NVML listing no GPU on a node image stack whose node announces none): a plugin that keeps
    running after NVML failed under it is as good a witness as one that crashed."""
    if not ctx.logs_read:
        return []  # no log was read (a healthy cluster): no running container has a line to say
    out = []
    image = ctx.stack.node_image and not any(node_gpu_resources(view.node).values())
    for pod in view.pods:
        if not ctx.logged(pod):
            continue
        status = pod.get("status") or {}
        inits = status.get("initContainerStatuses") or []
        for cs in [*inits, *(status.get("containerStatuses") or [])]:
            if not (cs.get("state") or {}).get("running"):
                continue
            text = ctx.log(pod, str(cs.get("name")))  # "" unless the gather step read it
            no_gpu = image and catalog.find(text, NO_GPU_ON_IMAGE) and not catalog.find(text, *NVML_MISSING)
            if text and (catalog.find(text, *ANYWHERE) or no_gpu):
                out.append(
                    Failure(
                        pod=pod,
                        container=str(cs.get("name")),
                        reason="Running",
                        text=text,
                        init=cs in inits,
                        restarts=int(cs.get("restartCount") or 0),
                    )
                )
    return out


def witnesses(ctx: Context, *, view: NodeView, found: list[Failure]) -> list[Failure]:
    """Everything on this node that may prove a link broken, in the order `failure_at` weighs it:
    ``found`` (`failures` of this node), running operands whose log says so, GPU pods the runtime
    refused, operand pods waiting on a host directory a lower link makes, GPU pods the kubelet
    rejected at admission with a message that proves a link broken."""
    return [
        *found,
        *running_says(ctx, view),
        *refused_workloads(ctx, view),
        *mount_waits(ctx, view),
        *admission_refused(ctx, view),
    ]


def mount_waits(ctx: Context, view: NodeView) -> list[Failure]:
    """Operand pods the kubelet cannot start because a hostPath directory they mount is not on the node
    (FailedMount events, or the pod's state where no Event names it, `waits_on_host_path`: one that says why its
    sandbox failed says the volumes were mounted): witnesses for the link that makes the directory, not their own."""
    out = []
    spoken = {str((e.get("involvedObject") or {}).get("name")) for e in view.events}
    for pod in view.pods:
        name = name_of(pod)
        said = (
            [
                str(e.get("message", ""))
                for e in view.events
                if e.get("reason") == "FailedMount" and (e.get("involvedObject") or {}).get("name") == name
            ]
            if name in spoken
            else []
        )
        path = "" if name in spoken else waits_on_host_path(ctx, view, pod)
        if not path and not any(HOST_PATH.search(m) for m in said):
            continue
        container = str(((pod.get("spec") or {}).get("containers") or [{}])[0].get("name", ""))
        reason = "ContainerCreating (no sandbox)" if path else "ContainerCreating (FailedMount)"
        text = "\n".join(said)
        out.append(
            Failure(pod=pod, container=container, reason=reason, text=text, init=False, restarts=0, host_path=path)
        )
    return out


def admission_refused(ctx: Context, view: NodeView) -> list[Failure]:
    """GPU pods the kubelet rejected at admission (UnexpectedAdmissionError) with a message that proves a
    link broken wherever it shows: the device plugin only relays what NVML told it."""
    out = []
    for e in view.events:
        obj = e.get("involvedObject") or {}
        said = str(e.get("message", ""))
        if e.get("reason") != "UnexpectedAdmissionError" or not catalog.find(said, *ANYWHERE):
            continue
        pod = next((p for p in view.workloads if name_of(p) == obj.get("name")), None)
        stub: Obj = pod or {"metadata": {"name": obj.get("name", ""), "namespace": obj.get("namespace", "")}}
        out.append(
            Failure(pod=stub, container="", reason="UnexpectedAdmissionError", text=said, init=False, restarts=0)
        )
    return out


def classify(ctx: Context, text: str) -> tuple[Entry, str, str] | None:
    """The catalog entry that proves a link broken whatever pod shows it, the link, and the line;
    None when no line of ``text`` is such a message."""
    for e in catalog.entries():
        link = e.link if e.scope == "anywhere" else e.on_node_image if ctx.stack.node_image else None
        if link is None:
            continue
        found = catalog.find(text, e.id)
        if found is not None:
            return e, link, found.line
    mount = HOST_PATH.search(text)
    owner = link_making(ctx, mount.group(1)) if mount else None
    if mount and owner:
        entry = catalog.entry(HOST_PATH_ENTRY)
        return entry, owner, next(ln.strip() for ln in text.splitlines() if HOST_PATH.search(ln))
    return None


def install_driver(ctx: Context) -> str:
    """How a driver missing from a node is installed on this stack: its own way, a node image that carries one,
    the host's packages (or the policy's driver container)."""
    return ctx.stack.driver_install or (
        f"replace the node with one built from {ctx.stack.node_image}"
        if ctx.stack.node_image
        else f"install the NVIDIA driver on the node (or turn the driver container on: spec.driver.enabled=true "
        f"in {ctx.policy_ref})"
        if ctx.policy_obj is not None
        else "install the NVIDIA driver on the node"
    )


def _release(ctx: Context, view: NodeView, link: str, entry: Entry | None) -> Known | None:
    """The release of ``link``'s component that fixed the defect ``entry``'s message shows (releases.yaml), read
    from that component's pod on the node (or, installed on the host, conditional on the release it runs); None
    where no release fact names the message or the running release is not one it affects."""
    op = LINK_OPERANDS.get(link)
    shown = showing("log", entry.id) if entry is not None else ()
    return release_repair(ctx, view=view, pod=view.pod(op), operand=op, shown=shown) if op and shown else None


def _fix(
    ctx: Context,
    view: NodeView,
    finding_id: str,
    link: str,
    failure: Failure,
    entry: Entry | None = None,
    release: Known | None = None,
) -> tuple[Fix | None, str]:
    """The repairing change for a failure that proves ``link`` broken, through the stack's renderer: the
    checks' own for the failures they know, else the release that fixed ``entry``'s defect (`_release`) before
    the catalog entry's fix, else that fix alone."""
    ns = namespace_of(failure.pod) or ctx.namespace
    rerun = ctx.stack.render(Fix.delete_pod(ns, name_of(failure.pod)))
    if finding_id == "driver.version-mismatch":
        image = node_image(view.node)
        # A driver that came with a managed node image: its module and libraries are the image's, so an image whose
        # pair disagrees stays broken across reboots; the pool's current image is the repair.
        imaged = (
            f"; the driver came with the node's {image.cloud} image, so where a reboot does not clear it, move the "
            f"node pool to its current node image: {image.upgrade}"
            if image is not None and image.ships_driver and image.upgrade
            else ""
        )
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "reboot the node, so the kernel loads the module of the installed driver (or, with no GPU "
                "process left, reload it: rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia); "
                f"where the host's package manager upgraded the driver, hold its packages so it does not happen again"
                f"{imaged}; then {rerun}",
                NOT_SIMULATED: "the loaded module's version is a fact of the node no scenario names",
            },
        )
    elif finding_id == "driver.too-old":
        need = needed(failure.text)
        if ctx.policy_obj is not None and ctx.policy.driver.enabled and view.pod(DRIVER) is not None:
            pinned = ((ctx.policy_obj.get("spec") or {}).get("driver") or {}).get("version")
            if pinned:
                newer = Fix(
                    FixOp.PATCH_POLICY,
                    ctx.policy_name,
                    {
                        "spec": {"driver": {"version": None}},
                        NOT_SIMULATED: "the CUDA a pod needs is not a scenario fact",
                    },
                )
                return newer, ctx.stack.render(newer) + (
                    f"   # upgrade the driver: drop the pinned {pinned} for the operator's default (newer) release"
                    + (f"; it needs {need}" if need else "")
                )
            return None, (
                f"# upgrade the driver: set spec.driver.version of {ctx.policy_ref} to "
                + (need or "a newer branch whose CUDA support covers the pod's")
                + ", or run the pod from an image built for an older CUDA"
            )
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "upgrade the host's NVIDIA driver to "
                + (need or "a release that supports the CUDA version the failing pod runs")
                + f", reboot, then {rerun}",
                NOT_SIMULATED: "the host driver's version is a fact of the node no scenario names",
            },
        )
    elif finding_id == "driver.not-installed":
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": f"{install_driver(ctx)}; then {rerun}",
                NOT_SIMULATED: "a missing host directory is a fact of the node",
            },
        )
    elif finding_id == NOT_ON_NODE_IMAGE:
        # Where the node's labels say its cloud gave it no driver, the cloud's own way to have one.
        image = node_image(view.node)
        way = (
            image.install
            if image is not None and not image.ships_driver
            else f"replace the node with one built from {ctx.stack.node_image}"
        )
        action = Fix(FixOp.NODE, view.name, {"action": way + nodeadm_left_runc(view.node), "fact": "runtime"})
    elif entry is not None and entry.id == HOST_GLIBC and ctx.policy_obj is not None:
        tag = toolkit_tag_for_old_glibc(ctx.policy.toolkit.version)
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"toolkit": {"version": tag}}})
        # A version read back from the toolkit DaemonSet's image (stacks/inferred_policy.py) says which rule made it.
        rule = (
            f" (spec.toolkit.version {ctx.policy.toolkit.version}, read from the toolkit DaemonSet's image, with the "
            "-ubi8 suffix, whose binaries are built for centos7's glibc; the -centos7 suffix for releases before v1.15)"
            if ctx.stack.policy_inferred
            else ""
        )
        return action, ctx.stack.render(action) + (
            f"   # the toolkit image whose binaries run on the host's older glibc{rule}; then {rerun}"
        )
    elif link == "toolkit" and entry is None and nvidia_runtime_refused(ctx, view, failure):
        # runc creates the node's other containers: the nvidia runtime's edit of this one's spec is what fails, so
        # the toolkit's runtime and libnvidia-container are moved to a release made for this containerd and runc.
        if (leftover := leftover_runtime(ctx, view, failure.text, rerun)) is not None:
            return leftover, ctx.stack.render(leftover)
        newest = NEWEST["container-toolkit"]
        if ctx.deploys(TOOLKIT) and ctx.policy_obj is not None:
            action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"toolkit": {"version": newest}}})
            return action, ctx.stack.render(action) + f"   # the toolkit's newest release; then {rerun}"
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "upgrade the node's NVIDIA container toolkit packages (nvidia-container-toolkit, "
                f"libnvidia-container1, libnvidia-container-tools) to {newest.lstrip('v')} or the newest your "
                "distribution's NVIDIA repository has, the runtime made for this node's containerd and runc, "
                f"restart containerd, then {rerun}",
                NOT_SIMULATED: "the host's toolkit packages are a fact of the node no scenario names",
            },
        )
    elif link == "toolkit" and (entry is None or entry.id in TOOLKIT_UNSAID):
        toolkit = view.pod(TOOLKIT)
        rewrite = (
            "restart the container toolkit so it writes its runtime config again "
            f"(kubectl -n {namespace_of(toolkit) or ctx.namespace} delete pod {name_of(toolkit)}), "
            if toolkit is not None
            else ""
        )
        docker = docker_toolkit_repair(ctx, view, rewrite=rewrite)  # "" where the node does not run pods in Docker
        if runtime_scheme(view.node) == "cri-o":
            again = f"{rewrite}make CRI-O run the nvidia runtime or its hook ({runtime_setup(view.node)})"
        elif docker:
            # Docker runs every pod under its default runtime: that comes before what the missing file's shape says.
            shape = shape_of(ctx, link=link, said=tuple(failure.text.splitlines()), node=view.name)
            again = docker + (
                f"; where nvidia is Docker's default already: {shape.action} ({shape.what})" if shape else ""
            )
        else:
            again = rewrite or (
                "write the nvidia runtime into the containerd config this node's containerd reads (nvidia-ctk "
                "runtime configure --runtime=containerd), "
            )
            again += "restart containerd"
        if not docker:
            again = shape_first(ctx, link=link, said=tuple(failure.text.splitlines()), then=again, node=view.name)
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": (
                    "Docker runs this node's containers without the NVIDIA runtime"
                    if docker
                    else "the NVIDIA runtime hook fails to create containers here"
                )
                + f": {again}, then {rerun}",
                "drain": False,
                NOT_SIMULATED: "the hook's failure is a fact of the node no scenario names",
            },
        )
    elif entry is not None:
        repair = entry.repair(view.name, namespace=ns, pod=name_of(failure.pod))
        if release is not None:
            return release.action, f"{release.fix}; otherwise: {repair}; then {rerun}"
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": f"{repair}; then {rerun}",
                NOT_SIMULATED: "the catalog's repair is a fact of the node",
            },
        )
    else:
        # No repair is known for this failure: the line it left and the link's next action, then run it again.
        pod = name_of(failure.pod)
        rerun_it = Fix.delete_pod(ns, pod)
        if silent(failure.text):
            # Not a line to go on: the log that holds the reason, and what repairs the link it proves.
            previous = " --previous" if failure.restarts else ""
            op = LINK_OPERANDS.get(link)
            own = view.pod(op) if op is not None else None
            target = (
                repair_target(ctx, pod=own, operand=op)
                if own is not None and op is not None
                else f"the node's own {link}"
            )
            read = f"kubectl -n {ns} logs {pod} -c {failure.container}{previous}"
            return None, silent_fix(
                ctx, link=link, read=read, what=f"the {link} link", target=target, again=ctx.stack.render(rerun_it)
            )
        line = catalog.unknown_error(failure.text) or ""
        # A container the runtime refused never ran: what it has is the runtime's message, not a line of its own.
        refused = next(iter(failure.text.splitlines()), "") if _refusal(failure.reason) and not line else ""
        cuda = failure.init and failure.container == CUDA_VALIDATION
        step = next_step(ctx, link=link, line=line, refused=refused, node=view.name, cuda=cuda)
        return None, f"# {step}; then run the validation again: {ctx.stack.render(rerun_it)}"
    return action, ctx.stack.render(action)


def refused_by_hook(view: NodeView, failure: Failure) -> bool:
    """Did the runtime refuse to create or start this container with a message of the toolkit's own runtime
    (its hook, libnvidia-container: catalog entries of link toolkit, or written by the toolkit, such as its
    "load library failed" under a driver root with no driver)? The container never ran, so its own
    link's code said nothing: the refusal proves the toolkit broken, and the operand is only its victim. The
    kubelet writes the refusal as waiting ``RunContainerError`` / ``CreateContainerError`` with the runtime's
    message, or as terminated ``StartError`` (exit 128) and then ``CrashLoopBackOff`` with that as last state
    (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go@v1.34.4, containerd's StartError). The
    toolkit's own pod is judged by its own check."""
    if not _refusal(failure.reason):
        return False
    said = catalog.known_error(failure.text)
    own = next((state for state, pod in view.operand_pods.items() if pod is failure.pod), "")
    toolkits = toolkit_said(said.entry) if said is not None else TOOLKIT_BINARY.search(failure.text) is not None
    return toolkits and own != TOOLKIT.state


#: The low-level runtime's refusal to create a container, as containerd passes it on (containerd
#: core/runtime/v2 shim "failed to create shim task: OCI runtime create failed: ...", runc's own error after it).
OCI_CREATE_FAILED = re.compile(r"OCI runtime create failed")
#: runc's words once the container exists and only its command fails to exec (opencontainers/runc
#: libcontainer/process_linux.go@v1.1.12 "unable to start container process: %w" around the exec error).
PROCESS_EXEC = re.compile(r"unable to start container process: exec: ")


def nvidia_runtime_refused(ctx: Context, view: NodeView, failure: Failure) -> bool:
    """Was the container refused at create by the low-level runtime while it runs under the nvidia RuntimeClass
    (handler nvidia: nvidia-container-runtime, which edits the OCI spec and hands it to runc)? The same runc
    creates every other container on the node under the default handler; what differs for this one is the
    toolkit's runtime and hook, so the refusal is the toolkit's even where runc's own words carry no NVIDIA
    name. The RuntimeClass is the pod's, else its DaemonSet's template's (a dump that trimmed the pod)."""
    if not _refusal(failure.reason) or OCI_CREATE_FAILED.search(failure.text) is None:
        return False
    if PROCESS_EXEC.search(failure.text):
        return False  # runc built the container and failed to exec its command: the image's, not the spec's
    if any(pod is failure.pod for state, pod in view.operand_pods.items() if state == TOOLKIT.state):
        return False
    spec = failure.pod.get("spec") or {}
    template = ((owner_daemonset(ctx, failure.pod).get("spec") or {}).get("template") or {}).get("spec") or {}
    return RUNTIME_CLASS_HANDLER in str(spec.get("runtimeClassName") or template.get("runtimeClassName") or "")


#: The toolkit's own binaries, which a refusal no catalog entry knows may still name as what failed (the runtime,
#: its hook, libnvidia-container's CLI, the CDI hook): NVIDIA/nvidia-container-toolkit cmd/@v1.17.4; and the
#: runtime's own name in the error it wraps every failure to build a container's spec in
#: (cmd/nvidia-container-runtime/main.go@v1.17.4 "failed to create NVIDIA Container Runtime: %v").
TOOLKIT_BINARY = re.compile(r"nvidia-container-(runtime|cli)|nvidia-cdi-hook|nvidia-ctk|NVIDIA Container Runtime")


def toolkit_said(entry: Entry) -> bool:
    """Is ``entry`` a message of the toolkit link, or one the toolkit's runtime hook writes?"""
    return entry.link == "toolkit" or entry.component.startswith(TOOLKIT_COMPONENT)


def toolkit_tag_for_old_glibc(version: str) -> str:
    """The operator's toolkit image tag of the same release whose host binaries run on an old glibc (CentOS 7's
    2.17): the -ubi8 variant, its packages built for centos7 from v1.15 on (NVIDIA/nvidia-container-toolkit
    deployments/container/Makefile@v1.15.0, build-ubi8: PACKAGE_DIST = centos7), the -centos7 one before."""
    release = version.split("-")[0] or "<release>"
    found = version_of(release)
    return f"{release}-{'centos7' if found is not None and found < (1, 15, 0) else 'ubi8'}"


def hook_refusal(ctx: Context, view: NodeView, pod: Obj) -> Failure | None:
    """The container of ``pod`` the runtime refused with the toolkit's own error (`refused_by_hook`), if any:
    the pod is then the toolkit's victim, whatever link it serves (the driver's container included)."""
    return next((f for f in pod_failures(ctx, view, pod) if refused_by_hook(view, f)), None)


def failure_at(ctx: Context, *, view: NodeView, link: str, found: list[Failure]) -> Finding | None:
    """The first failing container on this node that proves ``link`` broken (by its message in the
    catalog, by being that link's validation, or by the toolkit's runtime refusing to start it), as a
    root finding; None when none does. ``found`` is `witnesses` of this node: the walk reads them once,
    not once per link."""
    # A device path under the driver container's root on a host-driver node: the plugin's, before any shape of it.
    stale = (
        stale_plugin_root(ctx, view, found=[(f.describe(), f.text) for f in found]) if link == "device-plugin" else None
    )
    if stale is not None:
        return stale
    for failure in found:
        if failure.host_path:
            waited = _host_path_wait(ctx, view, link=link, failure=failure)
            if waited is not None:
                return waited
            continue
        known = classify(ctx, failure.text)
        # A validation whose image the kubelet cannot pull, or whose config it cannot build, never ran, so it
        # proves nothing of the link it validates: the pod that carries it fails to start, which its own link's
        # check reports.
        ran = failure.reason not in NOT_STARTED
        validated = ctx.stack.validations.get(failure.container) if failure.init and ran else None
        validated = validation_proves(failure.text, validated)
        runc = not known and not validated and nvidia_runtime_refused(ctx, view, failure)
        hooked = runc or (not known and not validated and refused_by_hook(view, failure))
        proves = known[1] if known else validated or ("toolkit" if hooked else None)
        if proves != link:
            continue
        evidence = [failure.describe()]
        said = fabric = None
        if known is not None:
            entry, _, line = known
            # An entry no check names a finding for: the toolkit's own words are the hook's failure; a driver fault
            # is the node image's where the stack's nodes carry the driver, else the driver's not-ready.
            if proves == "toolkit":
                default = HOOK_FAILED
            elif proves == "driver" and not ctx.stack.node_image:
                default = "driver.not-ready"
            else:
                default = NOT_ON_NODE_IMAGE
            finding_id = FINDING_OF.get(entry.id, default)
            if entry.id == HOST_PATH_ENTRY and proves != "driver":
                finding_id = f"{proves}.not-installed"
            cause = entry.cause
            evidence += [f"says: {line}", entry.cite()]
            image = node_image(view.node) if finding_id == NOT_ON_NODE_IMAGE else None
            evidence += image.said if image is not None else ()
            # CUDA's "not initialised" names no cause: Fabric Manager's own line in the driver's log does.
            fabric = fabric_repair(ctx, view) if finding_id == FINDING_OF["cuda.system-not-ready"] else None
            if fabric is not None:
                cause, evidence = fabric.cause, [*evidence, *fabric.evidence]
        else:
            finding_id = HOOK_FAILED if hooked else f"{link}.validation-failed"
            cause = (
                f"the container runtime refused to create the {failure.container} container ({failure.reason}) under "
                "the nvidia RuntimeClass: runc creates the node's other containers, so what fails is the nvidia "
                "runtime's edit of this one's spec; the toolkit is the root and that pod only its victim."
                if runc
                else f"the container runtime refused to start the {failure.container} container ({failure.reason}) "
                "with the NVIDIA container toolkit's own error: every container that runs with the nvidia runtime "
                "fails the same way on this node, so the toolkit is the root and that pod only its victim."
                if hooked
                else f"the {failure.container} init container, which proves the {link} link on this node, fails to "
                f"run ({failure.reason}); every operand that waits for its ready file waits behind it."
            )
            said = catalog.known_error(failure.text)
            if said is not None:
                evidence += [f"says: {said.line}", said.entry.cite()]
            elif hooked:
                # No entry knows the words, but they name the toolkit's binary (or runc's refusal): quote them.
                lines = failure.text.splitlines() or [""]
                refusal = next((ln for ln in lines if runc and OCI_CREATE_FAILED.search(ln)), lines[0])
                evidence.append(f"says: {refusal}")
        # A validation's message the catalog knows (scope component) gives its repair as well.
        mine = said is not None and (said.entry.link == link or (hooked and toolkit_said(said.entry)))
        told = known[0] if known else said.entry if said is not None and mine else None
        # A validation's own release (its image's defect) before the link's component's.
        release = validation_release(ctx, view=view, pod=failure.pod, entry=told) if validated else None
        release = release or _release(ctx, view, link, told)
        evidence += release.evidence if release is not None else ()
        action, fix = (
            (fabric.action, fabric.fix) if fabric else _fix(ctx, view, finding_id, link, failure, told, release)
        )
        return Finding(
            id=finding_id,
            severity=Severity.ERROR,
            link=link,
            cause=cause,
            evidence=tuple(evidence),
            fix=fix,
            node=view.name,
            action=action,
        )
    return None


def _host_path_wait(ctx: Context, view: NodeView, *, link: str, failure: Failure) -> Finding | None:
    """The root finding for an operand pod whose sandbox waits on a host directory ``link`` makes (`waits_on_host_path`:
    read from the state of a pod no Event names), as the kubelet's FailedMount would have named it; None where
    another link makes the directory."""
    if link_making(ctx, failure.host_path) != link:
        return None
    finding_id = "driver.not-installed" if link == "driver" else f"{link}.not-installed"
    volumes = volumes_spec(ctx, failure.pod).get("volumes") or []
    volume: Obj = next((v for v in volumes if (v.get("hostPath") or {}).get("path") == failure.host_path), {})
    kind = (volume.get("hostPath") or {}).get("type")
    action, fix = _fix(ctx, view, finding_id, link, failure)
    return Finding(
        id=finding_id,
        severity=Severity.ERROR,
        link=link,
        cause=f"pod {name_of(failure.pod)} never got a sandbox: the kubelet mounts a pod's volumes before it asks the "
        f"runtime for one, and this pod mounts {failure.host_path} with hostPath type {kind}, which the {link} makes "
        "on the node, so it is not there: nothing else this pod mounts can be missing, and the node is Ready with no "
        "RuntimeClass in the way.",
        evidence=(
            failure.describe(),
            f"condition PodReadyToStartContainers: False; no container of {name_of(failure.pod)} has run",
            f"volume {volume.get('name')}: hostPath {failure.host_path} (type {kind})",
            "no Event names the pod (the API server keeps Events an hour)",
        ),
        fix=fix,
        node=view.name,
        action=action,
    )


def unrecognised(ctx: Context, *, view: NodeView, link_of: dict[str, str], found: list[Failure]) -> list[Finding]:
    """A warning for each failing container whose last error line no catalog entry knows: the line,
    quoted, and the component it came from, so an unknown failure is never taken for a known one.
    ``link_of`` maps an operand state to its link; ``found`` is `failures` of this node."""
    out = []
    for failure in found:
        line = catalog.unknown_error(failure.text)
        state = ctx.stack.speaker([s for s, p in view.operand_pods.items() if p is failure.pod], line or "")
        link = ctx.stack.validations.get(failure.container) if failure.init else None
        link = link or link_of.get(state)
        if line is None or link is None:
            continue
        component = f"{state or name_of(failure.pod)} ({failure.container})"
        out.append(
            Finding(
                id="log.unrecognised",
                severity=Severity.WARNING,
                link=link,
                cause=f"unrecognised error from {component}: gpuchain's catalog of the chain's messages does not know "
                "this line, so it names no cause and no repair for it.",
                evidence=(failure.describe(), f"unrecognised: {line}"),
                fix=f"# {next_step(ctx, link=link, line=line, node=view.name)}",
                node=view.name,
            )
        )
    return out
