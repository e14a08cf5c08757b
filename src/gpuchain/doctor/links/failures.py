"""What a failing operand pod's own output says, and the change that answers it: the failures every
link's pod may show (unschedulable, image pull, OOM, a missing ConfigMap, the kernel refusing the
module, a socket or inotify limit), and the not-ready finding built from them or from the catalog."""

from __future__ import annotations

import dataclasses
import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.evidence import refused_message
from gpuchain.doctor.links.arguments import arguments_refused
from gpuchain.doctor.links.common import (
    Known,
    Result,
    container_image,
    node_finding,
    operand_daemonset,
    placement_fix,
)
from gpuchain.doctor.links.oom_limit import lighter, memory_limit
from gpuchain.doctor.links.probes import probe_killed
from gpuchain.doctor.links.pull_refused import pull_refused
from gpuchain.doctor.links.releases import carried_repair, newest_release, release_repair, with_release
from gpuchain.doctor.links.toolkit_template import TEMPLATE, template_repair
from gpuchain.doctor.links.unprivileged_envvar import unprivileged_gpu
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.next_steps import last_line, next_step, shape_of, silent_fix
from gpuchain.doctor.node import KUBEADM, distribution_of, drop_in_too_new, node_info, reads_config_file
from gpuchain.doctor.node_image import os_tag
from gpuchain.doctor.owners import (
    HELM_APP_VERSION,
    HELM_RELEASE,
    chart_of,
    owner_daemonset,
    owner_ds,
    repair_target,
    silent,
    toolkit_env,
)
from gpuchain.doctor.placement import Blocker, pod_blocker
from gpuchain.doctor.pods import NOT_CREATED, PodState
from gpuchain.doctor.releases import moved_image, newer_image, showing
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN, DRIVER, TOOLKIT, Operand, deploy_label

#: The links whose error no catalog entry knows is answered first with their component's newest release (the
#: device plugin, GFD, the exporter: a line of their own code that the later releases may have fixed).
UPGRADED = ("device-plugin", "gfd", "exporter")
#: The catalog entries of the failures `known_failure` repairs (catalog.yaml): the driver container
#: when the kernel refuses its unsigned module (NVIDIA/gpu-operator#266, #1726: nvidia-installer's
#: words, the kernel's own, EPERM and ENOKEY from its lockdown, and modprobe's where the module is loaded by
#: hand), the toolkit when the containerd socket it was given does not exist (NVIDIA/gpu-operator#406,
#: #522), and a component out of inotify instances (#441).
SECURE_BOOT = (
    "nvidia-installer.unsigned-module",
    "kernel.unsigned-module-rejected",
    "nvidia-installer.load-not-permitted",
    "nvidia-installer.load-no-key",
    "kernel.lockdown-unsigned-module",
    "glibc.key-rejected",
)
#: The driver container stopped by the node's SELinux mode (catalog.yaml): chcon failing where SELinux is
#: disabled (NVIDIA/gpu-operator#452, #1489), the module load denied where it enforces (#553).
SELINUX = ("coreutils.chcon-unlabeled", "coreutils.chcon-no-context", "kmod.insert-permission-denied")
SOCKET = ("nvidia-container-toolkit.unable-to-dial", "nvidia-container-toolkit.signal-containerd")
#: The toolkit failing to read the containerd config it is pointed at (catalog.yaml: v1.17's words and earlier ones).
CONFIG_LOAD = ("nvidia-container-toolkit.load-containerd-config", "nvidia-container-toolkit.load-config")
INOTIFY = ("k8s-device-plugin.fs-watcher", "nvidia-container-toolkit.fs-watcher")
IMAGE_PULL = ("ImagePullBackOff", "ErrImagePull")


def _pull_event(view: NodeView, pod: str) -> str:
    """The kubelet's "Failed to pull image" Event for ``pod`` (containerd's NotFound, an auth error ...)."""
    return next(
        (
            str(e.get("message"))
            for e in view.events
            if (e.get("involvedObject") or {}).get("name") == pod
            and str(e.get("message", "")).startswith("Failed to pull")
        ),
        "",
    )


