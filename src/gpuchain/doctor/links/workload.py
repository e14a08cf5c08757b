"""GPU workloads on a node: refused at admission, refused at start by the runtime hook, GPUs that went
away under them, and GPUs seen without a request."""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.evidence import ANYWHERE, HOOK_WRAPPERS, TOOLKIT_BINARY, refused_message
from gpuchain.doctor.links.admitted_early import (
    DefaultRuntime,
    admitted_through,
    admitted_without_device,
    default_runtime_injects,
    recovered_before_registration,
)
from gpuchain.doctor.links.common import node_finding, said_by
from gpuchain.doctor.links.cuda_repair import INSUFFICIENT, SYSTEM_NOT_READY, fabric_repair_words, insufficient_repair
from gpuchain.doctor.links.dra_plugin import claims_not_prepared
from gpuchain.doctor.links.driver_caps import missing_capability
from gpuchain.doctor.links.gpushare import cgpu_unstarted
from gpuchain.doctor.links.hami_core import miscounted_memory
from gpuchain.doctor.links.host_plugin import announcing_host_plugin
from gpuchain.doctor.links.kai_sharing import binder_without_cdi
from gpuchain.doctor.links.kubelet_defects import running_rejected
from gpuchain.doctor.links.lxd_gpu import lxd_without_gpu
from gpuchain.doctor.links.nvml_lost import lost_gpus
from gpuchain.doctor.links.outof_gpu import refused_before_plugin
from gpuchain.doctor.links.plugin_validator import validation_outbid
from gpuchain.doctor.links.releases import release_repair
from gpuchain.doctor.links.runtime_default import (
    distribution_default_runtime,
    keeps_runc_default,
    regenerated_config,
    toolkit_default_fix,
)
from gpuchain.doctor.links.runtime_override import runtime_overridden
from gpuchain.doctor.links.shared_oom import starved_by_cotenants
from gpuchain.doctor.links.shared_request import shared_too_large
from gpuchain.doctor.links.unallocated_gpu import unallocated_gpu
from gpuchain.doctor.links.unrequested_gpus import gpus_without_request
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.next_steps import shape_first
from gpuchain.doctor.node import distribution_of
from gpuchain.doctor.node_image import node_image
from gpuchain.doctor.pods import pod_state
from gpuchain.doctor.releases import showing
from gpuchain.doctor.scheduling import Owner, owner_of, patch_fix
from gpuchain.kube.gpu_resources import node_gpu_resources, pod_gpu_requests, shares_a_gpu
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN, RUNTIME_CLASS_HANDLER, TOOLKIT

#: Admission refusals whose repair is not a kubelet restart (catalog.yaml): the plugin's own Allocate refusals of the
#: request (its sharing config, a device it no longer announces), and the device manager's for a plugin that is not
#: registered or GPUs gone unhealthy.
PLUGIN_REFUSED = (
    "k8s-device-plugin.shared-request-too-big",
    "k8s-device-plugin.allocate-unknown-device",
    "volcano-vgpu-device-plugin.device-number-not-matched",
    "kubelet.device-plugin-unregistered",
    "kubelet.previously-allocated-unhealthy",
    "kubelet.unhealthy-devices",
)


