"""VMs that wait for a passthrough GPU which the node's KubeVirt GPU device plugin does not announce under the name
asked (gpuchain.doctor.links.vm_resources): a plugin release that registers nothing for a GPU its pci.ids lacks, or
names GPUs by bare PCI device ID, is repaired by the release that fixed it; a fixed release whose pci.ids lacks the
model is answered on the VM's side (the name the node announces).

Fixtures, and where they come from:
- the plugin's log lines are its own wording (NVIDIA/kubevirt-gpu-device-plugin pkg/device_plugin/device_plugin.go
  @v1.2.1: "Nvidia device %s", "Iommu Group %s", "Device Id %s", "Device Map %s", "Error: Could not find device name
  for device id: %s", "DP Name %s"; @dbffff98^ (image v1.0.0) the same up to the error, after which it registers
  nothing), as NVIDIA/gpu-operator#548 quotes them for an L40 (device ID 26b5, "Error: Could not find device name for
  device id: 26b5", "DP Name 26b5", the node showing nvidia.com/26b5);
- which release changed what: v1.0.1 registers an unnamed GPU under its device ID (commit dbffff98, "Register device
  even if it is not in pci.ids", NVIDIA/kubevirt-gpu-device-plugin#22), v1.2.2 reads only NVIDIA's section of an
  updated pci.ids (#72, "Improve logic to extract device name from pci.ids file");
- the GPU Operator's sandbox plugin versions: NVIDIA/gpu-operator deployments/gpu-operator/values.yaml
  sandboxDevicePlugin.version (v1.2.1 in v22.9.0 .. v23.3.2, v1.2.2 from v23.6.0, v1.2.10 in v24.9.x);
- the VM's virt-launcher pod asking for the VM's deviceName as a resource, and kube-scheduler's "Insufficient
  <resource>" (kubevirt/kubevirt pkg/virt-controller/services/rendercontainer.go; kube-scheduler's fit plugin).
Device IDs, node names and versions differ from the held-out cases on purpose (tests/sim/heldout31 h31-02/03/07/08).
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed
from sim.heldout9 import harness as ninth

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp, Report
from gpuchain.doctor.passthrough import found_groups, unnamed, vm_plugin_log, wants_plugin_log
from gpuchain.sim.build import SimCluster

STANDALONE = """
name: kubevirt-standalone
stack: none
nodes:
  - {name: kv-gpu-7, preset: t4-x4}
  - {name: kv-ctl, gpu: false}
"""
OPERATOR = """
name: kubevirt-operator
stack: gpu-operator
nodes:
  - {name: vmhost-b, preset: l4-x2, workload: vm-passthrough, pciDeviceName: "26b5"}
  - {name: ctl-b, gpu: false}
"""
DS = "nvidia-kubevirt-gpu-dp-daemonset"
CTR = "nvidia-kubevirt-gpu-dp-ctr"
SANDBOX_DS = "nvidia-sandbox-device-plugin-daemonset"
SANDBOX_CTR = "nvidia-sandbox-device-plugin-ctr"


def _log(device: str, groups: list[str], *, registered: str = "", named: str = "") -> str:
    """The plugin's start as it logs it: each GPU's group and ID, the maps, then the name it gives the ID."""
    lines = []
    for i, group in enumerate(groups):
        lines += [f"Nvidia device 0000:{0x41 + i * 0x40:02x}:00.0", f"Iommu Group {group}", f"Device Id {device}"]
    lines += [f"Device Map map[{device}:[{' '.join(groups)}]]"]
    if not named:
        lines.append(f"Error: Could not find device name for device id: {device}")
    if registered:
        lines += [f"DP Name {registered}", f"{registered} Device plugin server ready"]
    return "".join(f"2024/03/02 10:11:12 {ln}\n" for ln in lines)


def _ninth(edit: dict[str, Any]) -> Any:
    """A held-out edit of heldout9's kinds (create, policy, daemonset) applied to the simulation."""

    def apply(sim: SimCluster) -> None:
        ninth._apply(sim.cluster, edit)

    return apply


def _standalone(tag: str, log: str, **announced: str) -> list[Any]:
    """The plugin's DaemonSet at ``tag`` with its pod's ``log``; the node announces ``announced`` (device ID or model
    name -> count) and no nvidia.com/gpu (its GPUs are bound to vfio-pci)."""
    capacity: dict[str, Any] = {"nvidia.com/gpu": None, **{f"nvidia.com/{k}": v for k, v in announced.items()}}
    return [
        {
            "do": "add-daemonset",
            "namespace": "kube-system",
            "name": DS,
            "labels": {"name": "nvidia-kubevirt-gpu-dp-ds"},
            "containers": [CTR],
            "image": f"nvcr.io/nvidia/kubevirt-gpu-device-plugin:{tag}",
            "nodes": ["kv-gpu-7"],
        },
        {
            "do": "pod",
            "daemonset": DS,
            "namespace": "kube-system",
            "node": "kv-gpu-7",
            "containers": [{"name": CTR, "ready": True, "state": {}}],
            "logs": {CTR: log},
        },
        {"do": "node", "node": "kv-gpu-7", "capacity": capacity, "allocatable": capacity},
    ]


