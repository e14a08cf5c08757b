"""Fabric Manager's own lines choose the repair of a node whose CUDA validation says "system not yet initialized".

The GPU Operator's driver container starts Fabric Manager and, in images before NVIDIA/gpu-driver-container 223687f,
stays Running when it fails (ubuntu22.04/nvidia-driver@06a208c _start_daemons), so its log, read where the CUDA
validation fails (gpuchain.doctor.fabric_logs), names why: Fabric Manager of another version than the driver
(its refusal as NVIDIA/gpu-operator#544 and akash-network/website#632 quote it, the driver image's bundled one as
NVIDIA/gpu-driver-container#735 reports), or an NVLink5 board taken down the NVSwitch driver's path without its
InfiniBand modules (NVIDIA/gpu-operator#2781; the start script's words as spectrocloud/CanvOS#700 quotes them). The
validator's line is NVIDIA/cuda-samples vectorAdd.cu@v12.8's for error 802.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from doctor.small_cluster import crashing_pod, diagnosed

from gpuchain.doctor import Report, Severity, run_doctor
from gpuchain.doctor.fabric_logs import fabric_log_candidates
from gpuchain.doctor.model import FixOp

CUDA_802 = "Failed to allocate device vector A (error code system not yet initialized)!\n"
BLACKWELL = {"nvidia.com/gpu.product": "NVIDIA-B200", "nvidia.com/gpu.family": "blackwell"}


def _fabric(
    tmp_path: Path,
    driver_log: str,
    *,
    node: str = "hgx-7",
    labels: dict[str, str] | None = None,
    version: str = "570.172.08",
    validated: bool = False,
    ready: bool = True,
) -> Report:
    """An 8-GPU NVSwitch node of a GPU Operator cluster whose ready driver container wrote ``driver_log``, and its
    CUDA validation failing with error 802 (or done, ``validated``)."""
    validation: dict[str, Any] = (
        {"name": "cuda-validation", "state": {"terminated": "Completed", "exitCode": 0}}
        if validated
        else {
            "name": "cuda-validation",
            "restarts": 4,
            "state": {"waiting": "CrashLoopBackOff"},
            "last": {"terminated": "Error", "exitCode": 1},
        }
    )
    edits: list[dict[str, Any]] = [
        {
            "do": "pod",
            "daemonset": "nvidia-driver-daemonset",
            "namespace": "gpu-operator",
            "node": node,
            "containers": [{"name": "nvidia-driver-ctr", "ready": ready, "state": {"running": True}}],
            "logs": {"nvidia-driver-ctr": driver_log},
        },
        {
            "do": "add-pod",
            "namespace": "gpu-operator",
            "name": "nvidia-cuda-validator-q8z2k",
            "node": node,
            "labels": {"app": "nvidia-cuda-validator"},
            "init": ["cuda-validation"],
            "containers": ["nvidia-cuda-validator"],
        },
        {
            "do": "pod",
            "daemonset": "nvidia-cuda-validator",
            "namespace": "gpu-operator",
            "node": node,
            **({"phase": "Succeeded"} if validated else {}),
            "init": [validation],
            "logs": {"cuda-validation": "Test PASSED\n" if validated else CUDA_802},
        },
    ]
    if labels:
        edits.insert(0, {"do": "node", "node": node, "labels": labels})
    doc = {
        "name": "t",
        "source": "gpuchain#0",
        "kind": "fault",
        "base": {
            "stack": "gpu-operator",
            "policy": {"driver": {"version": version}},
            "nodes": [{"name": node, "preset": "h100-80gb-x8"}],
        },
        "edits": edits,
        "expect": {"root": "none"},
    }
    from sim.heldout9 import harness

    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(doc))
    case = harness.load(path)
    return run_doctor(case.cluster, reader=case.read_log)


def _root(report: Report) -> Any:
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.id, root.link) == ("driver.fabric-manager", "driver")
    return root


START = "Loading NVIDIA driver kernel modules...\nStarting NVIDIA persistence daemon...\n"


def test_a_bundled_fabric_manager_of_another_version_wants_a_driver_image_whose_versions_agree(tmp_path: Path) -> None:
    """Another version pair and the later wording ("doesn't match ... with the matching"), on an H100 board."""
    refusal = (
        "fabric manager NVIDIA GPU driver interface version 570.195.03 doesn't match with driver version 570.172.08. "
        "Please update with the matching NVIDIA driver package.\n"
    )
    root = _root(_fabric(tmp_path, START + "Starting NVIDIA fabric manager daemon...\n" + refusal))
    assert "Fabric Manager 570.195.03 refuses to start beside the loaded driver 570.172.08" in root.cause
    assert "nvidia-fabricmanager-570=570.172.08-1 pinned (apt-mark hold)" in root.fix
    assert "set spec.driver.version" in root.fix and "delete pod nvidia-driver-daemonset-" in root.fix
    assert "catalog: fabric-manager.driver-version-mismatch" in " ".join(root.evidence)
    assert "modprobe" not in root.fix  # not the NVLink5 repair


def test_an_nvlink5_board_on_the_nvswitch_driver_path_wants_its_infiniband_modules(tmp_path: Path) -> None:
    """FM found nothing to manage on the NVSwitch driver's path of a node GFD labels Blackwell (another node name
    and driver than NVIDIA/gpu-operator#2781's)."""
    nothing = (
        "request to query NVSwitch device information from NVSwitch driver failed with error:"
        "WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]\n"
    )
    log = START + "Starting NVIDIA fabric manager daemon...\n" + nothing
    root = _root(_fabric(tmp_path, log, node="b200-pool-3", labels={**BLACKWELL, "nvidia.com/gpu.compute.major": "10"}))
    assert "modprobe mlx5_ib ib_umad" in root.fix and "/etc/modules-load.d/" in root.fix
    assert "linux-modules-extra" in root.fix and "on node b200-pool-3" in root.fix
    assert root.action is not None and root.action.op is FixOp.NODE
    assert "(an NVLink5 generation)" in " ".join(root.evidence)
    assert "nvidia-fabricmanager-" not in root.fix  # not a version to install