def _admission(ctx: Context, view: NodeView) -> Finding | None:
    """The kubelet refused GPU pods at admission (Allocate): UnexpectedAdmissionError Events."""
    refused = [e for e in view.events if e.get("reason") == "UnexpectedAdmissionError"]
    if not refused:
        return None
    message = str(refused[0].get("message", ""))
    if (too_large := shared_too_large(ctx, view, refused)) is not None:
        return too_large
    if catalog.find(message, *ANYWHERE):
        # A message that proves a lower link broken (NVML failing under the plugin): the walk names that
        # link as the root with its repair (evidence.admission_refused); a kubelet restart would not help.
        return None
    if (outbid := validation_outbid(ctx, view, refused)) is not None:
        return outbid  # the operator's plugin validation asks for a GPU the node's pods hold
    if (readmitted := running_rejected(ctx, view, refused)) is not None:
        return readmitted  # a kubelet release whose restart fails the pods it was running
    pods = sorted(
        {
            f"{(e.get('involvedObject') or {}).get('namespace')}/{(e.get('involvedObject') or {}).get('name')}"
            for e in refused
        }
    )
    lost = catalog.find(message, "nvml.gpu-lost")
    plugin = catalog.find(message, *PLUGIN_REFUSED)
    said = [m.entry.cite() for m in (catalog.find(message, "kubelet.allocate-failed"), lost, plugin) if m]
    action: Fix | None
    if plugin and not lost:
        # A refusal a kubelet restart would not repair (the plugin's own, an unregistered plugin, unhealthy GPUs):
        # the repair is the entry's.
        action = None
        cause = f"the kubelet refuses GPU pods at admission: {plugin.entry.cause}"
    elif lost:
        action = Fix(
            FixOp.HARDWARE,
            view.name,
            {
                "action": "reset the lost GPU (nvidia-smi -r) or reboot the node; replace it if it recurs",
                "fact": "replace-gpu",
            },
        )
        cause = "the device plugin cannot list its devices because a GPU is lost, so the kubelet refuses every GPU pod."
    else:
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "systemctl restart kubelet (its device manager holds allocations of pods that are gone)",
                "fact": "kubelet",
            },
        )
        cause = (
            "the kubelet's device manager counts GPUs of pods that no longer exist as allocated, so it refuses new GPU "
            "pods at admission although the scheduler placed them (kubernetes/kubernetes#130145)."
        )
    return node_finding(
        view,
        fid="workload.admission-failed",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=cause,
        evidence=[
            f"event UnexpectedAdmissionError (kubelet): {message}",
            *said,
            f"pods refused: {', '.join(pods[:5])}",
        ],
        fix=ctx.stack.render(action) if action else f"# {_repair(ctx, view, plugin)}",
        action=action,
    )


def _repair(ctx: Context, view: NodeView, said: catalog.Match | None) -> str:
    """The entry's repair with this node's device plugin pod filled in (the pod to restart)."""
    pod = view.pod(DEVICE_PLUGIN) or {}
    ns = namespace_of(pod) or ctx.namespace
    return said.entry.repair(view.name, namespace=ns, pod=name_of(pod)) if said else ""


#: What the NVIDIA runtime hook (or the runtime's CDI injection) writes when it refuses to set up a GPU
#: container (catalog.yaml), most specific first; containerd reports it as the container's StartError message.
HOOK_FAILED = (
    "runc.cdi-driver-file-missing",
    "nvidia-container-toolkit.unexpected-link-target",
    "libnvidia-container.firmware-mount",
    "nvidia-container-runtime.debug-log-file",
    "nvidia-ctk.update-ldcache-conf-d",
    "nvidia-container-toolkit.xorg-discoverer",
    "libnvidia-container.cgroup-version-unknown",
    "libnvidia-container.cgroup-subsystem-missing",
    "glibc.toolkit-version-not-found",
    "nvidia-container-toolkit.application-profiles-read-only",
    "libnvidia-container.mount-error",
    "libnvidia-container.unknown-device",
    "libnvidia-container.imex-parse",
    "libnvidia-container.ldconfig-missing",
    "libnvidia-container.device-filter",
    "nvidia-container-runtime.config-invalid",
    "nvidia-container-runtime.invalid-mode",
    "nvidia-container-runtime.low-level-runtime-missing",
    "nvidia-container-runtime.cdi-vendor-mix",
    "nvidia-cdi-hook.create-symlink-failed",
    "cri-o.user-namespace-cdi-hook",
    "coreutils.chmod-device-path-missing",
    "libnvidia-container.driver-rpc-timeout",
    "libnvidia-container.initialization-error",
    "cdi.unresolvable-devices",
    "runc.prestart-hook-failed",
)


