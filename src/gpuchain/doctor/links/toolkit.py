"""The toolkit link: the RuntimeClass, the runtime's nvidia handler, the toolkit pod, and the node's
own runtime where the stack manages none (seen through a device plugin that gets no NVML)."""

from __future__ import annotations

import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.evidence import NOT_STARTED
from gpuchain.doctor.links.aks_engine import provisioned_without_driver
from gpuchain.doctor.links.common import NVML_FOUND, Result, node_finding, operand_log
from gpuchain.doctor.links.config_source import dumped_config
from gpuchain.doctor.links.deployed import operator_pod, restart_operator, unscheduled
from gpuchain.doctor.links.not_ready import not_ready
from gpuchain.doctor.links.releases import release_repair
from gpuchain.doctor.links.runtime_autodetect import autodetect_repair
from gpuchain.doctor.links.runtime_default import config_version_note, distribution_default, docker_setup
from gpuchain.doctor.links.runtime_handler import (
    docker_handler_repair,
    missing_mode,
    mixed_runtime_repair,
    mode_handler_repair,
)
from gpuchain.doctor.links.tegra import tegra_release
from gpuchain.doctor.links.toolkit_torn_down import torn_down
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.node import (
    NVIDIA_HANDLER,
    VOLUME_WAITS,
    distribution_of,
    node_info,
    runtime_scheme,
    runtime_setup,
)
from gpuchain.doctor.owners import runtime_class_of
from gpuchain.doctor.pods import PodState, container_ran, init_done, lacks_sandbox, pod_state, sandbox_created
from gpuchain.doctor.releases import showing
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import READY_TO_START, Obj, name_of
from gpuchain.operator.operands import DEVICE_PLUGIN, RUNTIME_CLASS_HANDLER, TOOLKIT, VALIDATOR


def runtime_evidence(ctx: Context, view: NodeView) -> tuple[list[str], catalog.Entry | None]:
    """Events and pods that show the runtime has no nvidia handler, and the runtime's message that says so."""
    lines = []
    said = None
    for ev in view.events:
        found = catalog.find(str(ev.get("message", "")), *NVIDIA_HANDLER)
        if found:
            said = found
            ref = ev.get("involvedObject") or {}
            lines.append(f"event {ev.get('reason')} on pod {ref.get('name')}: {ev.get('message')}")
    if said is not None:
        return [*lines[:3], said.entry.cite()], said.entry
    classed = [(pod, rc) for pod in view.pods if (rc := runtime_class_of(ctx, pod))]
    # Workloads of NVIDIA's RuntimeClass that the kubelet says have no sandbox: where the operands started before the
    # handler went (a config rewritten under running pods), only new pods show it. Another class's (Kata, gVisor) are
    # not the toolkit's.
    unsandboxed = [
        (pod, rc)
        for pod in view.workloads
        if (pod.get("status") or {}).get("phase") == "Pending"
        and lacks_sandbox(pod)
        and (rc := runtime_class_of(ctx, pod))
        and _nvidia_class(ctx, rc)
    ]
    # Pods of a class without a sandbox, less those a volume holds (the kubelet makes no sandbox before a pod's volumes
    # are mounted, and says so in an Event). Without that Event a volume only one pod waits for (its ConfigMap, gone)
    # looks the same: one such pod beside pods of a class that have theirs proves nothing of the handler.
    held = {str((e.get("involvedObject") or {}).get("name")) for e in view.events if e.get("reason") in VOLUME_WAITS}
    lacking = [(pod, rc) for pod, rc in (*classed, *unsandboxed) if lacks_sandbox(pod) and name_of(pod) not in held]
    if len(lacking) == 1 and any(sandbox_created(pod) for pod, _ in classed):
        lacking = []
    # A pod of the default runtime on this node that has its sandbox: the runtime itself creates sandboxes here.
    # Looked for once, and only where a pod of a RuntimeClass has none. A workload counts only beside it: without
    # one, the runtime may create no sandbox at all.
    witness = (
        next((p for p in (*view.pods, *view.workloads) if not runtime_class_of(ctx, p) and sandbox_created(p)), None)
        if lacking
        else None
    )
    if witness is not None:
        lines += [
            f"pod {name_of(pod)} (runtimeClassName {rc}) has no sandbox ({READY_TO_START}=False), while pod "
            f"{name_of(witness)} of the default runtime has one"
            for pod, rc in lacking
        ]
    else:
        for pod, rc in classed:
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            if any(
                ((c.get("state") or {}).get("waiting") or {}).get("reason") == "ContainerCreating" for c in statuses
            ):
                lines.append(f"pod {name_of(pod)} (runtimeClassName {rc}) stuck in ContainerCreating")
    if not lines and witness is None:
        lines = _never_started(ctx, view, classed)
    return lines[:3], None


