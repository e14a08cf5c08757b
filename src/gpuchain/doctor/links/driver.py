"""The driver link: the driver pod (or the host's own driver, seen through the validator and the
labels), NVIDIADriver resources that stopped, kernel and host-driver conflicts, the upgrade controller."""

from __future__ import annotations

import re
from typing import Any

from gpuchain.common.labels import OPERANDS_LABEL
from gpuchain.doctor import catalog
from gpuchain.doctor.context import NO_POLICY, Context, NodeView
from gpuchain.doctor.evidence import hook_refusal, probe_failures
from gpuchain.doctor.links.common import DRIVER_VERSION, GPU_COUNT, Known, Result, node_finding, operand_log, opted_out
from gpuchain.doctor.links.deployed import nfd_worker, unscheduled
from gpuchain.doctor.links.driver_manager import DRIVER_MANAGER, drain_held, mofed_wait
from gpuchain.doctor.links.driver_upgrade import upgrade_held
from gpuchain.doctor.links.failures import IMAGE_PULL
from gpuchain.doctor.links.gsp_firmware import gsp_firmware
from gpuchain.doctor.links.mig_partition import partitioner_failing
from gpuchain.doctor.links.not_ready import known_not_ready, not_ready
from gpuchain.doctor.links.releases import with_release
from gpuchain.doctor.links.sidecar_configs import sidecar_without_configs
from gpuchain.doctor.links.talos_extensions import talos_without_extensions
from gpuchain.doctor.links.toolkit import plugin_without_nvml
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.node import node_info
from gpuchain.doctor.node_image import NodeImage, node_image, os_tag
from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.pods import PodState, init_done, pod_state
from gpuchain.doctor.releases import Release, defects, release_of
from gpuchain.doctor.snapshot import PRODUCT
from gpuchain.doctor.stacks.gpu_operator import UPGRADE_STATE
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj, created_of, name_of, namespace_of
from gpuchain.operator.operands import DRIVER, VALIDATOR, deploy_label
from gpuchain.operator.upgrade import POD_RESTART, VALIDATION

#: The value the GPU Operator gives a node's driver deploy label when it finds the node's own driver loaded; its
#: driver DaemonSet selects only nodes labelled "true".
PRE_INSTALLED = "pre-installed"

#: The lines that say another kernel driver (nouveau, vfio-pci) holds the GPUs (catalog.yaml): a cause of their own,
#: which a kernel other nodes' driver pods run on does not override.
GPUS_HELD_ELSEWHERE = (
    "nvidia-installer.nouveau-in-use",
    "nvidia-installer.kernel-files-missing",
    "kmod.insert-no-device",
    "nvidia-kernel.probe-not-called",
)

#: The repair of a driver container that finds no headers for an RHCOS kernel: OpenShift publishes them in its Driver
#: Toolkit image for each release, which GPU Operator releases since 1.9 build the driver with (gpu-operator
#: api ClusterPolicy UseOpenShiftDriverToolkit); older releases read an entitled RHEL repository.
RHCOS_KERNEL = (
    "upgrade the GPU Operator to a current release (from the OpenShift catalog), which builds the driver with "
    "OpenShift's Driver Toolkit image for the node's RHCOS release, whose kernel headers it carries; or give the "
    "cluster a Red Hat entitlement so the driver container reads the RHEL repositories that publish them"
)

#: NVIDIADriver's default node selector when ``spec.nodeSelector`` is absent: every GPU node
#: (NVIDIA/gpu-operator ``api/nvidia/v1alpha1/nvidiadriver_types.go@v25.10.1``, ``GetNodeSelector``).
NVIDIADRIVER_DEFAULT_SELECTOR = {"nvidia.com/gpu.present": "true"}


