"""The doctor on the GPU Operator's VM nodes: a node labelled nvidia.com/gpu.workload.config=vm-passthrough or vm-vgpu
runs the sandbox operands, not the container operands, and its chain is walked bottom-up through them.

Fixtures: the simulator's VM nodes (gpuchain.sim.sandbox, names and labels as NVIDIA/gpu-operator renders them:
controllers/state_manager.go gpuStateLabels, assets/state-sandbox-validation, state-vgpu-device-manager,
state-sandbox-device-plugin @v26.7.0), edited the way the components leave them. Log lines are the validator's own:
"Waiting for VFs to be available..." (NVIDIA/gpu-operator cmd/nvidia-validator/main.go@v26.3.0 VGPUManager.validate),
"device not bound to 'vfio-pci'; device: %s driver: '%s'" (the same file, VfioPCI.runValidation), "No vGPU devices
found, retrying after %d seconds" (VGPUDevices.runValidation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from doctor.small_cluster import diagnosed
from sim.heldout import harness

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp, LinkState, Report
from gpuchain.doctor.snapshot import gather
from gpuchain.doctor.stacks import NVIDIA_CLUSTER_POLICY as CLUSTER_POLICY_NVIDIA
from gpuchain.doctor.stacks import detect
from gpuchain.doctor.stacks.sandbox import sandbox_log_candidates
from gpuchain.kube import DAEMONSET, POD
from gpuchain.sim import build, parse_scenario
from gpuchain.sim.build import SimCluster

VMS = """
name: vm-nodes
stack: gpu-operator
nodes:
  - {name: vgpu, preset: h100-80gb-x8, workload: vm-vgpu, vgpuType: NVIDIA_H100-20C}
  - {name: pt, preset: a100-40gb-x8, workload: vm-passthrough, pciDeviceName: GA100_A100_PCIE_40GB}
  - {name: ctr, preset: h100-80gb-x8}
workloads:
  - {name: serve, namespace: inference, count: 8, gpus: 1, node: ctr}
"""
NS = "gpu-operator"
SANDBOX_OFF = {"sandboxWorkloads": {"enabled": False}}
VFS_WAIT = 'time="2026-07-04T06:02:15Z" level=info msg="Waiting for VFs to be available..."\n'


def _said(report: Report) -> list[Any]:
    return [f for f in report.findings if f.severity is not Severity.INFO]


def _root(report: Report, node: str) -> Any:
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR and f.node == node]
    return root


def _without_pod(prefix: str, node: str) -> Callable[[SimCluster], None]:
    """An edit: the DaemonSet ``prefix`` places no pod on ``node`` (its selector no longer matches the node)."""

    def edit(sim: SimCluster) -> None:
        for p in sim.cluster.list(POD):
            if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName") == node:
                sim.cluster.delete(POD, name=p["metadata"]["name"], namespace=p["metadata"]["namespace"])

    return edit


def _held(daemonset: str, node: str, init: str, log: str = "") -> dict[str, Any]:
    """An edit: ``daemonset``'s pod on ``node`` held running in init container ``init`` (its log ``log``)."""
    edit: dict[str, Any] = {
        "do": "pod",
        "daemonset": daemonset,
        "node": node,
        "phase": "Pending",
        "init": [{"name": init, "state": {"running": True}}],
    }
    if log:
        edit["logs"] = {init: log}
    return edit


def test_healthy_vm_nodes_beside_a_container_node_get_no_finding_and_no_opt_out_warning() -> None:
    report = diagnosed(VMS)
    assert _said(report) == []
    chains = {c.node: c for c in report.chains}
    for node in ("vgpu", "pt"):
        links = {lk.name: lk.state for lk in chains[node].links}
        assert links["driver"] is LinkState.OK and links["device-plugin"] is LinkState.OK
        assert links["toolkit"] is LinkState.SKIPPED and links["exporter"] is LinkState.SKIPPED
    assert "nvidia.com/NVIDIA_H100-20C" in next(lk.summary for lk in chains["vgpu"].links if lk.name == "device-plugin")