def known_failure(ctx: Context, *, view: NodeView, operand: Operand, state: PodState, log: str) -> Known | None:
    """What the operand's status or log names, and its fix (None: gpuchain does not know this failure)."""
    if state.unschedulable:
        return _unschedulable(ctx, view, operand, state)
    if state.status in IMAGE_PULL:
        return _image_missing(ctx, view, operand, state)
    oom = _oom_killed(ctx, view, operand, state) or probe_killed(ctx, view=view, operand=operand, state=state, log=log)
    oom = oom or unprivileged_gpu(ctx, view=view, pod=view.pod(operand) or {}, log=log)
    if oom is not None:
        return oom
    mount = _object_missing(ctx, view, operand, state)
    if mount is not None:
        return mount
    command = _command_missing(ctx, view, operand) or arguments_refused(
        ctx, view=view, operand=operand, state=state, log=log
    )
    if command is not None:
        return command
    found = catalog.find(log, *SECURE_BOOT)
    if found and operand is DRIVER:
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "turn Secure Boot off in the node's firmware (or enroll a key that signs the NVIDIA modules "
                "with mokutil) and reboot; the driver container loads nvidia.ko on the next start",
                "fact": "secure-boot",
            },
        )
        return Known(
            cause="the node boots with UEFI Secure Boot, and the kernel refuses the nvidia.ko the driver container "
            "built because no key it trusts signed it; this is the node's firmware setting, outside the cluster.",
            evidence=found.evidence(),
            action=action,
            fix=ctx.stack.render(action),
        )
    found = catalog.find(log, *SELINUX)
    if found and operand is DRIVER:
        rerun = ctx.stack.render(Fix.delete_pod(state.restart_in(ctx.namespace), state.name))
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": f"{found.entry.fix}; then {rerun}",
                NOT_SIMULATED: "the node's SELinux mode is a fact of the node no scenario names",
            },
        )
        return Known(cause=found.entry.cause, evidence=found.evidence(), action=action, fix=ctx.stack.render(action))
    found = catalog.find(log, *SOCKET)
    if found and operand is TOOLKIT:
        return _toolkit_socket(ctx, view, found)
    found = catalog.known_error(log, "toolkit") if operand is TOOLKIT else None
    if found is not None and found.entry.id in CONFIG_LOAD and TEMPLATE.search(found.line):
        return template_repair(ctx, view, found)
    pod = view.pod(operand) or {}
    if (
        operand is TOOLKIT
        and (silent("\n".join((log, state.message))) or not (catalog.known_error(log) or catalog.unknown_error(log)))
        and drop_in_too_new(view.node, pod)
        and not reads_config_file(ctx, pod)
    ):
        # A toolkit that left no word (or no error), on the pair of releases whose drop-in containerd refuses.
        return _toolkit_drop_in(ctx, view, pod)
    found = catalog.find(log, *(INOTIFY if operand is DEVICE_PLUGIN else INOTIFY[::-1]))
    if found:
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "raise the node's inotify instance limit (sysctl -w fs.inotify.max_user_instances=512, and "
                "the same in /etc/sysctl.d/ so it survives a reboot; the kernel's default is 128), then "
                f"{ctx.stack.render(Fix.delete_pod(state.restart_in(ctx.namespace), state.name))}",
                "fact": "inotify",
                "drain": False,
            },
        )
        return Known(
            cause="the node's inotify instances are used up (fs.inotify.max_user_instances), so the container cannot "
            "watch its files and exits; a kernel setting of the node, outside the cluster.",
            evidence=found.evidence(),
            action=action,
            fix=ctx.stack.render(action),
        )
    return None


#: The runtime's refusal when the image has no such command: Go's os/exec error ("exec: %q: ..." with
#: ErrNotFound's "executable file not found in $PATH", golang/go src/os/exec/exec.go and lp_unix.go), which
#: runc quotes after "unable to start container process" and the kubelet keeps as the container's
#: StartError / RunContainerError / ContainerCannotRun message.
EXEC_MISSING = re.compile(
    r'exec: "([^"]+)": (?:executable file not found in \$PATH|stat \S+: no such file or directory)'
)


def _command_missing(ctx: Context, view: NodeView, operand: Operand) -> Known | None:
    """The container never started because its image has no such command: the image and the command its
    pod spec runs belong to different releases (an image tag pinned apart from the chart or policy)."""
    pod = view.pod(operand) or {}
    refused = [
        (str(cs.get("name", "")), str(said.get("message") or ""))
        for cs in (pod.get("status") or {}).get("containerStatuses") or []
        for st in (cs.get("state") or {}, cs.get("lastState") or {})
        for said in (st.get("terminated") or {}, st.get("waiting") or {})
        if said.get("reason") in NOT_CREATED and EXEC_MISSING.search(str(said.get("message") or ""))
    ]
    if not refused:
        return None
    container, message = refused[0]
    found = EXEC_MISSING.search(message)
    assert found is not None
    command = found.group(1)
    spec: Obj = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == container), {})
    image = str(spec.get("image", ""))
    tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else "latest"
    namespace = (pod.get("metadata") or {}).get("namespace")
    ds = owner_daemonset(ctx, pod)
    labels = (ds.get("metadata") or {}).get("labels") or {}
    release, app = labels.get(HELM_RELEASE), labels.get(HELM_APP_VERSION)
    evidence = (f"container {container} ({image}): {message}",)
    cause = (
        f"the container never started: its image {image} has no {command!r}, the command its pod spec runs, so the "
        "image and the spec come from different releases (an image tag set apart from the chart or the policy)."
    )
    if ctx.policy_obj is not None:
        key = operand.spec_key
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {key: {"version": None}}})
        return Known(
            cause=cause,
            evidence=evidence,
            action=action,
            fix=ctx.stack.render(action) + f"   # the operator's own {key} image for its release, which has {command}",
        )
    if release and app and tag != f"v{app}":
        _, chart, _ = chart_of(ctx, labels)
        return Known(
            cause=cause + f" The chart release {release} is {app}; the image tag is {tag}.",
            evidence=(*evidence, f"DaemonSet {name_of(ds)}: {HELM_APP_VERSION}={app}, {HELM_RELEASE}={release}"),
            action=None,
            fix=f"helm upgrade {release} {chart} -n {namespace} --reuse-values --set image.tag=v{app}   # the image "
            f"the chart {app} was written for (or upgrade the chart to the image's release {tag})",
        )
    if (carried := carried_repair(ctx, pod=pod, operand=operand, container=container, command=command)) is not None:
        return Known(cause=f"{cause} {carried.cause}", evidence=evidence, action=carried.action, fix=carried.fix)
    return Known(
        cause=cause,
        evidence=evidence,
        action=None,
        fix=f"# run {container} from the image release its DaemonSet's spec was written for (one that has {command}), "
        f"not {image}; or the spec of {tag}'s release",
    )