def _nvidiadriver_stopped(ctx: Context, view: NodeView) -> Result | None:
    """The NVIDIADrivers selecting this node whose reconcile stopped on an error, as the driver
    link's root: the GPU Operator then makes no driver DaemonSet for them, so no driver pod is here.

    NVIDIA's controller records the stop as ``Error=True`` with the reason and message
    (``internal/conditions/nvidiadriver.go@v25.10.1``). ``ConflictingNodeSelector`` (two NVIDIADrivers
    select the same node) has a repair: remove the newer one; any other reason is quoted."""
    stopped = []
    for driver in sorted(ctx.snapshot.drivers, key=lambda d: (created_of(d), name_of(d))):
        selector = (driver.get("spec") or {}).get("nodeSelector")
        selector = NVIDIADRIVER_DEFAULT_SELECTOR if selector is None else selector
        if any(view.labels.get(k) != v for k, v in selector.items()):
            continue
        conditions = (driver.get("status") or {}).get("conditions") or []
        error = next((c for c in conditions if c.get("type") == "Error" and c.get("status") == "True"), None)
        if error is not None:
            stopped.append((driver, selector, error))
    if not stopped:
        return None
    evidence = [
        f"NVIDIADriver {name_of(d)} (nodeSelector {sel or 'empty: every node'}): Error=True "
        f"{e.get('reason', '')}: {e.get('message', '')}"
        for d, sel, e in stopped
    ]
    conflicting = [d for d, _, e in stopped if e.get("reason") == "ConflictingNodeSelector"]
    if len(conflicting) > 1:
        names = [name_of(d) for d in conflicting]
        newest = names[-1]
        remove = Fix(
            FixOp.DELETE,
            newest,
            {
                "kind": "NVIDIADriver",
                "name": newest,
                "namespace": "",
                NOT_SIMULATED: "the GPU Operator's reconcile of the NVIDIADriver left is not simulated",
            },
        )
        return Result(
            LinkState.BROKEN,
            f"NVIDIADrivers {', '.join(names)} all select this node",
            (
                node_finding(
                    view,
                    fid="driver.nvidiadriver-conflict",
                    sev=Severity.ERROR,
                    link="driver",
                    cause=f"NVIDIADrivers {' and '.join(names)} both select this node, so the GPU Operator deploys the "
                    "driver for none of them (reason ConflictingNodeSelector) and nothing above the driver starts.",
                    evidence=evidence,
                    fix=ctx.stack.render(remove) + "   # the newer one; or give each NVIDIADriver a spec.nodeSelector "
                    "that no other one's nodes match",
                    action=remove,
                ),
            ),
        )
    driver, _, error = stopped[0]
    # The controller's own message, where the catalog knows it, names the spec field and the value that repairs it.
    said = catalog.known_error(str(error.get("message") or ""), "driver")
    return Result(
        LinkState.BROKEN,
        f"NVIDIADriver {name_of(driver)}: {error.get('reason', 'Error')}",
        (
            node_finding(
                view,
                fid="driver.nvidiadriver-error",
                sev=Severity.ERROR,
                link="driver",
                cause=f"the GPU Operator stopped reconciling NVIDIADriver {name_of(driver)} on an error, so it deploys "
                "no driver on this node: "
                + (said.entry.cause if said else "the condition's message names what it could not do."),
                evidence=[*evidence, said.entry.cite()] if said else evidence,
                fix=f"# {said.entry.fix}; the operator reconciles NVIDIADriver {name_of(driver)} again on the change"
                if said
                else f"kubectl edit nvidiadriver {name_of(driver)}   # change the spec field the Error condition's "
                "message names; the operator reconciles again on the edit",
            ),
        ),
    )


#: The package manager and nvidia-installer finding no headers of the running kernel to build the module against
#: (catalog.yaml): the same want of a build for this kernel as the script's own "Could not resolve" line.
NO_HEADERS = ("apt.kernel-headers-missing", "nvidia-installer.kernel-source-missing")
UNLOAD_IN_USE = "driver-container.unload-in-use"
#: Kernel modules loaded beside the driver for GPUDirect that take a reference on ``nvidia`` and that the
#: driver container's ``_unload_driver`` does not remove (gdrdrv) or cannot while in use (nvidia_peermem),
#: by the sidecar container of the driver pod that loads each (NVIDIA/gpu-driver-container
#: ubuntu22.04/nvidia-driver@25.01.21; the GPU Operator's nvidia-gdrcopy-ctr and nvidia-peermem-ctr).
HOLDERS = {"gdrdrv": "gdrcopy", "nvidia_peermem": "peermem"}
#: A line of ``lsmod`` (which the entrypoint prints before "driver is in use"): module, size, use count, users.
LSMOD = re.compile(r"^(?P<module>[\w-]+)\s+\d+\s+(?P<refs>\d+)\s*(?P<users>\S*)$")