#: The kubelet's waiting reasons for a container it has not created yet (kubelet_pods.go
#: convertToAPIContainerStatuses: ContainerCreating, PodInitializing where the pod has init containers).
NOT_CREATED_YET = ("ContainerCreating", "PodInitializing")


def _first_image(pod: Obj) -> str:
    """The image of the container the kubelet starts first in ``pod``: its first init container's, else its first
    container's."""
    spec = pod.get("spec") or {}
    first = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])][:1]
    return str(first[0].get("image", "")) if first else ""


def _stuck_before_start(pod: Obj) -> bool:
    """Has the kubelet created none of ``pod``'s containers: each waits with its default reason and none ever ran."""
    status = pod.get("status") or {}
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    return bool(statuses) and all(
        not container_ran(cs) and ((cs.get("state") or {}).get("waiting") or {}).get("reason") in NOT_CREATED_YET
        for cs in statuses
    )


def _never_started(ctx: Context, view: NodeView, classed: list[tuple[Obj, str]]) -> list[str]:
    """Pods of a RuntimeClass without a sandbox, where the kubelet writes no PodReadyToStartContainers (before 1.29)
    and no Event is left: every such operand pod on the node (at least two) started no container, while the image
    the first of them needs already ran here under the default runtime. No image pull holds them then, and no one
    pod's volume holds them all: the runtime made none of their sandboxes (`sim.shapes.no_sandbox`, as the real
    kubelet writes it in tests/peers/test_real_node_sandbox.py)."""
    if len(classed) < 2 or not all(_stuck_before_start(pod) for pod, _ in classed):
        return []
    ran: dict[str, str] = {}
    for pod in (*view.pods, *view.workloads):
        if runtime_class_of(ctx, pod) or sandbox_created(pod) is not True:
            continue
        spec = pod.get("spec") or {}
        images = {
            str(c.get("name")): str(c.get("image", ""))
            for c in (*(spec.get("initContainers") or []), *(spec.get("containers") or []))
        }
        status = pod.get("status") or {}
        for cs in (*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])):
            if container_ran(cs):
                ran.setdefault(images.get(str(cs.get("name")), ""), name_of(pod))
    ran.pop("", None)
    pulled = [(pod, rc, image) for pod, rc in classed if (image := _first_image(pod)) in ran]
    if not pulled:
        return []
    return [
        f"pod {name_of(pod)} (runtimeClassName {rc}) started no container, though its first image {image} already ran "
        f"on this node under the default runtime (pod {ran[image]}): it has no sandbox"
        for pod, rc, image in pulled
    ]


def _nvidia_class(ctx: Context, rc: str) -> bool:
    """Is ``rc`` a RuntimeClass of NVIDIA's runtime: the stack's own, or one named for a handler the toolkit writes
    (nvidia, nvidia-cdi, nvidia-legacy)."""
    return rc == ctx.policy.operator.runtime_class or rc.startswith(RUNTIME_CLASS_HANDLER)


