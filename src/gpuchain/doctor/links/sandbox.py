"""GPUs for virtual machines: the GPU Operator's sandbox chain, walked on a node whose workload is a VM's.

NVIDIA's GPU Operator gives a node one GPU workload (NVIDIA/gpu-operator controllers/state_manager.go@v26.7.0): its
label ``nvidia.com/gpu.workload.config`` (``container``, ``vm-passthrough``, ``vm-vgpu``), else the ClusterPolicy's
``sandboxWorkloads.defaultWorkload``; with ``sandboxWorkloads.enabled`` false every node is ``container``. A VM node
gets the sandbox operands' deploy labels and loses the container operands' (``gpuStateLabels``), so no driver, toolkit,
device plugin, GFD or exporter runs there by design. Its chain, bottom-up, as the operands' assets wait on each other:

- passthrough: ``nvidia-vfio-manager`` binds every GPU to vfio-pci (``vfio-manage bind --all``), the sandbox validator's
  ``vfio-pci-validation`` checks every GPU is bound and writes ``vfio-pci-ready``, and the sandbox device plugin waits
  for that file;
- vGPU: ``nvidia-vgpu-manager-daemonset`` loads the vGPU manager and enables the GPUs' SR-IOV virtual functions
  (NVIDIA/gpu-driver-container vgpu-manager/*/nvidia-driver ``_enable_vfs``: ``sriov-manage -e ALL``), the validator's
  ``vgpu-manager-validation`` runs nvidia-smi in the manager's root, waits for the VFs (or mdev parents) and writes
  ``vgpu-manager-ready`` (``host-vgpu-manager-ready`` for a manager installed on the host), the vGPU device manager
  waits for it and creates the vGPU devices the node's ``nvidia.com/vgpu.config`` names, the validator's
  ``vgpu-devices-validation`` waits for them and writes ``vgpu-devices-ready``, and the sandbox device plugin waits for
  that file (assets/state-sandbox-validation, state-vgpu-device-manager, state-sandbox-device-plugin @v26.7.0;
  cmd/nvidia-validator/main.go).

The sandbox device plugin (NVIDIA/kubevirt-gpu-device-plugin, README) announces each GPU model or vGPU type as a
resource of its own name, e.g. ``nvidia.com/GA102GL_A10`` or ``nvidia.com/NVIDIA_A10-4Q``, never ``nvidia.com/gpu``.
Links are the project's: the vfio and vGPU managers are the node's driver layer, the vGPU device manager and the
sandbox device plugin its device-plugin layer; the validator's failing validation names the layer it validates, and a
validator that does not run breaks the layer that waits for its files (the device layer).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from gpuchain.common.labels import DEPLOY_PREFIX, OPERANDS_LABEL
from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding, placement_fix, said_in
from gpuchain.doctor.links.operand_tolerations import manifest_note
from gpuchain.doctor.links.vm_plugin import kubevirt_plugin, vm_plugin_walk
from gpuchain.doctor.links.vm_resources import passthrough_finding
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Link, LinkState, NodeChain, Severity
from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.placement import blocker
from gpuchain.doctor.pods import PodState, pod_state
from gpuchain.doctor.stacks.base import daemonsets_in
from gpuchain.doctor.stacks.sandbox import (
    DAEMONSETS,
    SANDBOX_WORKLOADS,
    VGPU_CONFIG,
    VGPU_CONFIG_STATE,
    WORKLOAD_CONFIG,
)
from gpuchain.kube.objects import Obj, name_of, namespace_of

PASSTHROUGH, VGPU = SANDBOX_WORKLOADS
#: The host's vGPU manager version, which the operator reads as a vGPU node with the manager on the host.
HOST_VGPU_DRIVER = "nvidia.com/vgpu.host-driver-version"


@dataclass(frozen=True, kw_only=True)
class SandboxOperand:
    """One operand of the sandbox chain as the operator renders it."""

    name: str  #: its deploy label's suffix (nvidia.com/gpu.deploy.<name>)
    link: str  #: the project's link it is a part of
    switch: str  #: the ClusterPolicy block whose ``enabled`` deploys it
    workloads: tuple[str, ...]

    @property
    def daemonset(self) -> str:
        """Its DaemonSet's name."""
        return next(ds for ds, name in DAEMONSETS.items() if name == self.name)

    @property
    def deploy(self) -> str:
        """Its deploy label."""
        return DEPLOY_PREFIX + self.name