def _module_holders(pod: Obj, log: str, gdrcopy: bool) -> list[str]:
    """The GPUDirect modules that hold the NVIDIA module here: named as a user of ``nvidia`` or loaded with
    references in the log's lsmod lines, loaded by a sidecar container of the driver pod, or gdrdrv where
    the policy turns GDRCopy on (its driver pod loads gdrdrv, which the entrypoint never unloads)."""
    held: set[str] = set()
    for line in log.splitlines():
        m = LSMOD.match(line.strip())
        if m is None:
            continue
        users = set(m["users"].split(",")) if m["module"] == "nvidia" else set()
        held |= {h for h in HOLDERS if h in users}
        if m["module"].replace("-", "_") in HOLDERS and int(m["refs"]) > 0:
            held.add(m["module"].replace("-", "_"))
    names = _container_names(pod)
    held |= {module for module, sidecar in HOLDERS.items() if any(sidecar in n for n in names)}
    if gdrcopy:
        held.add("gdrdrv")
    return sorted(held)


def _container_names(pod: Obj) -> list[str]:
    """The names of the pod's containers, from its spec and its status (a dump may carry either)."""
    spec = [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("containers") or []]
    status = [str(c.get("name", "")) for c in (pod.get("status") or {}).get("containerStatuses") or []]
    return list(dict.fromkeys([*spec, *status]))


def _holder_evidence(pod: Obj, log: str) -> list[str]:
    """The lsmod lines that name a holder, and the driver pod's sidecar containers that load one."""
    lines = [
        f"lsmod: {ln.strip()}"
        for ln in log.splitlines()
        if LSMOD.match(ln.strip()) and any(h in ln.replace("-", "_") for h in HOLDERS)
    ]
    names = _container_names(pod)
    sidecars = [n for n in names if any(s in n for s in HOLDERS.values())]
    return lines + ([f"driver pod containers: {', '.join(names)}"] if sidecars else [])