def check_toolkit(ctx: Context, view: NodeView) -> Result:
    """Toolkit: the RuntimeClass, the toolkit pod, and whether pods of that RuntimeClass get a sandbox."""
    rc = ctx.policy.operator.runtime_class
    runtime, said_by = runtime_evidence(ctx, view)
    # The operand pods of a class the cluster lacks (most nodes' class is there: no pass over their pods).
    on_rc = (
        [p for p in view.operand_pods.values() if (p.get("spec") or {}).get("runtimeClassName") == rc]
        if rc not in ctx.runtime_classes and "runtimeclasses" not in ctx.snapshot.absent
        else []
    )
    # Where the runtime itself names a handler it lacks while every pod of the class runs, that sandbox failure is
    # what stops pods now: the missing handler first (the class may only be missing from the snapshot).
    handler_first = said_by is not None and all(pod_state(p).ready for p in on_rc)
    if on_rc and not handler_first:
        evidence = [f"runtimeclasses: {', '.join(sorted(ctx.runtime_classes)) or 'none'}"]
        action: Fix | None
        if ctx.stack.policy_resource:
            # The operator creates the RuntimeClass: restart it (it reconciles on start), never a copy by hand.
            action, fix, more = restart_operator(ctx, operator_pod(ctx))
            evidence += more
        else:
            action = Fix(
                FixOp.CREATE,
                "",
                {
                    "apiVersion": "node.k8s.io/v1",
                    "kind": "RuntimeClass",
                    "metadata": {"name": rc},
                    "handler": RUNTIME_CLASS_HANDLER,
                },
            )
            fix = ctx.stack.render(action) + "   # the chart names it and no operator makes it"
        return Result(
            LinkState.BROKEN,
            f"RuntimeClass {rc} missing",
            (
                node_finding(
                    view,
                    fid="toolkit.runtime-class-missing",
                    sev=Severity.ERROR,
                    link="toolkit",
                    cause=f"operand pods ask for RuntimeClass {rc!r}, which does not exist, so none of them can start.",
                    evidence=evidence,
                    fix=fix,
                    action=action,
                ),
            ),
        )
    pod = view.pod(TOOLKIT)
    if runtime:
        tk = pod_state(pod) if pod is not None else None
        log = (
            operand_log(ctx, view=view, operand=TOOLKIT, container=tk.container if tk else "", last="")
            if pod is not None
            else ""
        )
        said = catalog.known_error(log)
        dist = distribution_of(view.node)
        rewrite = (
            ctx.stack.render(Fix.delete_pod(tk.restart_in(ctx.namespace), tk.name))
            + " so the toolkit writes the nvidia runtime there"
            if tk
            else "nvidia-ctk runtime configure --runtime=containerd --config=" + dist.containerd_config
        )
        work = (
            f"set the toolkit's CONTAINERD_CONFIG={dist.containerd_config} and CONTAINERD_SOCKET="
            f"{dist.containerd_socket} (where {dist.name}'s containerd reads its config and listens), "
            f"{rewrite}, then systemctl restart containerd"
        )
        # No toolkit pod on k3s or RKE2: their own start writes the runtime, where it finds the binary.
        found = autodetect_repair(dist) if tk is None else None
        work = found or work
        # A mode handler (nvidia-cdi, ...) k3s's or RKE2's own autodetect never registers.
        mode = next((m for m in map(missing_mode, runtime) if m), "")
        work = mode_handler_repair(dist, mode, node_info(view.node).get("kubeletVersion", "")) or work
        dumped = dumped_config(ctx, view=view, pod=pod, dist=dist) if pod is not None else None
        if dumped is not None:
            work = dumped[0]
        if said_by is not None and said_by.component == "CRI-O":
            work = said_by.fix
        # A Docker node: the handler is Docker's, or its CRI shim takes none.
        work = docker_handler_repair(runtime_scheme(view.node), runtime) or work
        # A Docker node among GPU nodes the operator runs on containerd: no setting of the operator's repairs it.
        work = mixed_runtime_repair(ctx, view) or work
        restart = Fix(FixOp.NODE, view.name, {"action": work, "fact": "runtime"})
        # A toolkit release whose notes say it writes the runtime config where the runtime does not read it
        # (releases.yaml): that release's fix first, the rewrite after it.
        shown = showing("log", said_by.id) if said_by is not None else ()
        release = release_repair(ctx, view=view, pod=pod, operand=TOOLKIT, shown=shown) if shown else None
        return Result(
            LinkState.BROKEN,
            "containerd has no nvidia runtime",
            (
                node_finding(
                    view,
                    fid="toolkit.runtime-not-configured",
                    sev=Severity.ERROR,
                    link="toolkit",
                    cause=f"{said_by.component if said_by else 'containerd'} on this node has no "
                    f"'{mode or 'nvidia'}' runtime handler, so every pod with runtimeClassName "
                    f"{mode or rc} fails to get a sandbox (device plugin, GFD, exporter, validator).",
                    evidence=[
                        *runtime,
                        tk.describe() if tk else "no toolkit pod on this node",
                        *(said.evidence("toolkit log") if said else ()),
                        *(dumped[1] if dumped else ()),
                        *(release.evidence if release else ()),
                    ],
                    fix=f"{release.fix}; otherwise: {ctx.stack.render(restart)}"
                    if release
                    else ctx.stack.render(restart),
                    action=(release.action or restart) if release else restart,
                ),
            ),
        )
    if pod is None:
        missing = unscheduled(ctx, view=view, operand=TOOLKIT, link="toolkit")
        if missing is not None:
            return missing
        # The node's own runtime: assumed until the plugin above says it got no NVML through it.
        no_nvml = plugin_without_nvml(ctx, view)
        if no_nvml is not None:
            return runtime_not_default(ctx, view=view, evidence=no_nvml)
        return Result(LinkState.SKIPPED, "toolkit not managed here (pre-configured runtime assumed)")
    state = pod_state(pod)
    if state.ready:
        validator = view.pod(VALIDATOR)
        checked = pod_state(validator) if validator is not None else None
        if checked is not None and checked.failing and checked.status in NOT_STARTED:
            # The kubelet never started the validator (its image, its config): nothing proves the toolkit and
            # every operand waits for the ready file it would write; the repair is the validator pod's own.
            return not_ready(
                ctx,
                view=view,
                operand=VALIDATOR,
                link="toolkit",
                what="validator pod",
                state=checked,
                log="",
                cause=f"the validator pod is {checked.status} in {checked.container}: the kubelet never started it, so "
                "nothing validates the toolkit and the operands wait for its ready file.",
            )
        done = init_done(validator, "toolkit-validation")
        return Result(LinkState.OK, "toolkit pod Running" + (", toolkit-ready validated" if done else ""))
    log = operand_log(ctx, view=view, operand=TOOLKIT, container=state.container, last=state.last_log)
    stopped = torn_down(ctx, view=view, state=state, log=log)
    if stopped is not None:
        return stopped
    return not_ready(
        ctx,
        view=view,
        operand=TOOLKIT,
        link="toolkit",
        what="toolkit pod",
        state=state,
        log=log,
        cause=f"the container toolkit pod is {state.status}, so containers cannot be given GPUs.",
    )