#: The object the kubelet names as missing (catalog apimachinery.object-not-found).
OBJECT_NAMED = re.compile(r'\b(configmap|secret)s? "([^"]+)" not found')


def _object_missing(ctx: Context, view: NodeView, operand: Operand, state: PodState) -> Known | None:
    """The pod references a ConfigMap or Secret that is not in its namespace: the kubelet cannot mount it
    (a FailedMount Event) or build the container's env (CreateContainerConfigError), so no container of the
    pod starts until it exists there."""
    said = [state.message] if state.status == "CreateContainerConfigError" else []
    said += [
        str(ev.get("message", ""))
        for ev in view.events
        if (ev.get("involvedObject") or {}).get("name") == state.name and ev.get("reason") == "FailedMount"
    ]
    for text in said:
        found = catalog.find(text, "apimachinery.object-not-found")
        named = OBJECT_NAMED.search(found.line) if found else None
        if found is None or named is None:
            continue
        pod = view.pod(operand) or {}
        ns = namespace_of(pod) or ctx.namespace
        kind, name = named.group(1), named.group(2)
        create = (
            f"create configmap {name} --from-file=<key>=<file>"
            if kind == "configmap"
            else f"create secret generic {name} --from-literal=<key>=<value>"
        )
        return Known(
            cause=f"the {operand.state} pod references {kind} {name}, which does not exist in its namespace {ns}, so "
            "the kubelet does not start its containers.",
            evidence=(f"kubelet: {found.line}", found.entry.cite()),
            action=None,
            fix=f"kubectl -n {ns} {create}   # create {kind} {name} in {ns}, where the pod looks for it (or copy it "
            f"there: kubectl get {kind} {name} -A)",
        )
    return None


#: The Node annotation kubeadm writes with the CRI socket it gave the kubelet (kubernetes
#: cmd/kubeadm/app/constants/constants.go@v1.34.4 AnnotationKubeadmCRISocket).
CRI_SOCKET = "kubeadm.alpha.kubernetes.io/cri-socket"


#: The memory limit an OOM-killed operand gets at least: its limit doubled, never under this (Mi).
MIN_RAISED_LIMIT_MI = 512
MEMORY = re.compile(r"(\d+)(Ki|Mi|Gi)?$")


def _mebibytes(quantity: str) -> int | None:
    found = MEMORY.match(quantity)
    if not found:
        return None
    scale = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, None: 1 / 2**20}[found.group(2)]
    return int(int(found.group(1)) * scale)


def _oom_killed(ctx: Context, view: NodeView, operand: Operand, state: PodState) -> Known | None:
    """A container the kernel killed for its memory limit (terminated OOMKilled, exit 137): the limit is
    too low for this node (more GPUs, more metrics); restarting it changes nothing."""
    pod = view.pod(operand) or {}
    statuses = [
        *((pod.get("status") or {}).get("initContainerStatuses") or []),
        *((pod.get("status") or {}).get("containerStatuses") or []),
    ]
    cs = next((c for c in statuses if c.get("name") == state.container), None)
    reasons = [((cs or {}).get(k) or {}).get("terminated", {}).get("reason") for k in ("state", "lastState")]
    if "OOMKilled" not in reasons:
        return None
    ns = namespace_of(pod) or ctx.namespace
    ds = owner_ds(pod) or ctx.ds(operand)
    spec = ((pod.get("spec") or {}).get("initContainers") or []) + ((pod.get("spec") or {}).get("containers") or [])
    container: Obj = next((c for c in spec if c.get("name") == state.container), {})
    limit = memory_limit(ctx, container={"name": state.container, **container}, ns=ns, ds=ds)
    current = _mebibytes(limit) if limit else None
    raised = f"{max(2 * current if current else 0, MIN_RAISED_LIMIT_MI)}Mi"
    evidence = (
        f"container {state.container}: terminated OOMKilled (exit 137), {state.restarts} restarts",
        f"memory limit {limit or 'none set in the pod spec'}",
    )
    cause = (
        f"the kernel kills the {state.container} container for exceeding its memory"
        + (f" limit ({limit})" if limit else " (no limit in its pod spec: a LimitRange's default, or the node's)")
        + ", so it restarts and is killed again; the limit is too low for what it serves on this node."
    )
    if ns == ctx.namespace and ctx.policy_obj is not None:
        patch = Fix(
            FixOp.PATCH_POLICY,
            ctx.policy_name,
            {"spec": {operand.spec_key: {"resources": {"limits": {"memory": raised}}}}},
        )
        return Known(
            cause=cause,
            evidence=evidence,
            action=patch,
            fix=ctx.stack.render(patch) + "   # raises the memory limit" + lighter(operand),
        )
    return Known(
        cause=cause,
        evidence=evidence,
        action=None,
        fix=ctx.stack.render(
            Fix(FixOp.SET_LIMITS, f"{ns}/{ds}", {"container": state.container, "limits": {"memory": raised}})
        )
        + "   # raises the memory limit (in its Helm release: resources.limits.memory)"
        + lighter(operand),
    )