VFIO_MANAGER = SandboxOperand(name="vfio-manager", link="driver", switch="vfioManager", workloads=(PASSTHROUGH,))
VGPU_MANAGER = SandboxOperand(name="vgpu-manager", link="driver", switch="vgpuManager", workloads=(VGPU,))
VALIDATOR = SandboxOperand(
    name="sandbox-validator", link="device-plugin", switch="sandboxWorkloads", workloads=SANDBOX_WORKLOADS
)
VGPU_DEVICE_MANAGER = SandboxOperand(
    name="vgpu-device-manager", link="mig", switch="vgpuDeviceManager", workloads=(VGPU,)
)
DEVICE_PLUGIN = SandboxOperand(
    name="sandbox-device-plugin", link="device-plugin", switch="sandboxDevicePlugin", workloads=SANDBOX_WORKLOADS
)
#: In ``kata`` mode a passthrough node gets the Kata device plugin instead (getEffectiveStateLabels).
KATA_DEVICE_PLUGIN = SandboxOperand(
    name="kata-sandbox-device-plugin", link="device-plugin", switch="kataSandboxDevicePlugin", workloads=(PASSTHROUGH,)
)
OPERANDS = (VFIO_MANAGER, VGPU_MANAGER, VALIDATOR, VGPU_DEVICE_MANAGER, DEVICE_PLUGIN, KATA_DEVICE_PLUGIN)
#: The sandbox validator's validations (its init containers) and the operand each one proves.
VALIDATES = {
    "vfio-pci-validation": VFIO_MANAGER,
    "vgpu-manager-validation": VGPU_MANAGER,
    "vgpu-devices-validation": VGPU_DEVICE_MANAGER,
}
#: What the validator's vgpu-manager validation logs while the manager runs and its virtual functions (or mdev
#: parents) are not there: v26.3's waitForVFs ("Waiting for VFs to be available...", "Waiting for VFs: %d/%d enabled
#: across %d GPU(s)", "vGPU Manager VFs not ready: %w"), v26.7's waitForParentDevices ("Waiting for parent devices to
#: be available...", "not all VFs have been created. %d/%d enabled across %d GPU(s)", "found 0 mdev parent devices",
#: "vGPU Manager parent devices not ready: %w") (NVIDIA/gpu-operator cmd/nvidia-validator/main.go).
NO_VFS = re.compile(
    r"waiting for (VFs|parent devices)|VFs not ready|not all VFs have been created|found 0 mdev parent devices"
    r"|parent devices not ready",
    re.IGNORECASE,
)
#: What the vgpu-manager validation prints while nvidia-smi fails in the manager's root (runCommandWithWait's
#: "command failed, retrying after %d seconds", VGPUManager.validate's "vGPU Manager is not ready").
NO_SMI = re.compile(r"command failed, retrying|vGPU Manager is not ready", re.IGNORECASE)
#: The vfio-pci validation's refusal (VfioPCI.runValidation): a GPU still bound to another driver.
#: The VFIO manager's write to vfio-pci's bind file refused with EINVAL (catalog.yaml): vfio-manage.sh's words under
#: bash, and the Go vfio-manage's of k8s-driver-manager.
BIND_REFUSED = ("vfio-manager.bind-refused", "vfio-manage.bind-refused")
NOT_VFIO = re.compile(r"device not bound to 'vfio-pci'; device: (\S+) driver: '([^']*)'")
#: The links the container chain walks that a VM node does not use.
UNUSED = ("toolkit", "gfd", "exporter", "mig")