def check_driver(ctx: Context, view: NodeView) -> Result:
    """Driver: the driver pod (or a pre-installed host driver, seen through the validator and GFD)."""
    pod = view.pod(DRIVER)
    validator = view.pod(VALIDATOR)
    version = view.labels.get(DRIVER_VERSION)
    if (
        pod is not None
        and view.labels.get(deploy_label(DRIVER)) == PRE_INSTALLED
        and init_done(validator, "driver-validation")
    ):
        # The operator found a host driver here (and selects no driver pod onto the node); the validator proved it.
        # A driver pod on the node is not what serves its GPUs, whatever it logs.
        return Result(LinkState.OK, f"host driver{f' {version}' if version else ''} (pre-installed, validated)")
    if pod is None:
        label = opted_out(view, DRIVER)
        if view.labels.get(OPERANDS_LABEL) == "false":
            return Result(LinkState.SKIPPED, f"opted out ({OPERANDS_LABEL}=false)")
        stopped = _nvidiadriver_stopped(ctx, view)
        if stopped is not None:
            return stopped
        # The policy wants the driver container here but its DaemonSet places no pod: say why,
        # rather than calling it "driver container off".
        missing = unscheduled(ctx, view=view, operand=DRIVER, link="driver")
        if (
            missing is not None
            and missing.state is LinkState.NOT_JUDGED
            and (init_done(validator, "driver-validation") or version)
        ):
            # Whatever the unknown policy says of the driver container, a driver answers here.
            return Result(
                LinkState.OK, f"host driver{f' {version}' if version else ''} (no driver DaemonSet; {NO_POLICY})"
            )
        if missing is not None:
            return missing
        why = (
            f"label {label}"
            if label
            else f"{ctx.stack.title}: the node image's driver"
            if ctx.stack.host_driver
            else f"spec.driver.enabled=false in ClusterPolicy {ctx.policy_name}"
        )
        if init_done(validator, "driver-validation") or version:
            return Result(LinkState.OK, f"host driver {version or ''} (driver container off: {why})".replace("  ", " "))
        talos = talos_without_extensions(ctx, view)
        if talos is not None:
            return talos
        image = node_image(view.node)
        if validator is None:
            # No validator proves a host driver: where the node's own labels say its cloud gave it none and the
            # plugin above finds no NVML, the image's missing driver is the root, whatever the plugin's hint says.
            no_nvml = plugin_without_nvml(ctx, view) if image is not None and not image.ships_driver else None
            if image is not None and no_nvml is not None:
                return _image_without_driver(ctx, view, image, why, no_nvml)
            if ctx.stack.policy_inferred:
                # The policy's driver.enabled=false was read back from the driver DaemonSet's absence
                # (inferred_policy): with nothing on the node proving a host driver, the link is not judged.
                return Result(
                    LinkState.NOT_JUDGED,
                    f"not judged: no {ctx.ds(DRIVER)} DaemonSet (driver.enabled=false read back from its absence), "
                    f"no validator, no driver label, and {NO_POLICY}",
                )
            return Result(LinkState.OK, f"driver container off ({why}); host driver assumed")
        state = pod_state(validator)
        enable = (
            Fix(FixOp.LABEL_NODE, view.name, {deploy_label(DRIVER): None})
            if label
            else Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"driver": {"enabled": True}}})
        )
        if image is not None and (not image.ships_driver or not image.operator_driver):
            return _image_without_driver(
                ctx, view, image, why, [f"validator {state.describe()} (driver-validation not done)"]
            )
        return Result(
            LinkState.BROKEN,
            "no driver: container off and no host driver answers",
            (
                node_finding(
                    view,
                    fid="driver.missing",
                    sev=Severity.ERROR,
                    link="driver",
                    cause=f"the driver container is off on this node ({why}) and no pre-installed driver answers "
                    "nvidia-smi.",
                    evidence=[
                        f"driver container off: {why}",
                        f"validator {state.describe()} (driver-validation not done)",
                    ],
                    fix=ctx.stack.render(enable) + "   # let the operator install the driver",
                    action=enable,
                ),
            ),
        )
    if partitioner_failing(pod):
        # The installer's driver step completed; only its MIG partitioner (GKE's partition-gpus) fails: mig_partition.
        return Result(LinkState.OK, "driver installed; the installer's MIG partitioner fails (the mig link)")
    state = pod_state(pod)
    held = upgrade_held(ctx, view, failing=state.failing)
    if held is not None:
        return held
    if state.ready:
        return Result(LinkState.OK, f"driver pod Running{f', {version}' if version else ''}")
    if hook_refusal(ctx, view, pod) is not None:
        # The driver container never ran: the toolkit's hook refused it, and the toolkit's link names that.
        return Result(LinkState.NOT_REACHED, "driver container refused by the NVIDIA runtime hook")
    restarting = _driver_upgrade_restart(ctx, view, state) or sidecar_without_configs(ctx, view, pod, state)
    if restarting is not None:
        return restarting
    log = operand_log(
        ctx, view=view, operand=DRIVER, container=state.container or state.waiting_init, last=state.last_log
    )
    # A sidecar that runs but is not ready (nvidia-peermem) says why only in its probe's output.
    log = "\n".join(x for x in (log, *probe_failures(view, pod)) if x)
    kernel_line = catalog.find(log, "driver-container.kernel-unresolved", *NO_HEADERS)
    # A driver container's other instance on the node holds its install lock ("already running"): not a host's
    # driver, so that line takes the catalog's repair (one driver instance per node) below, not this conflict.
    conflict_line = catalog.find(log, UNLOAD_IN_USE)
    evidence = [state.describe(), f"node kernel {view.kernel} (status.nodeInfo.kernelVersion)"]
    others = sorted(ctx.driver_kernels - {view.kernel})
    holders = [name_of(p) for p in view.workloads if pod_gpu_requests(p)]
    if conflict_line and holders:
        drain = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "the drain takes the GPU pods off, the driver container then unloads the module and starts; "
                f"for the next upgrade set spec.driver.upgradePolicy.drain.enable=true in {ctx.policy_ref} (or the "
                "driver manager's ENABLE_GPU_POD_EVICTION) so it evicts them itself",
                "drain": True,
                NOT_SIMULATED: "a module held by running pods is not simulated",
            },
        )
        return Result(
            LinkState.BROKEN,
            "driver cannot unload: GPU pods hold it",
            (
                node_finding(
                    view,
                    fid="driver.in-use",
                    sev=Severity.ERROR,
                    link="driver",
                    cause="the driver container must unload the loaded NVIDIA module to (re)install, and GPU pods on "
                    "this node still hold it, so it cannot; nothing above the driver starts until they are gone.",
                    evidence=[
                        state.describe(),
                        *conflict_line.evidence(),
                        f"GPU pods on {view.name}: {', '.join(holders[:5])}",
                    ],
                    fix=ctx.stack.render(drain),
                    action=drain,
                ),
            ),
        )
    # NVIDIA/gpu-operator ClusterPolicy spec.gdrcopy.enabled (api/nvidia/v1/clusterpolicy_types.go GDRCopySpec).
    gdrcopy = bool((((ctx.policy_obj or {}).get("spec") or {}).get("gdrcopy") or {}).get("enabled"))
    held_by = _module_holders(pod, log, gdrcopy) if conflict_line else []
    if conflict_line and held_by:
        restart = Fix.delete_pod(
            (namespace_of(pod) or ctx.namespace),
            name_of(pod),
            **{NOT_SIMULATED: "a module held by GPUDirect is not simulated"},
        )
        return Result(
            LinkState.BROKEN,
            f"driver cannot unload: {', '.join(held_by)} holds it",
            (
                node_finding(
                    view,
                    fid="driver.module-held",
                    sev=Severity.ERROR,
                    link="driver",
                    cause="the driver container must unload the NVIDIA module to (re)install, and "
                    f"{' and '.join(held_by)} "
                    "(loaded beside it for GPUDirect) still holds it, so it cannot; this is not a host's driver.",
                    evidence=[
                        state.describe(),
                        *conflict_line.evidence(),
                        *_holder_evidence(pod, log),
                        f"spec.gdrcopy.enabled=true in {ctx.policy_ref}" if gdrcopy else "",
                    ],
                    fix=ctx.stack.render(restart)
                    + "   # the whole pod, so its sidecar lets go; if the module stays loaded: "
                    f"rmmod {' '.join(held_by)} on the node first",
                    action=restart,
                ),
            ),
        )
    image = node_image(view.node)
    explained = state.status in IMAGE_PULL or state.unschedulable or catalog.known_error(log) is not None
    if (
        image is not None
        and ctx.policy_obj is not None
        and (image.ships_driver or not image.operator_driver)
        and (conflict_line or not explained)
    ):
        return _over_image_driver(
            ctx, view, image, [state.describe(), *(conflict_line.evidence() if conflict_line else said_nothing(log))]
        )
    if conflict_line:
        off_here = Fix(FixOp.LABEL_NODE, view.name, {deploy_label(DRIVER): "false"})
        return Result(
            LinkState.BROKEN,
            "driver container fights a pre-installed host driver",
            (
                node_finding(
                    view,
                    fid="driver.host-driver-conflict",
                    sev=Severity.ERROR,
                    link="driver",
                    cause="the operator's driver container was started on a node whose host already has an NVIDIA "
                    "driver loaded, and it cannot unload it.",
                    evidence=[state.describe(), *conflict_line.evidence()],
                    fix=ctx.stack.render(off_here)
                    + "   # use the host driver here, not the operator's driver container; or for the whole "
                    "cluster (driver.enabled=false): "
                    + ctx.stack.render(
                        Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"driver": {"enabled": False}}})
                    )
                    + _host_driver_off(ctx, view),
                    action=off_here,
                ),
            ),
        )
    if (
        state.failing
        and state.status not in IMAGE_PULL
        and (
            kernel_line
            or (
                others
                and view.kernel not in ctx.driver_kernels
                and catalog.find(log, *GPUS_HELD_ELSEWHERE) is None
                # the driver container's own log naming its failure outranks the guess from other kernels
                and ((said := catalog.known_error(log, "driver")) is None or said.entry.link != "driver")
            )
        )
    ):
        if others:
            evidence.append(f"driver pods run ready on kernel {', '.join(others)}")
        if kernel_line:
            evidence += kernel_line.evidence()
        # The driver container builds nvidia.ko against the running kernel's headers from the OS repositories it
        # reads (gpu-driver-container ubuntu22.04/nvidia-driver _resolve_kernel_version: apt-cache show
        # linux-headers-$KERNEL_VERSION; rhel8: yum list kernel-headers@25.01.21), and says "Could not resolve Linux
        # kernel version" when they publish none: a custom kernel (FIPS, elrepo's kernel-ml, a realtime build).
        good = f"kernel {others[0]}" if others else "a kernel whose headers its OS repositories publish"
        reimage = Fix(
            FixOp.NODE,
            view.name,
            {"action": f"reimage it with {good}", "fact": f"kernel:{others[0]}" if others else ""},
        )
        # RHCOS's kernel is the OpenShift release's, not the node's to choose: the headers come from OpenShift's
        # Driver Toolkit image for that release (or an entitled RHEL repository).
        rhcos = os_tag(view.node).startswith("rhcos")
        headers = (
            f"; its headers (linux-headers-{view.kernel} / kernel-headers and kernel-devel {view.kernel}) are not in "
            "the OS repositories the driver container reads"
            if kernel_line
            else ""
        )
        return Result(
            LinkState.BROKEN,
            f"no driver build for kernel {view.kernel}",
            (
                node_finding(
                    view,
                    fid="driver.kernel-mismatch",
                    sev=Severity.ERROR,
                    link="driver",
                    cause=f"the node runs kernel {view.kernel} and the driver image {ctx.policy.driver.image_ref()} "
                    f"has no build for it{headers}, so nvidia.ko never loads and nothing above the driver can start.",
                    evidence=evidence,
                    fix=(f"# {RHCOS_KERNEL}; " if rhcos else ctx.stack.render(reimage) + "   # ")
                    + "or install the NVIDIA driver on the host, built there for "
                    f"this kernel from its headers (kernel-devel / linux-headers {view.kernel}), and set "
                    f"spec.driver.enabled=false in {ctx.policy_ref}; or set spec.driver.version of {ctx.policy_ref} "
                    f"to a release built for {view.kernel}",
                    action=None if rhcos else reimage,
                ),
            ),
        )
    stale = (
        _stale_os_label(ctx, view, pod)
        or _upgrade_done_yet_failing(ctx, view, state, holders)
        or gsp_firmware(ctx, view=view, pod=pod, log=log)
        or mofed_wait(ctx, state=state, log=log)
        or drain_held(ctx, view=view, state=state, pod=pod, log=log)
    )
    if stale is not None:
        stale = with_release(ctx, view=view, pod=pod, operand=DRIVER, known=stale, log=log)
        return known_not_ready(view, link="driver", what="driver pod", state=state, known=stale)
    return not_ready(
        ctx,
        view=view,
        operand=DRIVER,
        link="driver",
        what="driver pod",
        state=state,
        log=log,
        cause=f"the driver pod is {state.status}, so the kernel module is not loaded.",
    )