#: Restarts after which a running container whose last end was an OOM kill is killed again and again, not once (a
#: node reboot restarts a pod once; an exporter on more GPUs than its limit allows is killed at each peak).
OOM_AGAIN = 3


def oom_restarting(
    ctx: Context, view: NodeView, operand: Operand, pod: Obj, state: PodState
) -> tuple[PodState, Known] | None:
    """A container running again after the kernel killed it for its memory OOM_AGAIN times or more: ready between
    kills, it is killed at the next peak of what it serves, so its memory limit is the repair all the same."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        last = ((cs.get("lastState") or {}).get("terminated") or {}).get("reason")
        restarts = int(cs.get("restartCount") or 0)
        if last == "OOMKilled" and restarts >= OOM_AGAIN:
            killed = dataclasses.replace(state, container=str(cs.get("name", "")), restarts=restarts)
            known = _oom_killed(ctx, view, operand, killed)
            return (killed, known) if known is not None else None
    return None


#: The scheduler's reasons for a pod that fits nowhere, and what makes room (kubernetes
#: pkg/scheduler/framework/plugins: noderesources "Insufficient <resource>", nodeports "didn't have
#: free ports for the requested pod ports", tainttoleration "had untolerated taint").
ROOM = (
    (
        r"Insufficient (cpu|memory|ephemeral-storage|pods)",
        "the node has no {0} left for it: lower the DaemonSet's {0} "
        "request, give its pods a higher priority (priorityClassName system-node-critical) so the scheduler preempts "
        "for them, or move workloads off the node",
    ),
    (r"Too many pods", "the node is at its pod limit: raise the kubelet's maxPods or move pods off the node"),
    (r"didn't have free ports", "another pod holds the host port it needs: move or reconfigure that pod"),
)
#: The scheduler's words for a taint the pod does not tolerate ("had untolerated taint {key: value}").
UNTOLERATED = re.compile(r"untolerated taint \{([^:}]+)")


def _host_ports(pod: Obj) -> set[int]:
    containers = ((pod.get("spec") or {}).get("containers")) or []
    return {int(p["hostPort"]) for c in containers for p in c.get("ports") or [] if p.get("hostPort")}


def _port_holder(ctx: Context, view: NodeView, pod: Obj) -> tuple[Obj, int] | None:
    """The pod on the node that holds a host port ``pod`` asks for (the scheduler's NodePorts filter says only
    "didn't have free ports for the requested pod ports"), and the port; None when none on the node does.
    Every pod of the snapshot is looked at (a second release of an operand is in no view), on this rare path."""
    wanted = _host_ports(pod)
    for other in ctx.snapshot.pods:
        if (other.get("spec") or {}).get("nodeName") != view.name or other is pod:
            continue
        shared = wanted & _host_ports(other)
        if shared:
            return other, min(shared)
    return None


def _unschedulable(ctx: Context, view: NodeView, operand: Operand, state: PodState) -> Known:
    """A DaemonSet pod the scheduler cannot place on its node: the scheduler's words, and what makes room."""
    cause = (
        f"the {operand.state} pod for this node is Pending: the scheduler cannot place it ({state.message}), so the "
        "link has no pod here; the DaemonSet is right, restarting it changes nothing."
    )
    evidence = (f"pod {state.name}: Pending, unschedulable", f"scheduler: {state.message}")
    said = UNTOLERATED.search(state.message)
    taints = ((view.node.get("spec") or {}).get("taints")) or []
    taint = next((t for t in taints if said and t.get("key") == said.group(1).strip()), None)
    ds = operand_daemonset(ctx, operand)
    if taint is not None and ds is not None:
        # The tolerations to add, on the object the stack's operands take their tolerations from: for every
        # taint of the node the pod does not tolerate, not only the one the scheduler's message names.
        block = pod_blocker((view.pod(operand) or {}).get("spec") or {}, view.node)
        action = placement_fix(
            ctx,
            view=view,
            ds=ds,
            block=block if block and block.kind == "taint" else Blocker(kind="taint", detail=taint),
        )
        return Known(cause=cause, evidence=evidence, action=action, fix=ctx.stack.render(action))
    held = _port_holder(ctx, view, view.pod(operand) or {}) if "didn't have free ports" in state.message else None
    if held is not None:
        holder, port = held
        owner = owner_ds(holder) or "no DaemonSet"
        where = f"{(holder.get('metadata') or {}).get('namespace')}/{name_of(holder)}"
        return Known(
            cause=cause,
            evidence=(*evidence, f"pod {where} ({owner}) holds host port {port} on {view.name}"),
            action=None,
            fix=f"# pod {where} ({owner}) holds host port {port}, which the {operand.state} pod needs on {view.name}: "
            "remove whichever of the two is a second release of the same component, or give one of them another "
            "host port",
        )
    fix = "# gpuchain knows no change that makes room for this scheduler reason"
    for pattern, text in ROOM:
        found = re.search(pattern, state.message)
        if found:
            fix = text.format(*(found.groups() or ("",)))
            break
    return Known(cause=cause, evidence=evidence, action=None, fix=f"{fix} (node {view.name}, pod {state.name})")