def policy_block(policy: Obj | None, key: str) -> dict[str, Any]:
    """A block of the ClusterPolicy's spec as written. gpuchain's own policy model refuses sandbox workloads (they are
    NVIDIA's operator's alone), so the checks read NVIDIA's keys from the object, not from the parsed spec."""
    value = ((policy or {}).get("spec") or {}).get(key)
    return value if isinstance(value, dict) else {}


def switched_on(ctx: Context, key: str) -> bool | None:
    """Whether the ClusterPolicy turns block ``key`` on; NVIDIA's sandbox switches are off unless set
    (api/nvidia/v1/clusterpolicy_types.go IsEnabled @v26.7.0). None where the source has no policy."""
    if ctx.policy_obj is None:
        return None
    return policy_block(ctx.policy_obj, key).get("enabled") is True


def workload_of(ctx: Context, view: NodeView) -> str | None:
    """The node's VM workload (vm-passthrough, vm-vgpu), None for a container node. A label the operator honours only
    with sandbox workloads on: the policy's switch, or, where the source has no policy, the sandbox operands' deploy
    labels the operator gave the node."""
    if view.labels.get(OPERANDS_LABEL) == "false":
        return None  # the operator removes every deploy label: node.opted-out says so
    config = view.labels.get(WORKLOAD_CONFIG)
    on = switched_on(ctx, "sandboxWorkloads")
    if config is None and on:
        config = policy_block(ctx.policy_obj, "sandboxWorkloads").get("defaultWorkload")
    if config not in SANDBOX_WORKLOADS:
        return None
    if on or any(op.deploy in view.labels for op in OPERANDS):
        return str(config)
    return None


def serves_vms(ctx: Context, view: NodeView) -> bool:
    """Whether the node's GPUs go to VMs (the operator's sandbox workloads, or a KubeVirt GPU plugin of its own): it
    needs no container GPU stack."""
    return workload_of(ctx, view) is not None or kubevirt_plugin(view) is not None


def _chain(ctx: Context, workload: str) -> tuple[SandboxOperand, ...]:
    kata = policy_block(ctx.policy_obj, "sandboxWorkloads").get("mode") == "kata"
    plugin = KATA_DEVICE_PLUGIN if kata and workload == PASSTHROUGH else DEVICE_PLUGIN
    below = (VFIO_MANAGER, VGPU_MANAGER, VALIDATOR, VGPU_DEVICE_MANAGER)
    return (*(op for op in below if workload in op.workloads), plugin)


def _pods(ctx: Context, view: NodeView) -> dict[str, Obj]:
    """The sandbox operands' pods on the node (the walk's index keeps them with the node's other pods), by operand."""
    out = {}
    for pod in view.workloads:
        owner = owner_ds(pod) if namespace_of(pod) == ctx.namespace else ""
        if owner in DAEMONSETS:
            out[DAEMONSETS[owner]] = pod
    return out


def advertised(view: NodeView) -> dict[str, str]:
    """The resources the sandbox device plugin announces on the node: ``nvidia.com/<model or vGPU type>``."""
    capacity = (view.node.get("status") or {}).get("capacity") or {}
    return {
        str(k): str(v)
        for k, v in capacity.items()
        if str(k).startswith("nvidia.com/")
        and not str(k).startswith(("nvidia.com/gpu", "nvidia.com/mig-"))
        and str(v) not in ("0", "")
    }