def _hook_refused(ctx: Context, view: NodeView, apps: list[Obj]) -> Finding | None:
    """GPU pods the NVIDIA runtime hook refuses to start while the chain's operands run: the toolkit on the
    node (its hook), not the pods, is broken."""
    refused, unknown, wrapped = [], "", ""
    said: catalog.Match | None = None
    for pod in apps:
        if not pod_gpu_requests(pod):
            continue
        said_here = refused_message(view, pod)
        if catalog.find(said_here, *ANYWHERE):
            continue  # a message that proves a lower link broken (the walk names it there, from this pod)
        found = catalog.find(said_here, *HOOK_FAILED)
        # Words no entry knows that still name the toolkit's runtime or its CLI as what refused the container.
        odd = "" if found is not None or not TOOLKIT_BINARY.search(said_here) else said_here
        if found is not None or odd:
            refused.append(f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}")
            wrapped = wrapped or (said_here if found is not None and said is None else "")
            said, unknown = said or found, unknown or odd
    if said is None:
        return _hook_refused_unknown(ctx, view, refused, unknown) if unknown else None
    release = release_repair(
        ctx, view=view, pod=view.pod(TOOLKIT), operand=TOOLKIT, shown=showing("log", said.entry.id)
    )
    overridden = runtime_overridden(ctx, view, said=said, refused=refused) if release is None else None
    if overridden is not None:
        return overridden
    if release is not None:
        # A defect of the toolkit's release: the release that fixed it, wherever the hook comes from.
        work = (
            f"{release.fix.removeprefix('# ')}; otherwise {said.entry.fix}; then delete the pods: "
            f"{', '.join(refused[:3])}"
        )
    elif ctx.stack.node_image:
        work = (
            f"the node image carries the runtime hook: replace the node with one of another release of "
            f"{ctx.stack.node_image} (the release before the one it runs, or a later one with the fix); "
            f"then delete the pods: {', '.join(refused[:3])}"
        )
    else:
        inner = tuple(wrapped.splitlines()) if said.entry.id in HOOK_WRAPPERS else ()
        work = shape_first(ctx, link="toolkit", said=inner, then=said.entry.fix, node=view.name)
        work += f"; then delete the pods: {', '.join(refused[:3])}"
    action = Fix(
        FixOp.NODE,
        view.name,
        {"action": work, "drain": False, NOT_SIMULATED: "the runtime hook's release is not a scenario fact"},
    )
    return node_finding(
        view,
        fid="workload.runtime-hook-failed",
        sev=Severity.ERROR,
        link="toolkit",
        cause=f"GPU pods on this node fail to start: the NVIDIA runtime refuses to set up their containers. "
        f"{said.entry.cause}",
        evidence=[
            f"GPU pods refused at start: {', '.join(refused[:5])}",
            *said.evidence("runtime says"),
            *(release.evidence if release else ()),
        ],
        fix=ctx.stack.render(action),
        action=action,
    )


def _hook_refused_unknown(ctx: Context, view: NodeView, refused: list[str], said: str) -> Finding:
    """GPU pods the NVIDIA runtime refuses with words gpuchain's catalog does not know: the toolkit is still what
    refuses them, so the finding is its link's, the words quoted as unrecognised; the repair is what their shape
    names (a file, library or permission the runtime lacks), else the runtime set up again on the node."""
    line = catalog.unknown_error(said) or next((ln for ln in said.splitlines() if TOOLKIT_BINARY.search(ln)), said)
    work = shape_first(
        ctx,
        link="toolkit",
        said=tuple(said.splitlines()),
        then="write the nvidia runtime into the config this node's container runtime reads (nvidia-ctk runtime "
        "configure)",
        node=view.name,
    )
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"{work}, restart the container runtime, then delete the pods: {', '.join(refused[:3])}",
            "drain": False,
            NOT_SIMULATED: "the runtime's refusal is a fact of the node no scenario names",
        },
    )
    return node_finding(
        view,
        fid="workload.runtime-hook-failed",
        sev=Severity.ERROR,
        link="toolkit",
        cause="GPU pods on this node fail to start: the NVIDIA runtime refuses to set up their containers, with "
        "words gpuchain's catalog does not know.",
        evidence=[f"GPU pods refused at start: {', '.join(refused[:5])}", f"unrecognised: {line}"],
        fix=ctx.stack.render(action),
        action=action,
    )