def said_nothing(log: str) -> list[str]:
    """A failing container's last word for evidence: its last error line, or that it left none."""
    line = catalog.unknown_error(log)
    return [f"unrecognised: {line}"] if line else ["no log line collected"]


def _all_on_image_drivers(ctx: Context) -> bool:
    """Is every node with a driver pod a managed image whose driver is not the operator's to install? (Once per
    diagnosis: every failing node asks, and the answer reads every node.)"""
    known = ctx.memo.get("all_on_image_drivers")
    if not isinstance(known, bool):
        known = ctx.memo["all_on_image_drivers"] = all(
            (seen := node_image(v.node)) is not None and (seen.ships_driver or not seen.operator_driver)
            for v in ctx.views
            if v.pod(DRIVER) is not None
        )
    return known


def _over_image_driver(ctx: Context, view: NodeView, image: NodeImage, evidence: list[Any]) -> Result:
    """The operator's driver container fails on a managed node image that brings its own driver (or on an OS
    NVIDIA builds no driver container for): the two are mutually exclusive, and the image's driver is the one to
    keep. The whole policy turns its driver off where every node with a driver pod is such an image; else this
    node opts out."""
    ships = image.ships_driver
    action = (
        Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": image.keep})
        if _all_on_image_drivers(ctx)
        else Fix(FixOp.LABEL_NODE, view.name, {deploy_label(DRIVER): "false"})
    )
    values = [
        f"{k}.{kk}={str(vv).lower() if isinstance(vv, bool) else vv}"
        for k, v in image.keep.items()
        for kk, vv in v.items()
    ]
    if ships:
        cause = (
            f"the GPU Operator's driver container (spec.driver.enabled=true) runs on the {image.cloud} node image, "
            f"which installs its own NVIDIA driver, so it cannot install its own there and its pod fails; "
            f"{image.cloud}'s driver and the operator's are mutually exclusive, and the image's is the one to keep."
        )
        then = f"the {image.cloud} node image's driver serves the GPUs" + (
            f"; or, to keep the operator's driver, {image.without}" if image.without else ""
        )
    else:
        cause = (
            f"the GPU Operator's driver container (spec.driver.enabled=true) runs on {image.cloud}'s "
            f"{os_tag(view.node) or 'OS'}, for which NVIDIA publishes no driver container, so it cannot install a "
            f"driver there and its pod fails; such nodes get their driver from {image.cloud}."
        )
        then = f"then give the nodes {image.cloud}'s driver: {image.install}"
    return Result(
        LinkState.BROKEN,
        f"driver container over the {image.cloud} image's driver",
        (
            node_finding(
                view,
                fid="driver.host-driver-conflict",
                sev=Severity.ERROR,
                link="driver",
                cause=cause,
                evidence=[*evidence, *image.said],
                fix=ctx.stack.render(action)
                + f"   # {', '.join(values)} (helm: --set {' --set '.join(values)}); {then}",
                action=action,
            ),
        ),
    )