@dataclass(frozen=True, kw_only=True)
class _Walk:
    """One VM node's walk: what every operand's check reads (the node, its workload, its chain, its sandbox pods)
    and the findings they word, kept together so each check is one method of the state it shares."""

    ctx: Context
    view: NodeView
    workload: str
    chain: tuple[SandboxOperand, ...]
    pods: dict[str, Obj]

    def finding(
        self, *, fid: str, link: str, cause: str, evidence: list[str], fix: Fix | str, note: str = ""
    ) -> Finding:
        """A root-candidate finding on the node, its workload first in the evidence (the reason the walk is this)."""
        text = fix if isinstance(fix, str) else self.ctx.stack.render(fix)
        return node_finding(
            self.view,
            fid=fid,
            sev=Severity.ERROR,
            link=link,
            cause=cause,
            evidence=[f"label {WORKLOAD_CONFIG}={self.view.labels.get(WORKLOAD_CONFIG, self.workload)}", *evidence],
            fix=text + (f"   # {note}" if note else ""),
            action=None if isinstance(fix, str) else fix,
        )

    def log(self, pod: Obj, st: PodState) -> str:
        """The blocking container's last lines: its status's, else the log the gather step read."""
        return st.last_log or self.ctx.log(pod, st.container)

    def restart(self, op: SandboxOperand, why: str) -> Fix:
        """Delete ``op``'s pod on the node: its DaemonSet starts it again and its start does its work again."""
        pod = self.pods.get(op.name)
        name = name_of(pod) if pod else f"<{op.daemonset} pod on {self.view.name}>"
        return Fix.delete_pod(self.ctx.namespace, name, **{NOT_SIMULATED: why})

    def missing(self, op: SandboxOperand) -> Finding:
        """``op`` runs no pod on the node: its deploy label is off, the operator never set it, its DaemonSet is
        switched off in the policy, or the DaemonSet does not place it."""
        view, label = self.view, self.view.labels.get(op.deploy)
        waiting = "the operands above it wait for it" if op is VALIDATOR else "the node's VMs get no GPU"
        if label not in (None, "true"):
            # Switched off on the node (a pause an operand's manager left, or a hand-set value): the operator keeps
            # any non-empty value (addGPUStateLabels), so nothing but a label puts them back. Every sandbox operand
            # of this workload that is off goes back on at once.
            off = {o.deploy: "true" for o in self.chain if view.labels.get(o.deploy) not in (None, "true")}
            return self.finding(
                fid="sandbox.operand-off",
                link=op.link,
                cause=f"the {op.name} does not run on this {self.workload} node: its deploy label is "
                f"{label!r}, not 'true', and the operator keeps a value it finds there, so {waiting}.",
                evidence=[f"label {k}={view.labels.get(k)}" for k in off],
                fix=Fix(FixOp.LABEL_NODE, view.name, off),
            )
        if label is None:
            if switched_on(self.ctx, "sandboxWorkloads") is False:
                action = Fix(
                    FixOp.PATCH_POLICY, self.ctx.policy_name, {"spec": {"sandboxWorkloads": {"enabled": True}}}
                )
                cause = "sandboxWorkloads.enabled is false in the ClusterPolicy, so the operator treats every node as "
                cause += f"a container node and deploys no {op.name} here"
                return self.finding(fid="sandbox.disabled", link=op.link, cause=cause + ".", evidence=[], fix=action)
            action = Fix(FixOp.LABEL_NODE, view.name, {op.deploy: "true"})
            return self.finding(
                fid="sandbox.operand-off",
                link=op.link,
                cause=f"the node has no {op.deploy} label, so the {op.name} does not run and {waiting}.",
                evidence=[f"no label {op.deploy}"],
                fix=action,
            )
        ds = daemonsets_in(self.ctx.snapshot, self.ctx.namespace).get(op.daemonset)
        if ds is None:
            action = Fix(FixOp.PATCH_POLICY, self.ctx.policy_name, {"spec": {op.switch: {"enabled": True}}})
            return self.finding(
                fid="sandbox.operand-disabled",
                link=op.link,
                cause=f"no DaemonSet {op.daemonset} in {self.ctx.namespace}: the ClusterPolicy does not deploy the "
                f"{op.name} ({op.switch}.enabled), so {waiting}.",
                evidence=[f"label {op.deploy}=true", f"no DaemonSet {self.ctx.namespace}/{op.daemonset}"],
                fix=action if self.ctx.policy_obj is not None else f"kubectl get {self.ctx.policy_ref} -o yaml",
            )
        block = blocker(ds, view.node)
        fix: Fix | str = (
            placement_fix(self.ctx, view=view, ds=ds, block=block)
            if block is not None
            else f"kubectl -n {self.ctx.namespace} describe ds {op.daemonset}"
        )
        return self.finding(
            fid="sandbox.operand-missing",
            link=op.link,
            cause=f"DaemonSet {op.daemonset} places no pod on this node, so {waiting}.",
            evidence=[block.describe() if block is not None else f"DaemonSet {op.daemonset}: no pod on {view.name}"],
            fix=fix,
            note=manifest_note(self.ctx, daemonset=op.daemonset, block=block) if block is not None else "",
        )

    def failing(self, op: SandboxOperand, pod: Obj, st: PodState) -> Finding:
        """``op``'s pod fails (crash, image, a validation that exits)."""
        log = self.log(pod, st)
        refused = NOT_VFIO.search(log)
        if refused is not None:
            return self.not_vfio(refused, st)
        no_group = catalog.find(log, *BIND_REFUSED) if op is VFIO_MANAGER else None
        if no_group is not None:
            return self.no_iommu(st, no_group)
        if op is VALIDATOR and st.container in VALIDATES:
            op = VALIDATES[st.container]
            if op is VGPU_MANAGER and NO_VFS.search(log):
                return self.no_vfs(st, log)  # the validation gave up waiting (its timeout) and restarts
        said = said_in(log) or ([f"message: {st.message}"] if st.message else [])
        known = catalog.known_error(log)
        fix: Fix | str = (
            known.entry.repair(self.view.name, namespace=self.ctx.namespace, pod=st.name, daemonset=op.daemonset)
            if known is not None
            else self.restart(op, "a sandbox operand's restart is not simulated")
        )
        return self.finding(
            fid="sandbox.operand-failing",
            link=op.link,
            cause=f"the {op.name}'s pod fails on this node ({st.status} in {st.container}), so every sandbox operand "
            "above it waits.",
            evidence=[st.describe(), *said],
            fix=fix,
            note=""
            if known
            else f"once its log is acted on: kubectl -n {self.ctx.namespace} logs {st.name} -c {st.container}",
        )

    def not_ready(self, op: SandboxOperand, pod: Obj, st: PodState) -> Finding:
        """``op``'s pod neither fails nor runs ready, and no operand below it explains the wait."""
        held = f" in {st.waiting_init}" if st.waiting_init else ""
        return self.finding(
            fid="sandbox.operand-not-ready",
            link=op.link,
            cause=f"the {op.name}'s pod is not ready on this node ({st.status}{held}) though the sandbox operands "
            "below it are, so the ones above it wait.",
            evidence=[st.describe(), *said_in(self.log(pod, st))],
            fix=self.restart(op, "a sandbox operand's restart is not simulated"),
            note=f"if it stays so, its log says why: kubectl -n {self.ctx.namespace} logs {st.name} -c {st.container}",
        )

    def not_vfio(self, refused: re.Match[str], st: PodState) -> Finding:
        device, driver = refused.group(1), refused.group(2)
        host = driver.startswith("nvidia")
        restart = self.restart(VFIO_MANAGER, "vfio-pci binding is not simulated")
        note = (
            "it binds every GPU to vfio-pci (vfio-manage bind --all); a GPU held by the NVIDIA driver installed on the "
            "host stays bound to it: unload and blacklist the host driver (nvidia, nvidia_drm, nvidia_modeset) first"
            if host
            else "it binds every GPU to vfio-pci again (vfio-manage bind --all)"
        )
        return self.finding(
            fid="sandbox.vfio-unbound",
            link=VFIO_MANAGER.link,
            cause=f"GPU {device} is bound to {driver or 'no driver'!r}, not vfio-pci, so the sandbox validator "
            "never writes vfio-pci-ready and no GPU is passed through to VMs.",
            evidence=[st.describe(), f"log: {refused.group(0)}"],
            fix=restart,
            note=note,
        )

    def no_iommu(self, st: PodState, said: catalog.Match) -> Finding:
        """The VFIO manager's bind of a GPU to vfio-pci refused with EINVAL: vfio-pci takes no device without an IOMMU
        group, so the node itself lacks what passthrough needs (its kernel's IOMMU, or on a VM the hypervisor's)."""
        action = Fix(
            FixOp.NODE,
            self.view.name,
            {
                "action": said.entry.repair(self.view.name),
                NOT_SIMULATED: "a node's IOMMU is not a scenario fact",
            },
        )
        return self.finding(
            fid="node.iommu-missing",
            link="node",
            cause="the VFIO manager cannot bind the node's GPUs to vfio-pci: the kernel refuses the bind (EINVAL) "
            "because the GPU is in no IOMMU group, so the node was booted without its IOMMU on (or, a VM, is given "
            "none by its hypervisor). No GPU can be passed through to a VM here until it has one; the sandbox "
            "operands above the VFIO manager wait for it.",
            evidence=[st.describe(), *said.evidence()],
            fix=action,
            note="then the VFIO manager's pod binds them at its next start",
        )

    def no_vfs(self, st: PodState, log: str) -> Finding:
        """The validator waits for the GPUs' virtual functions while the vGPU manager runs: they are runtime state a
        reboot clears, and only the manager's start (or the host's own sriov-manage) makes them again."""
        lines = [ln.strip() for ln in log.splitlines() if NO_VFS.search(ln)]
        manager = self.pods.get(VGPU_MANAGER.name)
        host = manager is None or HOST_VGPU_DRIVER in self.view.labels
        if host:
            fix: Fix | str = Fix(
                FixOp.NODE,
                self.view.name,
                {
                    "action": "enable the GPUs' SR-IOV virtual functions: /usr/lib/nvidia/sriov-manage -e ALL on the "
                    "host, and at every boot (a systemd unit), since VFs do not survive a reboot",
                    NOT_SIMULATED: "SR-IOV virtual functions are not simulated",
                },
            )
            note = ""
        else:
            fix = self.restart(VGPU_MANAGER, "SR-IOV virtual functions are not simulated")
            note = (
                "its start re-creates the SR-IOV virtual functions (sriov-manage -e ALL) that the reboot cleared; "
                "or run /usr/lib/nvidia/sriov-manage -e ALL in its driver root (/run/nvidia/driver)"
            )
        return self.finding(
            fid="sandbox.vgpu-vfs-missing",
            link=VGPU_MANAGER.link,
            cause="the vGPU manager runs but the GPUs' SR-IOV virtual functions (or mdev parents) are not there, so "
            "the sandbox validator waits in vgpu-manager-validation, never writes vgpu-manager-ready, and the vGPU "
            "device manager and sandbox device plugin wait behind it.",
            evidence=[st.describe(), *(f"log: {ln}" for ln in lines[-2:])],
            fix=fix,
            note=note,
        )

    def no_smi(self, st: PodState, log: str) -> Finding:
        """The validator's nvidia-smi in the vGPU manager's root keeps failing though the manager's pod runs: its
        driver is not loaded or answers nothing."""
        lines = [ln.strip() for ln in log.splitlines() if NO_SMI.search(ln)]
        host = self.pods.get(VGPU_MANAGER.name) is None
        fix: Fix | str = (
            f"# on {self.view.name}: the vGPU manager installed on the host does not answer nvidia-smi; reinstall it "
            "or load its modules (nvidia, nvidia_vgpu_vfio)"
            if host
            else self.restart(VGPU_MANAGER, "a vGPU manager's driver is not simulated")
        )
        return self.finding(
            fid="sandbox.vgpu-manager-unanswered",
            link=VGPU_MANAGER.link,
            cause="the sandbox validator's nvidia-smi in the vGPU manager's driver root keeps failing, so it never "
            "writes vgpu-manager-ready and the vGPU device manager and sandbox device plugin wait behind it.",
            evidence=[st.describe(), *(f"log: {ln}" for ln in lines[-2:])],
            fix=fix,
            note="" if host else "its start loads the vGPU manager's modules again; if it fails, its log says why",
        )

    def vgpu_devices(self, st: PodState) -> Finding:
        """The validator waits for vGPU devices: the vGPU device manager made none (its config state says why)."""
        state = self.view.labels.get(VGPU_CONFIG_STATE, "")
        config = self.view.labels.get(VGPU_CONFIG, "")
        if not config:
            action: Fix | str = Fix(FixOp.LABEL_NODE, self.view.name, {VGPU_CONFIG: "<vGPU type of the GPU>"})
            why = f"the node has no {VGPU_CONFIG} label, so the vGPU device manager creates no vGPU device"
        else:
            action = self.restart(VGPU_DEVICE_MANAGER, "vGPU devices are not simulated")
            why = f"the vGPU device manager has not created the vGPU devices of {VGPU_CONFIG}={config}" + (
                f" ({VGPU_CONFIG_STATE}={state})" if state else ""
            )
        note = (
            f"the type must be one of the vgpu-configs of the vGPU device manager's ConfigMap for this GPU "
            f"(vgpuDeviceManager.config); kubectl -n {self.ctx.namespace} logs ds/{VGPU_DEVICE_MANAGER.daemonset}"
        )
        return self.finding(
            fid="sandbox.vgpu-devices-missing",
            link=VGPU_DEVICE_MANAGER.link,
            cause=why + "; the sandbox validator waits in vgpu-devices-validation and the sandbox device plugin waits "
            "for vgpu-devices-ready.",
            evidence=[
                st.describe(),
                f"label {VGPU_CONFIG}={config}" if config else "",
                state and f"label {VGPU_CONFIG_STATE}={state}",
            ],
            fix=action,
            note=note,
        )

    def validation_wait(self, pod: Obj, st: PodState) -> Finding | None:
        """The validator's pod held in one of its validations: the operand that validation proves is at fault."""
        subject = VALIDATES.get(st.waiting_init)
        log = self.log(pod, st)
        refused = NOT_VFIO.search(log)
        if refused is not None:
            return self.not_vfio(refused, st)
        if subject is VGPU_MANAGER:
            if NO_SMI.search(log) and not NO_VFS.search(log):
                return self.no_smi(st, log)
            # The manager below runs (or is the host's) and nvidia-smi answers: what the validation waits for is the
            # VFs (or mdev parents) only the manager's start or the host makes.
            return self.no_vfs(st, log)
        if subject is VGPU_DEVICE_MANAGER:
            return self.check(VGPU_DEVICE_MANAGER) or self.vgpu_devices(st)
        if subject is VFIO_MANAGER:
            return self.finding(
                fid="sandbox.vfio-unbound",
                link=VFIO_MANAGER.link,
                cause="the sandbox validator waits in vfio-pci-validation: a GPU is not bound to vfio-pci yet, so no "
                "GPU is passed through to VMs.",
                evidence=[st.describe(), *said_in(log)],
                fix=self.restart(VFIO_MANAGER, "vfio-pci binding is not simulated"),
                note="it binds every GPU to vfio-pci again (vfio-manage bind --all)",
            )
        return None

    def check(self, op: SandboxOperand) -> Finding | None:
        """``op`` on the node: None where it runs (or waits only on a file of an operand below it, judged there)."""
        pod = self.pods.get(op.name)
        if pod is None:
            if op in (VGPU_MANAGER, VFIO_MANAGER) and self._on_host(op):
                return None
            return self.missing(op)
        st = pod_state(pod)
        if st.failing:
            return self.failing(op, pod, st)
        if op is VALIDATOR and st.waiting_init:
            found = self.validation_wait(pod, st)
            if found is not None:
                return found
        return None if st.ready else self.not_ready(op, pod, st)

    def _on_host(self, op: SandboxOperand) -> bool:
        """The manager is the host's own: the policy does not deploy it and the operator gave the node no label for
        it, or the node carries the host vGPU manager's version."""
        off = switched_on(self.ctx, op.switch) is False and op.deploy not in self.view.labels
        return off or HOST_VGPU_DRIVER in self.view.labels