#: What a GPU workload writes when its container has no driver library: the runtime did not inject the node's
#: driver (catalog.yaml: PyTorch's words for no libcuda, NVML's for no libnvidia-ml, runc's and bash's for no
#: nvidia-smi, the loader's for no libcuda.so.1, vLLM's for no platform found).
NO_DRIVER_IN_POD = (
    "pytorch.no-driver",
    "nvml.library-not-found",
    "runc.driver-binary-missing",
    "bash.driver-binary-not-found",
    "loader.no-driver-library",
    "vllm.no-platform",
    "vllm.unspecified-platform",
    "ollama.no-compatible-gpus",
)
#: Of those, the words a workload says of any GPU it could not use, which yield to its own words for a driver fault
#: (`CUDA_UNUSABLE`: Ollama's library version mismatch) in the same log.
ANY_CAUSE = ("ollama.no-compatible-gpus",)
NO_DRIVER_SPECIFIC = tuple(i for i in NO_DRIVER_IN_POD if i not in ANY_CAUSE)


def _no_driver_injected(ctx: Context, view: NodeView, apps: list[Obj]) -> Finding | None:
    """GPU pods that got a GPU but no driver library in their container, on a node whose chain works: they run
    under a runtime other than nvidia (no runtimeClassName, and nvidia is not the node's default runtime), which
    the chain's own pods do not show (the operator gives them runtimeClassName: nvidia). The repair is the
    runtime class on the pods' owner."""
    hit: list[Obj] = []
    said: catalog.Match | None = None
    # Where runc stays the default, CUDA's "insufficient driver" in a pod with no RuntimeClass is no libcuda at all.
    # And CUDA's "no CUDA-capable device" there is no device node: runc does not act on NVIDIA_VISIBLE_DEVICES.
    words = (*NO_DRIVER_IN_POD, *((*ALSO_NO_LIBRARY, *NO_GPU) if keeps_runc_default(ctx, view=view) else ()))
    for pod in apps:
        if not (pod_gpu_requests(pod) or shares_a_gpu(pod)) or (pod.get("spec") or {}).get("runtimeClassName"):
            continue
        text = said_by(ctx, pod)
        found = catalog.find(text, *words)
        if found is not None and found.entry.id in ANY_CAUSE and catalog.find(text, *CUDA_UNUSABLE):
            continue  # the driver under it, said in its own words: _cuda_unusable's
        if found is not None:
            hit.append(pod)
            said = said or found
    if said is None:
        return None
    owner = owner_of(hit[0])
    refs = ", ".join(f"{namespace_of(p)}/{name_of(p)}" for p in hit[:5])
    # CUDA's "no device" is read here only where runc stays the default: k3s's and RKE2's containerd, or a toolkit told
    # not to default, run a plugin that found NVML some other way (host mounts), not through the default runtime.
    # Where the plugin proves the default runtime injects the driver, the pods were admitted without their
    # allocation, or got it and the runtime did not act on it.
    proof = default_runtime_injects(ctx, view) if said.entry.id not in NO_GPU else None
    if proof is not None and admitted_through(proof, hit):
        return _allocation_not_injected(ctx, view, hit=hit, said=said, proof=proof)
    if proof is not None:
        return admitted_without_device(ctx, view=view, hit=hit, said=said, proof=proof)
    regenerated = regenerated_config(ctx, view=view, toolkit=view.pod(TOOLKIT)) if not ctx.stack.node_image else None
    action: Fix
    if regenerated is not None:
        # k3s or RKE2 drop the default runtime the toolkit wrote: its config's place is the repair.
        action, fix, made = regenerated
    else:
        action, fix = _runtime_class_fix(ctx, view, owner)
        made = f"{owner.kind} {owner.namespace}/{owner.name} makes {name_of(hit[0])}"
    return node_finding(
        view,
        fid="workload.no-driver-in-pod",
        sev=Severity.ERROR,
        link="toolkit",
        cause="GPU pods on this node were given a GPU but no driver library in their containers: "
        + (
            f"they name no RuntimeClass and {distribution_of(view.node).name}'s containerd keeps runc its default "
            "runtime, so CUDA's words here mean it found no libcuda (cudaErrorInsufficientDriver, what it answers "
            "without one), not a driver older than the image's CUDA."
            if said.entry.id in ALSO_NO_LIBRARY
            else f"they name no RuntimeClass and {distribution_of(view.node).name}'s containerd keeps runc its "
            "default runtime, which does not act on the device plugin's NVIDIA_VISIBLE_DEVICES: no GPU device node "
            "and no driver library reach the container, so CUDA finds no device (cudaErrorNoDevice), not a driver "
            "that does not serve the GPU."
            if said.entry.id in NO_GPU
            else said.entry.cause
        ),
        evidence=[f"GPU pods with no runtimeClassName on it that say so: {refs}", *said.evidence("pod says"), made],
        fix=fix if regenerated is None else ctx.stack.render(action) + fix,
        action=action,
    )