#: The kubelet's words for the image it pulls: "Back-off pulling image %q" (pkg/kubelet/images/image_manager.go)
#: and "Failed to pull image %q: %v" (kuberuntime), kubernetes@v1.34.4.
PULLING = re.compile(r'(?:pulling|pull) image "([^"]+)"')


DRIVER_TAG = re.compile(r"(\d+(?:\.\d+)+)-([a-z][\w.]*)")
#: A precompiled driver image's tag: ``<driver branch>-<kernel>-<os tag>`` (NVIDIA/gpu-operator resolveDriverTag,
#: e.g. 535-5.15.0-1041-azure-ubuntu22.04).
PRECOMPILED_TAG = re.compile(r"(\d+)-(\d+\.\d+\.\d+-.+)-([a-z]+[\d.]*)")


def _pulled_image(text: str) -> str:
    found = PULLING.search(text)
    return found.group(1) if found else ""


def _image_missing(ctx: Context, view: NodeView, operand: Operand, state: PodState) -> Known:
    """The kubelet cannot pull the operand's image: a tag the policy overrides that the registry lacks."""
    event = _pull_event(view, state.name)
    evidence = (state.message, f"event Failed (kubelet): {event}" if event else "")
    pod = view.pod(operand) or {}
    owner = next(
        (str(r.get("name")) for r in (pod.get("metadata") or {}).get("ownerReferences") or () if r.get("kind")),
        "",
    )
    image = _pulled_image(state.message) or _pulled_image(event)
    tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""
    prefix = ctx.stack.precompiled_prefix
    # The tag says precompiled where the policy asks for precompiled drivers (NVIDIA's spec.driver.usePrecompiled).
    asks = (((ctx.policy_obj or {}).get("spec") or {}).get("driver") or {}).get("usePrecompiled") is True
    precompiled = PRECOMPILED_TAG.fullmatch(tag) if asks else None
    if operand is DRIVER and ((prefix and owner.startswith(prefix)) or precompiled):
        # Precompiled drivers: one DaemonSet per kernel, whose image exists only for the kernels NVIDIA built.
        ready_kernels = ", ".join(sorted(ctx.driver_kernels)) or "no kernel yet"
        action = Fix(
            FixOp.PATCH_POLICY,
            ctx.policy_name,
            {"spec": {"driver": {"usePrecompiled": False}}, NOT_SIMULATED: "precompiled images are not simulated"},
        )
        looked = f" (tag {tag}: driver branch, kernel, OS tag)" if precompiled else ""
        return Known(
            cause=f"no precompiled driver image exists for this node's kernel {view.kernel}: the operator asks for "
            f"{image or 'an image per kernel'}{looked} and the registry has no such tag.",
            evidence=(*evidence, f"DaemonSet {owner}: a precompiled driver per kernel"),
            action=action,
            fix=ctx.stack.render(action) + "   # the driver container builds the module at start instead; set "
            "spec.driver.version to a full driver version, or move the node to a kernel with a precompiled image "
            f"(driver pods run on {ready_kernels}), or build {tag or 'that tag'} from NVIDIA/gpu-driver-container's "
            "precompiled Dockerfile into a registry the nodes reach and set spec.driver.repository to it",
        )
    spec = ((ctx.policy_obj or {}).get("spec") or {}).get(operand.spec_key) or {}
    version = str(spec.get("version") or "")
    # A driver image's tag is <driver version>-<os><os version> (e.g. 550.90.07-ubuntu22.04).
    versioned = DRIVER_TAG.fullmatch(tag)
    # A tag the registry lacks: containerd's "not found", or the registry's own MANIFEST_UNKNOWN ("manifest unknown",
    # opencontainers/distribution-spec spec.md error codes) that CRI-O's image library quotes.
    missing = "not found" in event or "manifest unknown" in event or not event
    if operand is DRIVER and ctx.policy_obj is not None and versioned and missing:
        return _driver_tag_missing(ctx, view, image, versioned, version, evidence)
    if ctx.policy_obj is not None and version and version in image and missing:
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {operand.spec_key: {"version": None}}})
        return Known(
            cause=f"the kubelet cannot pull the image: spec.{operand.spec_key}.version={spec['version']} of "
            f"{ctx.policy_ref} names a tag the registry does not have.",
            evidence=evidence,
            action=action,
            fix=ctx.stack.render(action) + "   # back to the operator's default version (or set one that exists)",
        )
    return pull_refused(view.name, said=f"{state.message}\n{event}", evidence=evidence)