def _host_driver_off(ctx: Context, view: NodeView) -> str:
    """The other repair of a driver container over a host driver: the host's taken off. On an NVSwitch board (eight
    SXM GPUs) the host driver most often came with Fabric Manager's meta package cuda-drivers-fabricmanager-<branch>,
    which depends on the driver; nvidia-fabricmanager-<branch> alone depends on none (NVIDIA/gpu-operator#163)."""
    more = "; or, to keep the operator's driver, remove the host's NVIDIA driver packages and reboot"
    product, count = view.labels.get(PRODUCT, ""), view.labels.get(GPU_COUNT, "")
    if "SXM" not in product or not count.isdigit() or int(count) < NVSWITCH_GPUS:
        return more
    branch = (ctx.policy.driver.version or "").split(".")[0] if ctx.policy_obj is not None else ""
    branch = branch if branch.isdigit() else "<branch>"
    return (
        f"{more} (an NVSwitch node's Fabric Manager: remove the cuda-drivers-fabricmanager-{branch} meta package, "
        f"which brings the driver, and install nvidia-fabricmanager-{branch} alone, which depends on no driver)"
    )


#: The GPUs of an HGX board whose SXM GPUs talk through NVSwitch, the systems Fabric Manager runs on.
NVSWITCH_GPUS = 8