def test_a_sandbox_validator_whose_deploy_label_was_left_paused_is_switched_back_on_with_the_plugin() -> None:
    paused = {
        "nvidia.com/gpu.deploy.sandbox-validator": "paused-for-vgpu-change",
        "nvidia.com/gpu.deploy.sandbox-device-plugin": "paused-for-vgpu-change",
    }
    report = diagnosed(
        VMS,
        {"do": "node", "node": "vgpu", "labels": paused},
        _without_pod("nvidia-sandbox-validator", "vgpu"),
        _without_pod("nvidia-sandbox-device-plugin-daemonset", "vgpu"),
        _held("nvidia-vgpu-device-manager", "vgpu", "vgpu-manager-validation"),
        {"do": "node", "node": "vgpu", "capacity": {"nvidia.com/NVIDIA_H100-20C": None}},
    )
    root = _root(report, "vgpu")
    assert (root.id, root.link) == ("sandbox.operand-off", "device-plugin")
    assert root.action is not None and root.action.op is FixOp.LABEL_NODE
    assert root.action.changes == {k: "true" for k in paused}
    assert any("vgpu-device-manager" in c and "Init:0/1" in c for c in root.consequences)
    assert not [f for f in report.findings if f.id == "node.opted-out"]


def test_virtual_functions_a_reboot_cleared_are_made_again_by_restarting_the_vgpu_manager() -> None:
    report = diagnosed(
        VMS,
        _held("nvidia-sandbox-validator", "vgpu", "vgpu-manager-validation", VFS_WAIT * 3),
        _held("nvidia-vgpu-device-manager", "vgpu", "vgpu-manager-validation"),
        _held("nvidia-sandbox-device-plugin-daemonset", "vgpu", "vgpu-devices-validation"),
        {"do": "node", "node": "vgpu", "capacity": {"nvidia.com/NVIDIA_H100-20C": None}},
    )
    root = _root(report, "vgpu")
    assert (root.id, root.link) == ("sandbox.vgpu-vfs-missing", "driver")
    assert root.action is not None and root.action.op is FixOp.DELETE
    assert root.action.changes["name"].startswith("nvidia-vgpu-manager-daemonset")
    assert "sriov-manage -e ALL" in root.fix
    assert any("Waiting for VFs" in e for e in root.evidence)  # the held validation's log was read
    assert len(root.consequences) >= 2


def test_with_the_vgpu_manager_on_the_host_the_virtual_functions_are_enabled_on_the_host_at_boot() -> None:
    report = diagnosed(
        VMS,
        {"do": "node", "node": "vgpu", "labels": {"nvidia.com/vgpu.host-driver-version": "580.82.07"}},
        _without_pod("nvidia-vgpu-manager-daemonset", "vgpu"),
        _held("nvidia-sandbox-validator", "vgpu", "vgpu-manager-validation", VFS_WAIT),
    )
    root = _root(report, "vgpu")
    assert (root.id, root.link) == ("sandbox.vgpu-vfs-missing", "driver")
    assert root.action is not None and root.action.op is FixOp.NODE
    assert "sriov-manage -e ALL" in root.fix and "every boot" in root.fix


def test_a_gpu_the_host_driver_keeps_from_vfio_pci_is_the_passthrough_nodes_driver_layer() -> None:
    refused = (
        'level=info msg="GPU workload configuration: vm-passthrough"\n'
        "Error: error validating vfio-pci driver installation: device not bound to 'vfio-pci'; "
        "device: 0000:3b:00.0 driver: 'nvidia'\n"
    )
    crash = {
        "name": "vfio-pci-validation",
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "Error", "exitCode": 1},
        "restarts": 4,
    }
    report = diagnosed(
        VMS,
        {
            "do": "pod",
            "daemonset": "nvidia-sandbox-validator",
            "node": "pt",
            "phase": "Pending",
            "init": [crash],
            "logs": {"vfio-pci-validation": refused},
        },
    )
    root = _root(report, "pt")
    assert (root.id, root.link) == ("sandbox.vfio-unbound", "driver")
    assert root.action is not None and root.action.changes["name"].startswith("nvidia-vfio-manager")
    assert "blacklist" in root.fix and "0000:3b:00.0" in root.cause