def _driver_tag_missing(
    ctx: Context, view: NodeView, image: str, tag: re.Match[str], pinned: str, evidence: tuple[str, ...]
) -> Known:
    """The registry lacks the driver image the operator names for this node: ``<version>-<os tag>``, the OS tag
    from NFD's os-release labels (gpuchain.doctor.node_image). The fix names that tag and how to provide one:
    no image at all for an OS NVIDIA builds none for (the host's driver then), a pinned version not built for
    this OS (the operator's default), the default not built for this OS release (a version that is, a
    precompiled image, or one built for it)."""
    version, dist = tag.group(1), tag.group(2)
    os_image = node_info(view.node).get("osImage") or dist
    repo = image.rpartition(":")[0]
    said = (
        *evidence,
        f"tag {tag.group(0)} = driver version {version} + the node's OS tag {dist} (NFD's system-os_release ID and "
        f"VERSION_ID; node OS {os_image}, read as {os_tag(view.node) or 'unknown'})",
    )
    build = (
        f"or build {repo}:{tag.group(0)} for {dist} from NVIDIA/gpu-driver-container, push it to a registry the "
        "nodes reach and set spec.driver.repository to it"
    )
    if not dist.startswith(ctx.stack.driver_image_os):
        # Where the driver container runs on other nodes, only this node opts out; else the whole policy.
        off = (
            Fix(FixOp.LABEL_NODE, view.name, {deploy_label(DRIVER): "false"})
            if ctx.driver_kernels
            else Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"driver": {"enabled": False}}})
        )
        return Known(
            cause=f"no driver image exists for this node's OS: the operator asks for {image} (tag {tag.group(0)}) and "
            f"NVIDIA publishes driver images only for {', '.join(ctx.stack.driver_image_os)}, so no driver version "
            f"pulls on {os_image}.",
            evidence=said,
            action=off,
            fix=ctx.stack.render(off) + f"   # {'this node opts out' if ctx.driver_kernels else 'driver.enabled=false'}"
            f", once the driver is on the host ({ctx.stack.driver_install or 'from its OS packages'}); or run the "
            f"node on an OS with driver images ({', '.join(ctx.stack.driver_image_os)}); {build}",
        )
    # A new OS release gets driver images from the operator release that adds it: before that, no version pulls.
    newer = (
        f"; where the operator's release predates {os_image} (its default has no {dist} image either), upgrade the "
        f"GPU Operator to a release whose supported OSes list it, or run the node on an OS release it supports"
    )
    if pinned and pinned == version:
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"driver": {"version": None}}})
        return Known(
            cause=f"the registry has no driver image {image}: the operator asks for tag {tag.group(0)}, the version "
            f"spec.driver.version={pinned} of {ctx.policy_ref} built for the node's OS tag {dist}, and that "
            f"version is not published for {dist}.",
            evidence=said,
            action=action,
            fix=ctx.stack.render(action) + f"   # back to the operator's default driver release, published for {dist}; "
            f"or set spec.driver.version to a release published as {repo}:<version>-{dist}; {build}{newer}",
        )
    return Known(
        cause=f"the registry has no driver image {image}: the operator asks for tag {tag.group(0)}, its driver version "
        f"{version} for the node's OS tag {dist}, and {version} is not published for {os_image}.",
        evidence=said,
        action=None,
        fix=f"# set spec.driver.version in {ctx.policy_ref} to a driver release published as {repo}:<version>-{dist} "
        "(a newer branch, for a new OS release), or spec.driver.usePrecompiled=true where a precompiled image "
        f"exists for kernel {view.kernel}; {build}; or run the node on an OS release {version} is published for{newer}",
    )