#: The NVIDIA runtime's own settings that decide whether it acts on a device plugin's allocation, at the toolkit's
#: defaults (NVIDIA/nvidia-container-toolkit internal/config/config.go GetDefault: mode "auto", which picks
#: CDI where the allocation names CDI devices and the legacy hook otherwise; AcceptEnvvarUnprivileged true).
RUNTIME_DEFAULTS = (
    'mode = "auto" under [nvidia-container-runtime] and accept-nvidia-visible-devices-envvar-when-unprivileged = true'
)
RUNTIME_CONFIG = "/etc/nvidia-container-runtime/config.toml"


def _allocation_not_injected(
    ctx: Context, view: NodeView, *, hit: list[Obj], said: catalog.Match, proof: DefaultRuntime
) -> Finding:
    """GPU pods the kubelet admitted through the registered plugin (after its run began, so with their allocation)
    whose containers have no driver, on a node whose default runtime gave the plugin's own container NVML: the NVIDIA
    runtime runs there but does not act on the allocation. Its settings were changed from the toolkit's defaults (a
    mode forced to legacy, which containerd 2's CDI-named devices bypass, or unprivileged containers' envvar refused);
    the repair puts them back on the node, and takes out what changes them (a node group's user data)."""
    refs = ", ".join(f"{namespace_of(p) or 'default'}/{name_of(p)}" for p in hit[:5])
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"restore the NVIDIA Container Toolkit's defaults in {RUNTIME_CONFIG} ({RUNTIME_DEFAULTS}; "
            "drop any forced legacy mode), remove what rewrites them (the node group's user data or launch "
            "template, a config-management step), restart containerd, then delete the GPU pods so they start again",
            NOT_SIMULATED: "the runtime's config.toml on the node is not a scenario fact",
        },
    )
    return node_finding(
        view,
        fid="workload.no-driver-in-pod",
        sev=Severity.ERROR,
        link="toolkit",
        cause=f"GPU pods {refs} were taken on by the kubelet after the device plugin registered, so they were given "
        "their GPU, yet their containers have no driver, while the node's default runtime gave the plugin's own "
        "container NVML with no RuntimeClass: the NVIDIA runtime runs on the node but does not act on the plugin's "
        "allocation for these pods, so its settings differ from the toolkit's defaults (a mode forced to legacy, or "
        "the envvar of unprivileged containers refused).",
        evidence=[
            f"GPU pods admitted after the plugin's run began, with no runtimeClassName, that say so: {refs}",
            *said.evidence("pod says"),
            *proof.evidence(view),
        ],
        fix=ctx.stack.render(action),
        action=action,
    )


def _runtime_class_fix(ctx: Context, view: NodeView, owner: Owner) -> tuple[Fix, str]:
    """The runtime class on the pods' owner (the RuntimeClass created where the cluster lacks it), or on a managed
    node image the node image whose runtime gives GPU pods the driver: the fix and its text."""
    rc = ctx.policy.operator.runtime_class if ctx.policy_obj is not None else RUNTIME_CLASS_HANDLER
    if ctx.stack.node_image:
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": f"replace the node with one built from {ctx.stack.node_image}, whose runtime gives GPU pods "
                "the driver",
                NOT_SIMULATED: "the node image is not a scenario fact",
            },
        )
        return action, ctx.stack.render(action)
    action = patch_fix(owner, {"runtimeClassName": rc})
    missing = rc not in ctx.runtime_classes and "runtimeclasses" not in ctx.snapshot.absent
    runtime_class = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": rc}}
    create = (
        ctx.stack.render(Fix(FixOp.CREATE, "", {**runtime_class, "handler": RUNTIME_CLASS_HANDLER})) + " && "
        if missing
        else ""
    )
    keeps = keeps_runc_default(ctx, view=view)  # where the toolkit already writes its template, the class repairs
    # The stack's own setting where its toolkit is told not to make nvidia the default, else the distribution's way.
    default = toolkit_default_fix(ctx, view=view) or (distribution_default_runtime(view.node) if keeps else "")
    default = default or (
        "make nvidia the node's default runtime: nvidia-ctk runtime configure --runtime=containerd --set-as-default "
        "&& systemctl restart containerd"
    )
    return action, f"{create}{ctx.stack.render(action)}   # or {default}"