# -- 3. device plugin --------------------------------------------------------------------------


def runtime_not_default(ctx: Context, *, view: NodeView, evidence: list[str]) -> Result:
    """The toolkit link broken under a device plugin that got no NVML: containerd's default runtime is
    not nvidia on a node whose stack asks for no RuntimeClass (CRI-O's, on a node that runs CRI-O)."""
    if (tegra := tegra_release(ctx, view=view, evidence=evidence)) is not None:
        return tegra
    if (k3s := distribution_default(ctx, view=view, evidence=evidence)) is not None:
        return k3s
    if (unprovisioned := provisioned_without_driver(ctx, view, evidence=evidence)) is not None:
        return Result(LinkState.BROKEN, "aks-engine agent without the NVIDIA driver", (unprovisioned,))
    docker = docker_setup(view.node)
    runtime = "Docker" if docker else "CRI-O" if runtime_scheme(view.node) == "cri-o" else "containerd"
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"make nvidia the node's default runtime ({docker or runtime_setup(view.node, default=True)})"
            + config_version_note(view.node),
            "fact": "runtime",
        },
    )
    # The cluster already has NVIDIA's RuntimeClass: the plugin's pods may ask for it instead (its chart's value).
    classed = next((rc for rc in sorted(ctx.runtime_classes) if _nvidia_class(ctx, rc)), "")
    also = (
        f"   # or run the plugin under RuntimeClass {classed}: its chart's {ctx.stack.runtime_class_value}={classed} "
        f"(runtimeClassName: {classed} in its DaemonSet's pod template)"
        if classed and not docker
        else ""
    )
    return Result(
        LinkState.BROKEN,
        f"{runtime}'s default runtime is not nvidia",
        (
            node_finding(
                view,
                fid="toolkit.runtime-not-default",
                sev=Severity.ERROR,
                link="toolkit",
                cause=f"the device plugin runs without the NVIDIA container runtime ({runtime}'s default runtime is "
                "not nvidia and the plugin asks for no RuntimeClass), so libnvidia-ml is not in its container, it "
                "finds no GPU and announces nothing to the kubelet: the runtime link, under the plugin.",
                evidence=evidence,
                fix=ctx.stack.render(action)
                + (
                    "   # or upgrade its node pool to a node image release whose bootstrap makes nvidia the default "
                    "runtime for this instance type (it does so only for the GPU instance types it lists)"
                    if ctx.stack.node_image
                    else ""
                )
                + also,
                action=action,
            ),
        ),
    )


#: The device plugin's words when its container has no NVML (catalog.yaml), and its idle line after.
NO_NVML = (
    "go-nvlib.nvml-not-loaded",
    "k8s-device-plugin.nvml-init-failed",
    "k8s-device-plugin.nvml-init-failed-exit",
    "k8s-device-plugin.nvml-resource-managers",
)
NO_DEVICES = "k8s-device-plugin.no-devices"