def test_vgpu_devices_never_created_for_a_failed_config_are_the_device_managers() -> None:
    report = diagnosed(
        VMS,
        {"do": "node", "node": "vgpu", "labels": {"nvidia.com/vgpu.config.state": "failed"}},
        _held(
            "nvidia-sandbox-validator",
            "vgpu",
            "vgpu-devices-validation",
            "No vGPU devices found, retrying after 5 seconds\n",
        ),
    )
    root = _root(report, "vgpu")
    # The vGPU device manager partitions the GPU into devices (nvidia.com/vgpu.config, as the MIG manager does by
    # nvidia.com/mig.config): the GPU-partitioning link.
    assert (root.id, root.link) == ("sandbox.vgpu-devices-missing", "mig")
    assert "label nvidia.com/vgpu.config.state=failed" in root.evidence
    assert root.action is not None and root.action.changes["name"].startswith("nvidia-vgpu-device-manager")


def test_a_sandbox_operand_the_policy_does_not_deploy_is_switched_on_in_the_policy() -> None:
    def no_device_manager(sim: SimCluster) -> None:
        sim.cluster.delete(DAEMONSET, name="nvidia-vgpu-device-manager", namespace=NS)

    report = diagnosed(VMS, no_device_manager, _without_pod("nvidia-vgpu-device-manager", "vgpu"))
    root = _root(report, "vgpu")
    assert (root.id, root.link) == ("sandbox.operand-disabled", "mig")
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert root.action.changes == {"spec": {"vgpuDeviceManager": {"enabled": True}}}


def test_a_running_sandbox_plugin_that_announces_nothing_is_the_device_plugin_link() -> None:
    report = diagnosed(VMS, {"do": "node", "node": "pt", "capacity": {"nvidia.com/GA100_A100_PCIE_40GB": None}})
    root = _root(report, "pt")
    assert (root.id, root.link) == ("sandbox.nothing-advertised", "device-plugin")
    assert root.action is not None and root.action.changes["name"].startswith("nvidia-sandbox-device-plugin")


def test_a_vm_label_the_operator_does_not_honour_leaves_the_container_walk() -> None:
    # sandboxWorkloads is off and the node has no sandbox operand's label: the operator runs the container operands.
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1, labels: {nvidia.com/gpu.workload.config: vm-vgpu}}\n"
    )
    (chain,) = report.chains
    assert {lk.name: lk.state for lk in chain.links}["toolkit"] is LinkState.OK
    assert not [f for f in report.findings if f.id.startswith("sandbox.")]


def test_the_gather_step_reads_a_held_sandbox_validation_and_nothing_on_a_cluster_without_vm_nodes() -> None:
    sim = build(parse_scenario(VMS))
    harness._apply(sim.cluster, _held("nvidia-sandbox-validator", "vgpu", "vgpu-manager-validation", VFS_WAIT))
    snap = gather(sim.cluster)
    keys = [key for key, _ in sandbox_log_candidates(snap, detect(snap))]
    assert [(ns, c) for ns, _, c in keys] == [(NS, "vgpu-manager-validation")]
    plain = gather(build(parse_scenario("name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n")).cluster)
    assert sandbox_log_candidates(plain, detect(plain)) == []