#: What a GPU workload prints when CUDA does not start on the GPU it was given, for the driver under it (catalog.yaml),
#: most specific first: the CUDA runtime's system errors (cudaError 802 no Fabric Manager, 803 driver libraries that
#: are not the module's, 804 forward compatibility on a GPU without it), PyTorch's and the CUDA runtime's words
#: (cudaError 35, 46, 100), NVML's with no module loaded.
CUDA_UNUSABLE = (
    SYSTEM_NOT_READY,
    "cuda.system-driver-mismatch",
    "ollama.driver-library-mismatch",
    "cuda.compat-not-supported",
    "pytorch.driver-too-old",
    "ffmpeg.nvenc-driver-too-old",
    "cuda.insufficient-driver",
    "cuda.devices-unavailable",
    "cuda.no-device",
    "nvml.driver-not-loaded",
)
#: Of those, the words CUDA says where its container was given no GPU: what a pod the kubelet started without the
#: device plugin's allocation says (`recovered_before_registration`).
NO_GPU = ("cuda.no-device",)
#: Of those, the words CUDA also answers in a container the NVIDIA runtime gave no driver library at all
#: (cudaErrorInsufficientDriver with no libcuda): read as the driver only where the pod was meant to get one.
ALSO_NO_LIBRARY = ("cuda.insufficient-driver",)
#: The words of a link proved anywhere that another check reads (the runtime hook's refusals): the CUDA runtime's own
#: system errors in a workload that ran are this check's.
READ_ELSEWHERE = tuple(i for i in ANYWHERE if i not in CUDA_UNUSABLE)
#: The node labels that say which driver it runs (NVIDIA's GFD), quoted beside what the pods say.
DRIVER_LABELS = ("nvidia.com/cuda.driver-version.full", "nvidia.com/cuda.driver.major", "nvidia.com/gpu.product")