def _toolkit_socket(ctx: Context, view: NodeView, found: catalog.Match) -> Known:
    """NVIDIA's toolkit signals /run/containerd/containerd.sock; k3s and RKE2 run containerd elsewhere."""
    dist = distribution_of(view.node)
    kubelet = node_info(view.node).get("kubeletVersion", "?")
    evidence: tuple[str, ...] = (*found.evidence(), f"kubeletVersion {kubelet} ({dist.name})")
    cri = str(((view.node.get("metadata") or {}).get("annotations") or {}).get(CRI_SOCKET) or "")
    if dist is KUBEADM and cri.removeprefix("unix://") not in ("", dist.containerd_socket):
        # kubeadm recorded the socket its kubelet talks to: that is where this node's containerd listens.
        socket = cri.removeprefix("unix://")
        evidence = (*evidence, f"annotation {CRI_SOCKET}={cri}")
        action: Fix = toolkit_env(ctx, pod=view.pod(TOOLKIT), values={"CONTAINERD_SOCKET": socket})
        return Known(
            cause=f"the container toolkit cannot signal containerd: it was given containerd's default socket, and this "
            f"node's kubelet talks to containerd at {socket} (kubeadm's record of it); it exits and the nvidia "
            "runtime is never loaded.",
            evidence=evidence,
            action=action,
            fix=ctx.stack.render(action),
        )
    if dist is not KUBEADM and ctx.policy_obj is not None:
        keep = [
            {"name": e.name, "value": e.value}
            for e in ctx.policy.toolkit.env
            if e.name not in ("CONTAINERD_CONFIG", "CONTAINERD_SOCKET", "RUNTIME_CONFIG", "RUNTIME_SOCKET")
        ]
        env = [
            *keep,
            {"name": "CONTAINERD_CONFIG", "value": dist.containerd_config},
            {"name": "CONTAINERD_SOCKET", "value": dist.containerd_socket},
        ]
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"toolkit": {"env": env}}})
        fix = ctx.stack.render(action)
    else:
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "set the toolkit's CONTAINERD_SOCKET to the socket this node's kubelet is given as "
                "--container-runtime-endpoint, and CONTAINERD_CONFIG to the file containerd runs with (its --config), "
                "then delete the toolkit pod",
                "drain": False,
                NOT_SIMULATED: "the socket path of an unknown distribution is a fact of the node no scenario names",
            },
        )
        fix = ctx.stack.render(action)
    return Known(
        cause="the container toolkit cannot signal containerd: it was given containerd's default socket, and this node "
        f"runs {dist.name}, whose containerd listens at {dist.containerd_socket} with its config in "
        f"{dist.containerd_config}; it exits and the nvidia runtime is never loaded.",
        evidence=evidence,
        action=action,
        fix=fix,
    )


def _toolkit_drop_in(ctx: Context, view: NodeView, pod: Obj) -> Known:
    """A toolkit that fails and leaves no word, on the pair of releases whose drop-in containerd refuses:
    containerd 2.3 dumps config version 4, the toolkit (v1.18 and later) writes its drop-in at that version, and
    containerd will not load it above a root config kept at version 2 or 3 (NVIDIA/gpu-operator#2646's repair).
    Reading the config from its file gives the drop-in the root config's version."""
    action = toolkit_env(ctx, pod=pod, values={"RUNTIME_CONFIG_SOURCE": "file"})
    runtime = node_info(view.node).get("containerRuntimeVersion", "")
    image = str((((pod.get("spec") or {}).get("containers") or [{}])[0]).get("image", ""))
    return Known(
        cause="the container toolkit fails on this node's pair of releases: its containerd dumps config version 4 "
        "and the toolkit writes its nvidia runtime as a drop-in at that version, which containerd will not load "
        "above a root config kept at version 2 or 3 (as managed node images keep it).",
        evidence=(
            f"status.nodeInfo.containerRuntimeVersion: {runtime}",
            f"toolkit image {image}",
            catalog.entry("containerd.drop-in-version").cite(),
        ),
        action=action,
        fix=ctx.stack.render(action) + "   # the toolkit reads containerd's config file and writes its drop-in at "
        "that file's version",
    )


def known_not_ready(view: NodeView, *, link: str, what: str, state: PodState, known: Known) -> Result:
    """The link broken by a failure the pod's log names: its cause, evidence and fix."""
    finding = node_finding(
        view,
        fid=f"{link}.not-ready",
        sev=Severity.ERROR,
        link=link,
        cause=known.cause,
        evidence=[state.describe(), *known.evidence],
        fix=known.fix,
        action=known.action,
    )
    return Result(LinkState.BROKEN, f"{what} {state.status}", (finding,))