def test_a_vgpu_manager_validation_that_gave_up_waiting_for_vfs_still_names_the_virtual_functions() -> None:
    # v26.3's validator waits five minutes (defaultVFWaitTimeout), then exits with "vGPU Manager VFs not ready: %w".
    log = (
        VFS_WAIT + "error validating vGPU Manager installation: vGPU Manager VFs not ready: context deadline exceeded\n"
    )
    crash = {
        "name": "vgpu-manager-validation",
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "Error", "exitCode": 1},
        "restarts": 6,
    }
    report = diagnosed(
        VMS,
        {
            "do": "pod",
            "daemonset": "nvidia-sandbox-validator",
            "node": "vgpu",
            "phase": "Pending",
            "init": [crash],
            "logs": {"vgpu-manager-validation": log},
        },
    )
    root = _root(report, "vgpu")
    assert (root.id, root.link) == ("sandbox.vgpu-vfs-missing", "driver")
    assert "sriov-manage -e ALL" in root.fix


def test_a_vgpu_manager_that_cannot_build_for_the_kernel_gets_the_catalogs_repair() -> None:
    # NVIDIA/gpu-driver-container vgpu-manager/ubuntu24.04/nvidia-driver: _resolve_kernel_version's message.
    crash = {
        "name": "nvidia-vgpu-manager-ctr",
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "Error", "exitCode": 1},
        "restarts": 3,
    }
    report = diagnosed(
        VMS,
        {
            "do": "pod",
            "daemonset": "nvidia-vgpu-manager-daemonset",
            "node": "vgpu",
            "containers": [crash],
            "logs": {
                "nvidia-vgpu-manager-ctr": "Resolving Linux kernel version...\nCould not resolve Linux kernel version\n"
            },
        },
    )
    root = _root(report, "vgpu")
    assert (root.id, root.link) == ("sandbox.operand-failing", "driver")
    assert "kernel" in root.fix and any("driver-container.kernel-unresolved" in e for e in root.evidence)


def test_a_vgpu_manager_still_not_ready_holds_the_chain_at_the_driver_not_at_the_plugin() -> None:
    report = diagnosed(
        VMS,
        {
            "do": "pod",
            "daemonset": "nvidia-vgpu-manager-daemonset",
            "node": "vgpu",
            "containers": [{"name": "nvidia-vgpu-manager-ctr", "state": {"running": True}, "ready": False}],
        },
        _held("nvidia-sandbox-validator", "vgpu", "vgpu-manager-validation", "vGPU Manager is not ready\n"),
    )
    root = _root(report, "vgpu")
    assert (root.id, root.link) == ("sandbox.operand-not-ready", "driver")
    assert root.action is not None and root.action.changes["name"].startswith("nvidia-vgpu-manager-daemonset")


def test_a_vm_node_left_without_its_validator_label_while_the_policy_turns_sandbox_workloads_off() -> None:
    def sandbox_off(sim: SimCluster) -> None:
        (policy,) = sim.cluster.list(CLUSTER_POLICY_NVIDIA)
        sim.cluster.patch(CLUSTER_POLICY_NVIDIA, name=policy["metadata"]["name"], patch={"spec": SANDBOX_OFF})

    report = diagnosed(
        VMS,
        sandbox_off,
        {"do": "node", "node": "vgpu", "labels": {"nvidia.com/gpu.deploy.sandbox-validator": None}},
        _without_pod("nvidia-sandbox-validator", "vgpu"),
    )
    root = _root(report, "vgpu")
    assert (root.id, root.link) == ("sandbox.disabled", "device-plugin")
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert root.action.changes == {"spec": {"sandboxWorkloads": {"enabled": True}}}


def test_a_sandbox_daemonset_kept_off_by_a_taint_gets_the_toleration_through_the_policy() -> None:
    taint = {"key": "dedicated", "value": "vms", "effect": "NoSchedule"}
    report = diagnosed(
        VMS,
        {"do": "node", "node": "vgpu", "taints": [taint]},
        _without_pod("nvidia-sandbox-validator", "vgpu"),
    )
    root = _root(report, "vgpu")
    assert (root.id, root.link) == ("sandbox.operand-missing", "device-plugin")
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"} in (
        root.action.changes["spec"]["daemonsets"]["tolerations"]
    )