def _cuda_unusable(ctx: Context, view: NodeView, apps: list[Obj]) -> Finding | None:
    """GPU pods whose CUDA does not start on a node whose device plugin runs and announces GPUs: the plugin handed out
    GPUs the driver under it will not serve (a compute mode that refuses contexts, a vGPU guest driver without a
    license, a driver older than the image's CUDA, no module loaded), so the node's driver is the root, not the pods
    and not the plugin. On a managed node image the driver is the image's: the pool's node image upgrade repairs it."""
    plugin = view.pod(DEVICE_PLUGIN)
    serving = (plugin is not None and pod_state(plugin).ready) or announcing_host_plugin(view.node)
    if not serving or not any(node_gpu_resources(view.node).values()):
        return None  # no plugin that runs (the DaemonSet's, or the node image's own service) handed these GPUs out
    hit: list[Obj] = []
    said: catalog.Match | None = None
    said_all = ""  # the whole of what the first such pod says: a repair may read a line besides the matched one
    for pod in apps:
        if not pod_gpu_requests(pod):
            continue
        text = said_by(ctx, pod)
        found = catalog.find(text, *CUDA_UNUSABLE)
        if found is None or catalog.find(text, *NO_DRIVER_SPECIFIC, *READ_ELSEWHERE):
            continue  # no such words, or words another check reads (no driver injected, a link proved anywhere)
        classed = (pod.get("spec") or {}).get("runtimeClassName")
        meant = classed or (ctx.policy_obj is None and not keeps_runc_default(ctx, view=view))
        if found.entry.id in (*ALSO_NO_LIBRARY, *NO_GPU) and not meant:
            continue  # a pod the operator's nvidia runtime class does not run: maybe no driver library was injected
        hit.append(pod)
        if said is None:
            said, said_all = found, text
    if said is None:
        return None
    early = recovered_before_registration(ctx, view=view, hit=hit, said=said) if said.entry.id in NO_GPU else None
    if early is not None:
        return early
    refs = ", ".join(f"{namespace_of(p)}/{name_of(p)}" for p in hit[:5])
    image = node_image(view.node)
    if image is not None and image.ships_driver and image.upgrade:
        work = f"the driver is {image.cloud}'s node image's: upgrade the node pool's node image: {image.upgrade}"
    else:
        work = said.entry.fix
    # What CUDA said names the repair: Fabric Manager for 802, the image's driver floor for 35/804.
    why = ""
    if said.entry.id == SYSTEM_NOT_READY:
        fabric = fabric_repair_words(ctx, view, image)
        why, work = fabric if fabric is not None else (why, work)
    elif said.entry.id in INSUFFICIENT:
        work = insufficient_repair(ctx, view, pods=hit, image=image, line=said.line, text=said_all) or work
    # Words a release of a component on the node is known to cause (releases.yaml): that release first.
    release = release_repair(
        ctx, view=view, pod=view.pod(TOOLKIT), operand=TOOLKIT, shown=showing("log", said.entry.id)
    )
    again = " && ".join(f"kubectl delete pod -n {namespace_of(p)} {name_of(p)}" for p in hit[:3])
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"{release.fix.removeprefix('# ')}; otherwise {work}; then {again}"
            if release is not None
            else f"{work}; then {again}",
            "drain": False,
            NOT_SIMULATED: "the driver's compute mode, license and CUDA version are not scenario facts",
        },
    )
    fix = ctx.stack.render(action)
    if release is not None and release.action is not None:  # the release is set in the cluster, not on the node
        action, fix = release.action, f"{release.fix}; otherwise {work}; then {again}"
    return node_finding(
        view,
        fid="workload.cuda-unusable",
        sev=Severity.ERROR,
        link="driver",
        cause=f"GPU pods on this node fail to start {'NVENC' if 'nvenc' in said.entry.id else 'CUDA'} on the GPUs the "
        "device plugin gave them, while the plugin runs "
        f"and announces GPUs, so the fault is under it, in the node's driver: {said.entry.cause}"
        + (f" ({why})" if why else ""),
        evidence=[
            f"GPU pods failing: {refs}",
            *said.evidence("pod says"),
            f"node {view.name} announces {', '.join(f'{k} {v}' for k, v in node_gpu_resources(view.node).items())}",
            *(f"label {k}={view.labels[k]}" for k in DRIVER_LABELS if k in view.labels),
            *(image.said if image is not None else ()),
            *(release.evidence if release is not None else ()),
        ],
        fix=fix,
        action=action,
    )


def check_workloads(ctx: Context, view: NodeView) -> list[Finding]:
    """Application pods on a GPU node: refused at admission, refused at start by the runtime hook, GPU claims
    the DRA path cannot set up, GPUs that went away under them, and GPUs seen without a request."""
    refused = _admission(ctx, view)
    findings: list[Finding] = [refused] if refused else []
    early = refused_before_plugin(ctx, view)
    if early is not None:
        findings.append(early)
    apps = [
        p for p in view.workloads if (p.get("metadata") or {}).get("namespace") not in (ctx.namespace, "kube-system")
    ]
    # A Juju LXD worker with no GPU device in its machine: the hook's and CUDA's refusals are that, not the stack's.
    no_device = lxd_without_gpu(ctx, view, apps)
    found: list[Finding | None] = [no_device]
    if no_device is None:
        found.append(_hook_refused(ctx, view, apps))
    found += [_no_driver_injected(ctx, view, apps), missing_capability(ctx, view, apps)]
    if no_device is None:
        found.append(_cuda_unusable(ctx, view, apps))
    findings += [f for f in found if f is not None]
    findings += cgpu_unstarted(ctx, view, apps)
    later = (
        binder_without_cdi(ctx, view, apps),
        miscounted_memory(ctx, view, apps),
        claims_not_prepared(ctx, view),
        lost_gpus(ctx, view, apps),
        gpus_without_request(ctx, view, apps),
        unallocated_gpu(ctx, view, apps),
        starved_by_cotenants(ctx, view, apps),
    )
    findings += [f for f in later if f is not None]
    return findings