def _consequences(walk: _Walk, after: tuple[SandboxOperand, ...]) -> list[str]:
    out = []
    for op in after:
        pod = walk.pods.get(op.name)
        if pod is None:
            out.append(f"{op.link}: no {op.name} pod on {walk.view.name}")
            continue
        st = pod_state(pod)
        waiting = f" (waiting in {st.waiting_init})" if st.waiting_init else ""
        out.append(f"{op.link}: pod {st.name} {st.status}{waiting}")
    if not advertised(walk.view):
        out.append(f"node {walk.view.name}: no GPU or vGPU resource in capacity")
    return out


def _ordered(links: list[Link]) -> tuple[Link, ...]:
    """The links in the chain's order, as the container walk shows them."""
    order = ("driver", "toolkit", "device-plugin", *UNUSED[1:])
    return tuple(sorted(links, key=lambda lk: order.index(lk.name)))


def sandbox_walk(ctx: Context, view: NodeView, *, under: list[Finding], root: Finding | None) -> NodeChain | None:
    """A VM node's chain (None for a container node): the node's own root first (``root``, from the walk's node
    checks), then the sandbox operands bottom-up to the first that stops the ones above it, then what the sandbox
    device plugin announces. The container operands are absent by design there and are not reported."""
    workload = workload_of(ctx, view)
    if workload is None:
        return vm_plugin_walk(ctx, view, under=under, root=root)
    chain = _chain(ctx, workload)
    walk = _Walk(ctx=ctx, view=view, workload=workload, chain=chain, pods=_pods(ctx, view))
    others = [f for f in under if f is not root]
    skipped = [Link(name, LinkState.SKIPPED, f"not used on a {workload} node") for name in UNUSED]
    if root is not None:
        links = [Link(name, LinkState.NOT_REACHED, "waiting for the node") for name in ("driver", "device-plugin")]
        found = dataclasses.replace(root, root=True, consequences=tuple(_consequences(walk, chain)))
        return NodeChain(view.name, _ordered(links + skipped), (found, *others))
    broken: Finding | None = None
    at = len(chain)
    for i, op in enumerate(chain):
        broken = walk.check(op)
        if broken is not None:
            at = i
            break
    plugin_pod = walk.pods.get(DEVICE_PLUGIN.name)
    if broken is None and workload == PASSTHROUGH and plugin_pod is not None:
        broken = passthrough_finding(ctx, view, plugin_pod)  # a VM waits for a GPU the plugin names otherwise
    if broken is None and not advertised(view):
        plugin = chain[-1]
        broken = walk.finding(
            fid="sandbox.nothing-advertised",
            link=plugin.link,
            cause=f"every sandbox operand runs, but the node announces no GPU or vGPU resource: the {plugin.name} "
            "found no device to announce or did not register with the kubelet.",
            evidence=[f"{plugin.name}: {pod_state(walk.pods[plugin.name]).describe()}"],
            fix=walk.restart(plugin, "a sandbox device plugin's registration is not simulated"),
            note=f"it announces the GPUs bound to vfio-pci and the vGPU devices; kubectl -n {ctx.namespace} logs "
            f"ds/{plugin.daemonset}",
        )
    links = []
    for name in ("driver", "device-plugin"):
        ops = [op for op in chain if op.link == name]
        if broken is not None and broken.link == name:
            links.append(Link(name, LinkState.BROKEN, broken.cause.split(",")[0][:80]))
        elif broken is not None and broken.link == "driver":
            links.append(Link(name, LinkState.NOT_REACHED, f"waiting for {broken.link}"))
        else:
            shown = ", ".join(sorted(advertised(view))) if name == "device-plugin" else ""
            links.append(Link(name, LinkState.OK, " -> ".join(op.name for op in ops) + (f": {shown}" if shown else "")))
    findings = [dataclasses.replace(f, root=broken is None and f.severity is Severity.ERROR) for f in others]
    if broken is not None:
        after = tuple(op for op in chain[at + 1 :])
        broken = dataclasses.replace(broken, root=True, consequences=tuple(_consequences(walk, after)))
        findings.insert(0, broken)
    return NodeChain(view.name, _ordered(links + skipped), tuple(findings))