def _image_without_driver(ctx: Context, view: NodeView, image: NodeImage, why: str, seen: list[str]) -> Result:
    """The driver container is off while the node's managed image brings no driver (or runs an OS NVIDIA builds no
    driver container for, so turning it on would not help): the cloud's own install is the repair. ``seen`` is
    what shows no driver answers (the validator's driver validation not done, the plugin finding no NVML)."""
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": image.install,
            NOT_SIMULATED: "a managed node image's driver is a fact of the node no scenario names",
        },
    )
    enable = (
        f"; or turn the operator's driver on (spec.driver.enabled=true in {ctx.policy_ref})"
        if image.operator_driver and ctx.policy_obj is not None
        else ""
    )
    return Result(
        LinkState.BROKEN,
        f"no driver: container off, the {image.cloud} image installs none",
        (
            node_finding(
                view,
                fid="driver.missing",
                sev=Severity.ERROR,
                link="driver",
                cause=f"the driver container is off on this node ({why}) and its {image.cloud} node image installs no "
                "NVIDIA driver, so no driver answers nvidia-smi.",
                evidence=[f"driver container off: {why}", *image.said, *seen],
                fix=ctx.stack.render(action) + enable,
                action=action,
            ),
        ),
    )


#: NFD's label of the RHCOS build a node runs, which the GPU Operator names and selects its per-OS driver
#: DaemonSets by on OpenShift (NVIDIA/gpu-operator controllers/object_controls.go@v25.3.0,
#: nfdOSTreeVersionLabelKey), and the build as RHCOS writes it in the node's osImage.
OSTREE_VERSION = "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"
RHCOS_BUILD = re.compile(r"\b(\d+\.\d+\.\d{8,12}-\d+)\b")
#: The driver upgrade controller's node states (NVIDIA/k8s-operator-libs pkg/upgrade/consts.go:
#: "UpgradeStateDone is set when driver pod is up to date and running on the node", UpgradeStateUpgradeRequired).
UPGRADE_DONE, UPGRADE_REQUIRED = "upgrade-done", "upgrade-required"


def _stale_os_label(ctx: Context, view: NodeView, pod: Obj) -> Known | None:
    """The node runs another RHCOS build than NFD's OSTREE_VERSION label says, so the operator keeps the
    driver DaemonSet (and driver toolkit image) of the old build on it: NFD must label the node again."""
    labelled = view.labels.get(OSTREE_VERSION)
    running = RHCOS_BUILD.search(str(node_info(view.node).get("osImage", "")))
    if not labelled or running is None or running.group(1) == labelled:
        return None
    worker = next(
        (
            p
            for p in ctx.snapshot.pods
            if (p.get("spec") or {}).get("nodeName") == view.name
            and any(nfd_worker(d) and name_of(d) == owner_ds(p) for d in ctx.snapshot.daemonsets)
        ),
        None,
    )
    relabel: Fix | None = None
    if worker is not None:
        ns = str((worker.get("metadata") or {}).get("namespace") or "")
        relabel = Fix.delete_pod(ns, name_of(worker))
        fix = ctx.stack.render(relabel) + "   # the nfd-worker on the node starts again and relabels OSTREE_VERSION"
    else:
        fix = (
            f"restart the Node Feature Discovery worker on {view.name} (node-feature-discovery) so it labels "
            f"{OSTREE_VERSION}={running.group(1)}"
        )
    return Known(
        cause=f"the node runs RHCOS {running.group(1)} but NFD's label {OSTREE_VERSION} still says {labelled}, so the "
        f"operator runs the driver DaemonSet built for {labelled} here ({owner_ds(pod)}), whose driver does not fit "
        "the running kernel; the label, not the driver, is wrong.",
        evidence=(f"osImage {node_info(view.node).get('osImage')}", f"label {OSTREE_VERSION}={labelled}"),
        action=relabel,
        fix=fix,
    )