def nvml_evidence(state: PodState, *, nvml: catalog.Match, log: str) -> list[str]:
    """The plugin pod's state, its NVML line and its idle "no devices" line after, as evidence."""
    more = catalog.find(log, NO_DEVICES)
    return [state.describe(), *nvml.evidence(), *(more.evidence() if more else ())]


#: The plugin's settings for which NVIDIA's chart grants its container SYS_ADMIN (deployments/helm/
#: nvidia-device-plugin/templates/_helpers.tpl@v0.16.2, ``requiresCapSysAdmin``): a MIG strategy other than
#: none, or volume-mounts among the device list strategies; read from the container's env (the chart's
#: MIG_STRATEGY, DEVICE_LIST_STRATEGY) or the "Running with config" the plugin logs at start.
SYS_ADMIN_SETTINGS = (
    (re.compile(r'"?migStrategy"?:\s*"(single|mixed)"'), "MIG_STRATEGY", ("single", "mixed")),
    (re.compile(r'"(volume-mounts)"'), "DEVICE_LIST_STRATEGY", ("volume-mounts",)),
)


def needs_sys_admin(pod: Obj, log: str) -> str:
    """What in the plugin's settings needs SYS_ADMIN when its container runs without it (neither privileged nor
    adding SYS_ADMIN); "" when it has it or needs none."""
    container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
    security = container.get("securityContext") or {}
    if security.get("privileged") or "SYS_ADMIN" in ((security.get("capabilities") or {}).get("add") or ()):
        return ""
    env = {str(e.get("name")): str(e.get("value", "")) for e in container.get("env") or []}
    for pattern, key, values in SYS_ADMIN_SETTINGS:
        if any(v in env.get(key, "") for v in values):
            return f"{key}={env[key]}"
        found = pattern.search(log)
        if found:
            return f"{key}={found.group(1)} (the plugin's logged config)"
    return ""


#: The plugin's NVML failure when the devices are not granted to its container (catalog.yaml).
NVML_DEVICES_DENIED = "k8s-device-plugin.nvml-unknown-error"


def devices_denied(ctx: Context, *, view: NodeView, evidence: list[str]) -> Result:
    """The toolkit link broken under a device plugin whose NVML fails with Unknown Error at every start: the
    libraries are injected but the low-level runtime does not grant the GPU devices, so the fix is that
    runtime's setting, never the plugin's registration."""
    runtime = node_info(view.node).get("containerRuntimeVersion", "")
    said = catalog.entry(NVML_DEVICES_DENIED)
    action = Fix(
        FixOp.NODE,
        view.name,
        {"action": said.fix, NOT_SIMULATED: "a low-level runtime's device handling is not simulated"},
    )
    return Result(
        LinkState.BROKEN,
        "the runtime does not grant the GPU devices",
        (
            node_finding(
                view,
                fid="toolkit.devices-denied",
                sev=Severity.ERROR,
                link="toolkit",
                cause="the device plugin's container gets the driver's libraries but not the GPU devices, so NVML "
                "fails with Unknown Error at every start and no GPU is announced: the low-level runtime under the "
                "NVIDIA runtime (runc or crun) does not grant /dev/nvidia*, while the host's driver answers.",
                evidence=[*evidence, f"status.nodeInfo.containerRuntimeVersion: {runtime}" if runtime else ""],
                fix=ctx.stack.render(action),
                action=action,
            ),
        ),
    )


def plugin_without_nvml(ctx: Context, view: NodeView) -> list[str] | None:
    """The evidence that the device plugin runs without the NVIDIA runtime on this node (its log says
    NVML cannot be loaded and the node announces no GPU), None otherwise."""
    pod = view.pod(DEVICE_PLUGIN)
    if pod is None or any(v > 0 for v in node_gpu_resources(view.node).values()):
        return None
    state = pod_state(pod)
    log = operand_log(ctx, view=view, operand=DEVICE_PLUGIN, container=state.container, last=state.last_log)
    nvml = catalog.find(log, *NO_NVML)
    # A plugin whose settings need SYS_ADMIN and that runs without it fails NVML on its own (its link's finding).
    # Nor one that found the library: the runtime gave it NVML (`NVML_FOUND`).
    found = NVML_FOUND in log
    return nvml_evidence(state, nvml=nvml, log=log) if nvml and not found and not needs_sys_admin(pod, log) else None