def _vm(name: str, resource: str, *, node: str = "", pending: str = "") -> Any:
    """A VM's virt-launcher pod asking for ``resource``: running on ``node``, or Pending as the scheduler leaves it."""
    status: dict[str, Any] = (
        {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": pending}],
        }
        if pending
        else {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    )
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "compute",
                "image": "quay.io/kubevirt/virt-launcher:v1.2.0",
                "resources": {"limits": {resource: "1"}, "requests": {resource: "1"}},
            }
        ]
    }
    if node:
        spec["nodeName"] = node
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"virt-launcher-{name}-x1",
            "namespace": "default",
            "labels": {"kubevirt.io": "virt-launcher"},
        },
        "spec": spec,
        "status": status,
    }
    return _ninth({"do": "create", "object": pod})


def _errors(report: Report) -> list[Any]:
    return [f for f in report.findings if f.severity is Severity.ERROR]


def _sandbox(tag: str, log: str, capacity: dict[str, Any]) -> list[Any]:
    return [
        {"do": "node", "node": "vmhost-b", "capacity": capacity, "allocatable": capacity},
        _ninth(
            {
                "do": "daemonset",
                "namespace": "gpu-operator",
                "name": SANDBOX_DS,
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": SANDBOX_CTR, "image": f"nvcr.io/nvidia/kubevirt-gpu-device-plugin:{tag}"}
                            ]
                        }
                    }
                },
            }
        ),
        {
            "do": "pod",
            "daemonset": SANDBOX_DS,
            "namespace": "gpu-operator",
            "node": "vmhost-b",
            "containers": [{"name": SANDBOX_CTR, "ready": True, "state": {}}],
            "logs": {SANDBOX_CTR: log},
        },
    ]


def test_the_plugins_log_says_which_groups_it_found_of_each_id_and_which_ids_it_could_not_name() -> None:
    log = _log("1eb8", ["12", "40", "12"], registered="")
    assert found_groups(log) == {"1eb8": {"12", "40"}}
    assert unnamed(log) == ["1eb8"]
    assert unnamed(_log("20b5", ["3"], registered="GA100_A100_PCIE_80GB", named="yes")) == []


def test_v1_0_0_registering_nothing_for_a_gpu_its_pci_ids_lacks_is_repaired_by_v1_0_1() -> None:
    waiting = "0/2 nodes are available: 2 Insufficient nvidia.com/TU104GL_TESLA_T4."
    report = diagnosed(
        STANDALONE,
        *_standalone("v1.0.0", _log("1eb8", ["12", "40", "71", "88"])),
        _vm("t4-vm", "nvidia.com/TU104GL_TESLA_T4", pending=waiting),
    )
    (root,) = _errors(report)
    assert (root.id, root.link, root.node, root.root) == (
        "vm.passthrough-unregistered",
        "device-plugin",
        "kv-gpu-7",
        True,
    )
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    assert root.action.target == f"kube-system/{DS}"
    assert "kubevirt-gpu-device-plugin:v1.0.1" in root.fix and "nvidia.com/1eb8" in root.fix
    assert "log: device 1eb8: 4 IOMMU group(s) found (12, 40, 71, 88)" in root.evidence


def test_a_bare_device_id_from_a_pre_v1_2_2_plugin_while_a_vm_asks_for_the_model_is_repaired_by_v1_2_2() -> None:
    waiting = "0/2 nodes are available: 2 Insufficient nvidia.com/TU104GL_TESLA_T4."
    report = diagnosed(
        STANDALONE,
        *_standalone("v1.1.2", _log("1eb8", ["12", "40"], registered="1eb8"), **{"1eb8": "2"}),
        _vm("t4-vm", "nvidia.com/TU104GL_TESLA_T4", pending=waiting),
    )
    (root,) = _errors(report)
    assert (root.id, root.node) == ("vm.passthrough-misnamed", "kv-gpu-7")
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    assert "kubevirt-gpu-device-plugin:v1.2.2" in root.fix
    assert "release: kubevirt-gpu-device-plugin.pci-ids-lookup" in root.evidence[-1]