def test_the_start_scripts_ib_umad_refusal_is_the_same_repair(tmp_path: Path) -> None:
    refusal = 'Kernel module "ib_umad" has not been loaded, fabric manager cannot be started\n'
    root = _root(_fabric(tmp_path, START + "Detected NVL5+ system\n" + refusal))
    assert "modprobe ib_umad mlx5_ib" in root.fix
    assert "catalog: fabric-manager.ib-umad-not-loaded" in " ".join(root.evidence)


def test_without_a_line_of_fabric_managers_the_finding_keeps_its_general_repair(tmp_path: Path) -> None:
    """No line says which way it failed (here: nothing after the NVLink5 start line): neither specific repair."""
    log = START + "Starting NVIDIA fabric manager daemon for NVLink5+...\n"
    root = _root(_fabric(tmp_path, log))
    assert "modprobe" not in root.fix and "apt-mark hold" not in root.fix
    assert "run the NVIDIA Fabric Manager of the driver's exact version" in root.fix


def test_nothing_to_do_after_the_nvlink5_start_is_not_taken_for_missing_modules(tmp_path: Path) -> None:
    """On the NVLink5 path the driver container already waited for mlx5_core and ib_umad."""
    nothing = (
        "request to query NVSwitch device information from NVSwitch driver failed with error:NV_WARN_NOTHING_TO_DO\n"
    )
    root = _root(_fabric(tmp_path, START + "Starting NVIDIA fabric manager daemon for NVLink5+...\n" + nothing))
    assert "modprobe" not in root.fix