def test_a_running_vgpu_manager_whose_driver_does_not_answer_nvidia_smi_is_restarted() -> None:
    # runCommandWithWait's lines while chroot /run/nvidia/driver nvidia-smi fails (cmd/nvidia-validator/main.go).
    log = (
        "running command chroot with args [/run/nvidia/driver nvidia-smi]\n"
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
        "command failed, retrying after 5 seconds\n"
    )
    report = diagnosed(VMS, _held("nvidia-sandbox-validator", "vgpu", "vgpu-manager-validation", log))
    root = _root(report, "vgpu")
    assert (root.id, root.link) == ("sandbox.vgpu-manager-unanswered", "driver")
    assert root.action is not None and root.action.changes["name"].startswith("nvidia-vgpu-manager-daemonset")
    assert "sriov-manage" not in root.fix


def _vfio_manager_crashing(log: str) -> dict[str, Any]:
    """An edit: the VFIO manager on the passthrough node crash-loops with ``log``."""
    return {
        "do": "pod",
        "daemonset": "nvidia-vfio-manager",
        "node": "pt",
        "containers": [{"name": "nvidia-vfio-manager", "restarts": 9, "state": {"waiting": "CrashLoopBackOff"}}],
        "logs": {"nvidia-vfio-manager": log},
    }


@pytest.mark.parametrize(
    "log",
    [
        "binding device 0000:3b:00.0 to vfio-pci\n/bin/vfio-manage.sh: line 140: echo: write error: Invalid argument\n",
        # k8s-driver-manager's Go vfio-manage (cmd/vfio-manage/bind.go bindAll, its logger's warning; the error wrapped
        # in internal/nvpassthrough/nvpassthrough.go bind@bd62ca7d around os.WriteFile's)
        'time="2026-03-02T10:01:12Z" level=warning msg="Failed to bind device 0000:3b:00.0: failed to bind device '
        "0000:3b:00.0 to vfio-pci: failed to bind 0000:3b:00.0 to vfio-pci: write /sys/bus/pci/drivers/vfio-pci/bind: "
        'invalid argument"\n',
    ],
    ids=["vfio-manage.sh", "vfio-manage-go"],
)
def test_a_vfio_bind_the_kernel_refuses_is_the_nodes_missing_iommu(log: str) -> None:
    """vfio-pci takes no device without an IOMMU group (torvalds/linux drivers/vfio/group.c vfio_group_find_or_alloc:
    -EINVAL), so the VFIO manager's bind write (NVIDIA/gpu-operator assets/state-vfio-manager/0400_configmap.yaml
    bind_pci_device) fails with bash's "write error: Invalid argument" (builtins/common.c sh_wrerror) on a node booted
    without its IOMMU, or a VM given none: the node's kernel command line (or its hypervisor) is the repair."""
    root = _root(diagnosed(VMS, _vfio_manager_crashing(log)), "pt")
    assert (root.id, root.link) == ("node.iommu-missing", "node")
    assert "intel_iommu=on" in root.fix and "nvidia.com/gpu.workload.config=container" in root.fix
    assert any(e.startswith("catalog: vfio-manage") and "bind-refused" in e for e in root.evidence)


def test_a_vfio_driver_the_host_cannot_load_gets_the_kernels_vfio_modules() -> None:
    """k8s-driver-manager's Go vfio-manage loads the vfio driver by modprobe in the host's root and keeps only its
    exit status (internal/linuxutils/kmod.go Load, wrapped in internal/nvpassthrough/nvpassthrough.go@bd62ca7d)."""
    log = (
        'time="2026-03-02T10:01:12Z" level=warning msg="Failed to bind device 0000:3b:00.0: failed to bind device '
        '0000:3b:00.0 to vfio driver: failed to load "vfio-pci" driver: exit status 1"\n'
    )
    root = _root(diagnosed(VMS, _vfio_manager_crashing(log)), "pt")
    assert "linux-modules-extra" in root.fix
    assert any(e.startswith("catalog: vfio-manage.vfio-module-load-failed") for e in root.evidence)