def _driver_upgrade_restart(ctx: Context, view: NodeView, state: PodState) -> Result | None:
    """A driver pod that is not ready because the upgrade controller is restarting it: the node's
    ``nvidia.com/gpu-driver-upgrade-state`` says the old pod was deleted on purpose (pod-restart-required)
    or the new one is being validated (validation-required), and the pod is on its way, not failing.
    That is the upgrade at work, information; the links above wait for it. A pod that fails, or a node
    the controller marks upgrade-failed, is judged as any other."""
    upgrading = view.labels.get(UPGRADE_STATE, "")
    if upgrading not in (POD_RESTART, VALIDATION) or state.failing:
        return None
    finding = node_finding(
        view,
        fid="driver.upgrading",
        sev=Severity.INFO,
        link="driver",
        cause=f"the driver upgrade is restarting this node's driver ({UPGRADE_STATE}={upgrading}); GPU work on the "
        "node resumes once the new driver validates and the controller uncordons it.",
        evidence=[f"label {UPGRADE_STATE}={upgrading}", state.describe()],
        fix=f"# nothing to do: the upgrade goes on by itself (kubectl get nodes -L {UPGRADE_STATE}); if the node "
        "stays in this state past spec.driver.upgradePolicy.podDeletion.timeoutSeconds, the controller marks it "
        "upgrade-failed and the doctor judges the driver pod then",
    )
    return Result(LinkState.BROKEN, f"driver upgrade in progress ({upgrading})", (finding,))


def _upgrade_done_yet_failing(ctx: Context, view: NodeView, state: PodState, holders: list[str]) -> Known | None:
    """The driver manager fails on a node the upgrade controller marks upgrade-done while GPU pods hold the
    driver: the controller evicts them only from upgrade-required, so nothing frees the node."""
    if view.labels.get(UPGRADE_STATE) != UPGRADE_DONE or state.container != DRIVER_MANAGER or not holders:
        return None
    again = Fix(FixOp.LABEL_NODE, view.name, {UPGRADE_STATE: UPGRADE_REQUIRED})
    return Known(
        cause=f"the driver manager fails on this node while GPU pods hold the driver, and the upgrade controller marks "
        f"the node {UPGRADE_DONE}, so it never evicts them (it drains only from {UPGRADE_REQUIRED}).",
        evidence=(f"label {UPGRADE_STATE}={UPGRADE_DONE}", f"GPU pods on {view.name}: {', '.join(holders[:5])}"),
        action=again,
        fix=ctx.stack.render(again) + "   # the upgrade controller then evicts the GPU pods and the driver installs",
    )


def skew_target(versions: dict[str, list[str]], majority: str) -> tuple[str, tuple[str, ...]]:
    """The driver release a version skew aligns the nodes on (``versions``: each driver version the nodes run, and
    the nodes), and the evidence of the release it skipped: the majority's, unless the release notes know it as a
    release to move off (releases.yaml, component driver); then the newest of the releases the nodes run that none
    knows and the release the notes name as the fix (NVIDIA's recommendation for the defect). Aligning every node on
    a release whose known issue takes its GPU pods would spread the fault the skew only had on some."""
    known = [d for d in defects() if d.component == "driver"]
    bad = next((d for d in known if d.covers(majority)), None)
    if bad is None:
        return majority, ()
    skipped = (f"driver {majority} skipped: {bad.cause}", bad.cite())
    clean = [v for v in [*versions, bad.fixed_in] if release_of(v) is not None and not any(d.covers(v) for d in known)]
    if not clean:
        return majority, skipped
    return max(clean, key=lambda v: release_of(v) or Release(numbers=())), skipped