def test_the_operators_sandbox_plugin_registering_fewer_gpus_than_it_found_is_set_in_the_cluster_policy() -> None:
    waiting = "0/2 nodes are available: 2 Insufficient nvidia.com/26b5."
    capacity = {"nvidia.com/26b5": "1"}
    report = diagnosed(
        OPERATOR,
        _ninth({"do": "policy", "spec": {"sandboxDevicePlugin": {"version": "v1.2.1"}}}),
        *_sandbox("v1.2.1", _log("26b5", ["128", "129"], registered="26b5"), capacity),
        _vm("l40-vm-1", "nvidia.com/26b5", node="vmhost-b"),
        _vm("l40-vm-2", "nvidia.com/26b5", pending=waiting),
    )
    (root,) = _errors(report)
    assert (root.id, root.link, root.node) == ("vm.passthrough-misnamed", "device-plugin", "vmhost-b")
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    version = root.action.changes["spec"]["sandboxDevicePlugin"]["version"]
    assert version not in ("v1.0.0", "v1.0.1", "v1.1.2", "v1.2.0", "v1.2.1")  # a release the defect does not cover
    assert "the ClusterPolicy pins v1.2.1" in root.fix or "v1.2.2 or later" in root.fix


def test_a_fixed_plugin_naming_a_gpu_by_id_leaves_the_vm_to_ask_for_the_announced_name() -> None:
    waiting = "0/2 nodes are available: 2 Insufficient nvidia.com/AD102GL_L40."
    report = diagnosed(
        STANDALONE,
        *_standalone("v1.2.10", _log("26b5", ["5"], registered="26b5"), **{"26b5": "1"}),
        _vm("l40-vm", "nvidia.com/AD102GL_L40", pending=waiting),
    )
    (root,) = _errors(report)
    assert root.id == "vm.passthrough-misnamed" and root.action is None
    assert "deviceName: nvidia.com/26b5" in root.fix and "10DE:26B5" in root.fix


def test_a_stale_zero_bare_id_beside_the_named_gpus_after_v1_2_2_is_quiet() -> None:
    capacity = {"nvidia.com/26b5": "0", "nvidia.com/AD102GL_L40": "2"}
    report = diagnosed(
        OPERATOR,
        *_sandbox("v1.2.2", _log("26b5", ["128", "129"], registered="AD102GL_L40", named="yes"), capacity),
        _vm("l40-vm-1", "nvidia.com/AD102GL_L40", node="vmhost-b"),
    )
    assert _errors(report) == []


def test_gpus_by_id_that_a_running_vm_uses_with_nothing_waiting_are_quiet() -> None:
    report = diagnosed(
        STANDALONE,
        *_standalone("v1.0.1", _log("1eb8", ["12", "40"], registered="1eb8"), **{"1eb8": "2"}),
        _vm("t4-vm", "nvidia.com/1eb8", node="kv-gpu-7"),
    )
    assert _errors(report) == []


def test_every_gpu_found_registered_and_taken_leaves_a_waiting_vm_to_capacity_not_the_plugin() -> None:
    waiting = "0/2 nodes are available: 2 Insufficient nvidia.com/1eb8."
    report = diagnosed(
        STANDALONE,
        *_standalone("v1.1.2", _log("1eb8", ["12", "40"], registered="1eb8"), **{"1eb8": "2"}),
        _vm("t4-vm-1", "nvidia.com/1eb8", node="kv-gpu-7"),
        _vm("t4-vm-2", "nvidia.com/1eb8", node="kv-gpu-7"),
        _vm("t4-vm-3", "nvidia.com/1eb8", pending=waiting),
    )
    assert not [f for f in report.findings if f.id.startswith("vm.passthrough")]


def test_the_gather_reads_a_running_plugins_log_only_where_its_node_names_gpus_by_id_or_announces_none() -> None:
    by_id = {"status": {"capacity": {"nvidia.com/1eb8": "2"}}}
    named = {"status": {"capacity": {"nvidia.com/TU104GL_TESLA_T4": "2", "nvidia.com/1eb8": "0"}}}
    assert wants_plugin_log(by_id) and wants_plugin_log({"status": {"capacity": {}}})
    assert not wants_plugin_log(named)
    pod = {
        "metadata": {"name": "dp-1", "namespace": "kube-system"},
        "spec": {
            "nodeName": "a",
            "containers": [{"name": CTR, "image": "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.2.1"}],
        },
        "status": {"containerStatuses": [{"name": CTR, "ready": True, "state": {"running": {}}}]},
    }
    assert [k for k, _ in vm_plugin_log(pod, {"a": by_id})] == [("kube-system", "dp-1", CTR)]
    assert vm_plugin_log(pod, {"a": named}) == []