def _first_unready(pod: Obj) -> str:
    """The name of the pod's first container that is not ready ("" when all are)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((str(cs.get("name", "")) for cs in statuses if not cs.get("ready")), "")


def state_only(ctx: Context, *, view: NodeView, operand: Operand, link: str, what: str, state: PodState) -> Known:
    """A failing pod that left no line to read (no log was collected, no termination message): what its state
    alone shows (a container that exits at every start, an init container that never finishes, a readiness
    probe that fails, containers never started), and the fix aimed at it: the log that holds the reason (the
    previous run's, for a container that restarts), the object to repair once it is read, and the stack's own
    way out of ``link`` where it has one (`own_way`)."""
    pod = view.pod(operand) or {}
    spec = pod.get("spec") or {}
    inits = {str(c.get("name")) for c in spec.get("initContainers") or []}
    container = state.container or _first_unready(pod)
    kind = "init container" if container in inits else "container"
    ns, name = state.restart_in(ctx.namespace), state.name
    nothing = "no line of it was collected (no log, no termination message)"
    if state.failing and state.restarts:
        cause = (
            f"the {what} is {state.status}: its {kind} {container} exits at every start ({state.restarts} restarts) "
            f"and {nothing}, so the reason is in its previous run's log."
        )
        read = f"kubectl -n {ns} logs {name} -c {container} --previous"
    elif state.waiting_init:
        cause = (
            f"the {what} is {state.status}: it is held in its init container {container}, which has not finished, so "
            f"its main container never starts; {nothing}."
        )
        read = f"kubectl -n {ns} logs {name} -c {container}"
    elif container and not state.failing and state.status.startswith("Running"):
        cause = (
            f"the {what} runs but its {kind} {container} is not ready: its readiness probe fails"
            + (f" and it restarted {state.restarts} times" if state.restarts else "")
            + f"; {nothing}."
        )
        read = f"kubectl -n {ns} logs {name} -c {container}"
    else:
        cause = f"the {what} is {state.status} and no Event or line says why."
        read = f"kubectl -n {ns} describe pod {name}"
    again = ctx.stack.render(Fix.delete_pod(ns, name))
    fix = silent_fix(
        ctx, link=link, read=read, what=f"the {what}", target=repair_target(ctx, pod=pod, operand=operand), again=again
    )
    image = container_image(pod, container)
    if link in UPGRADED and (moved_image(image) is not None or (state.failing and newer_image(image) is not None)):
        # A crash of a release older than its component's newest (or of an image that ended at the one it runs):
        # the later release carries its maintainers' fixes; the line, once read, is the step after it.
        fix = newest_release(ctx, pod=pod, operand=operand, otherwise=fix.lstrip("# "))
    return Known(cause=cause, evidence=(), action=None, fix=fix)


def not_ready(
    ctx: Context, *, view: NodeView, operand: Operand, link: str, what: str, state: PodState, log: str, cause: str
) -> Result:
    """An operand pod failing: the known failure its log names with its fix, else its state and last error, else
    (no line at all) what its state alone shows."""
    # A container the runtime refused never wrote a log: the runtime's message is its only word.
    refused = refused_message(view, view.pod(operand) or {})
    log = "\n".join(x for x in (log, "" if refused in log else refused) if x)
    known = known_failure(ctx, view=view, operand=operand, state=state, log=log)
    if known is not None:
        known = with_release(ctx, view=view, pod=view.pod(operand), operand=operand, known=known, log=log)
        return known_not_ready(view, link=link, what=what, state=state, known=known)
    found = catalog.known_error(log, link)
    if found is not None:
        # A message the catalog knows and no check acts on as data: its cause and repair, as the catalog says;
        # where it is a defect of the release the pod runs, that release's fix first.
        pod = view.pod(operand)
        fix = found.entry.repair(
            view.name, namespace=state.restart_in(ctx.namespace), pod=state.name, daemonset=owner_ds(pod or {})
        )
        release = release_repair(ctx, view=view, pod=pod, operand=operand, shown=showing("log", found.entry.id))
        known = Known(
            cause=" ".join((found.entry.cause, release.cause)) if release else found.entry.cause,
            evidence=(*found.evidence(), *(release.evidence if release else ())),
            action=release.action if release else None,
            fix=f"{release.fix}; otherwise: {fix}" if release else f"# {fix}",
        )
        return known_not_ready(view, link=link, what=what, state=state, known=known)
    if silent("\n".join((log, state.message))):
        return known_not_ready(
            view,
            link=link,
            what=what,
            state=state,
            known=state_only(ctx, view=view, operand=operand, link=link, what=what, state=state),
        )
    # Nothing known: the line itself is quoted (and reported as unrecognised by evidence.unrecognised), with
    # the link's next action; the pod is run again after it.
    again = Fix.delete_pod(state.restart_in(ctx.namespace), state.name)
    line, last = catalog.unknown_error(log) or "", last_line(log)
    image = container_image(view.pod(operand), state.container or ctx.container(operand))
    step = next_step(ctx, link=link, line=line, refused=refused, last=last, image=image, node=view.name)
    # A line of a shape gpuchain knows has that shape's repair first (in `step`); a newer release is not it.
    upgrade = link in UPGRADED and shape_of(ctx, link=link, said=(line, refused, last)) is None
    if refused:
        cause = f"the {what} never started: the container runtime refused its container ({state.status})."
    return Result(
        LinkState.BROKEN,
        f"{what} {state.status}",
        (
            node_finding(
                view,
                fid=f"{link}.not-ready",
                sev=Severity.ERROR,
                link=link,
                cause=cause + " gpuchain does not recognise the failure.",
                evidence=[
                    state.describe(),
                    f"runtime: {refused}" if refused else state.message,
                    *([f"unrecognised: {line}"] if line else []),
                ],
                fix=newest_release(
                    ctx,
                    pod=view.pod(operand) if upgrade else None,
                    operand=operand,
                    otherwise=f"{step}; the pod retries by itself ({ctx.stack.render(again)} starts it at once)",
                ),
            ),
        ),
    )
