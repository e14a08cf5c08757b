"""What a failing operand pod's own output says about its operand, and the change that answers it: `known_failure`
asks every failure a pod may show (pod_failures: unschedulable, a missing object or command, OOM; image_missing: an
image the registry lacks; probes, arguments, unprivileged GPUs) and then the operands' own: the kernel refusing the
driver's module (Secure Boot, SELinux), the toolkit's containerd socket, config and drop-in, and a component out of
inotify instances."""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.arguments import arguments_refused
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.links.driver_headers import headers_missing
from gpuchain.doctor.links.image_missing import image_missing
from gpuchain.doctor.links.pod_failures import command_missing, object_missing, oom_killed, unschedulable
from gpuchain.doctor.links.probes import probe_killed
from gpuchain.doctor.links.toolkit_template import TEMPLATE, template_repair
from gpuchain.doctor.links.unprivileged_envvar import unprivileged_gpu
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp
from gpuchain.doctor.node import KUBEADM, distribution_of, drop_in_too_new, node_info, reads_config_file
from gpuchain.doctor.owners import silent, toolkit_env
from gpuchain.doctor.pods import PodState
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import DEVICE_PLUGIN, DRIVER, TOOLKIT, Operand

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


def known_failure(ctx: Context, *, view: NodeView, operand: Operand, state: PodState, log: str) -> Known | None:
    """What the operand's status or log names, and its fix (None: gpuchain does not know this failure)."""
    if state.unschedulable:
        return unschedulable(ctx, view=view, operand=operand, state=state)
    if state.status in IMAGE_PULL:
        return image_missing(ctx, view=view, operand=operand, state=state)
    oom = oom_killed(ctx, view=view, operand=operand, state=state)
    oom = oom or probe_killed(ctx, view=view, operand=operand, state=state, log=log)
    oom = oom or unprivileged_gpu(ctx, view=view, pod=view.pod(operand) or {}, log=log)
    if oom is not None:
        return oom
    mount = object_missing(ctx, view=view, operand=operand, state=state)
    if mount is not None:
        return mount
    command = command_missing(ctx, view=view, operand=operand) or arguments_refused(
        ctx, view=view, operand=operand, state=state, log=log
    )
    if command is not None:
        return command
    headers = headers_missing(ctx, view=view, operand=operand, state=state, log=log)
    if headers is not None:
        return headers
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


#: The Node annotation kubeadm writes with the CRI socket it gave the kubelet (kubernetes
#: cmd/kubeadm/app/constants/constants.go@v1.34.4 AnnotationKubeadmCRISocket).
CRI_SOCKET = "kubeadm.alpha.kubernetes.io/cri-socket"


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