def test_a_driver_container_waiting_for_the_infiniband_modules_is_told_to_have_them_loaded(tmp_path: Path) -> None:
    """The NVLink5 path found (SW_MNG in a management port's VPD) and ib_umad not yet loaded: the driver container
    waits, not ready, and its own line names the modules."""
    wait = "Detected NVLink5+ system\n" + "waiting for the mlx5_core and ib_umad kernel modules to be loaded\n" * 3
    report = _fabric(tmp_path, START + wait, labels=BLACKWELL, ready=False)
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.id, root.link) == ("driver.not-ready", "driver")
    assert "modprobe mlx5_core mlx5_ib ib_umad" in root.fix
    assert "catalog: driver-container.nvlink5-modules-wait" in " ".join(root.evidence)


def test_a_fabric_that_came_up_stays_quiet(tmp_path: Path) -> None:
    report = _fabric(tmp_path, START + "Starting NVIDIA fabric manager daemon...\n", validated=True)
    assert not [f for f in report.findings if f.severity is Severity.ERROR], report.ids()


def _pod(
    name: str,
    node: str,
    *,
    init: list[dict[str, Any]] | None = None,
    owner: str = "",
    ready: bool = True,
    containers: tuple[str, ...] = ("nvidia-driver-ctr",),
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "gpu-operator"}
    if owner:
        meta["ownerReferences"] = [{"kind": "DaemonSet", "name": owner}]
    statuses = [{"name": c, "ready": ready, "state": {"running": {}}} for c in containers]
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": c} for c in containers]},
        "status": {"initContainerStatuses": init or [], "containerStatuses": statuses},
    }


def _driver(namespace: str, daemonset: str) -> bool:
    return daemonset.startswith("nvidia-driver")


def test_only_the_driver_logs_of_nodes_whose_cuda_validation_fails_are_read() -> None:
    failing = [{"name": "cuda-validation", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]
    passed = [{"name": "cuda-validation", "state": {"terminated": {"reason": "Completed"}}}]
    pods = [
        _pod("nvidia-cuda-validator-a", "a", init=failing),
        _pod("nvidia-cuda-validator-b", "b", init=passed),
        _pod(
            "nvidia-driver-daemonset-a",
            "a",
            owner="nvidia-driver-daemonset",
            containers=("nvidia-driver-ctr", "nvidia-peermem-ctr"),
        ),
        _pod("nvidia-driver-daemonset-b", "b", owner="nvidia-driver-daemonset"),
        _pod("nvidia-device-plugin-daemonset-a", "a", owner="nvidia-device-plugin-daemonset"),
    ]
    read = fabric_log_candidates(
        pods, namespace="gpu-operator", is_driver=lambda ns, ds: ds.startswith("nvidia-driver")
    )
    assert [key for key, _ in read] == [("gpu-operator", "nvidia-driver-daemonset-a", "nvidia-driver-ctr")]
    pods[2]["status"]["containerStatuses"][0]["ready"] = False  # a failing driver is read as failing already
    assert fabric_log_candidates(pods, namespace="gpu-operator", is_driver=_driver) == []


def test_a_driver_container_that_fails_fast_on_fabric_manager_quotes_the_same_line() -> None:
    """Images with NVIDIA/gpu-driver-container 223687f return from _start_daemons when Fabric Manager fails: the
    driver pod crash-loops and its not-ready finding names the refusal and its repair (no CUDA validation runs)."""
    refusal = (
        "Starting NVIDIA fabric manager daemon...\n"
        "fabric manager NVIDIA GPU driver interface version 580.105.08 don't match with driver version 580.82.07. "
        "Please update with matching NVIDIA driver package.\n"
    )
    scenario = "name: t\nstack: gpu-operator\nnodes:\n  - {name: hgx-2, preset: h100-80gb-x8}\n"
    report = diagnosed(scenario, crashing_pod("nvidia-driver-daemonset", "nvidia-driver-ctr", "hgx-2", refusal))
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.id, root.link) == ("driver.not-ready", "driver")
    assert "catalog: fabric-manager.driver-version-mismatch" in " ".join(root.evidence)
    assert "bundled Fabric Manager is its driver's version" in root.fix
