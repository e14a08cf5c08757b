"""The operator's driver container over a host driver it cannot unload: besides running on the host's driver, the
repair that keeps the operator's is the host's taken off. On an NVSwitch board (eight SXM GPUs) the host driver
most often came with Fabric Manager's meta package cuda-drivers-fabricmanager-<branch>, which depends on the driver,
where nvidia-fabricmanager-<branch> depends on none (NVIDIA/gpu-operator#163, the maintainer's answer). The driver
container's line is NVIDIA/gpu-driver-container's (catalog gpu-driver-container.driver-in-use).
"""

from __future__ import annotations

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity

IN_USE = "Unloading NVIDIA driver kernel modules...\nCould not unload NVIDIA driver kernel modules, driver is in use\n"


def _conflict_fix(preset: str) -> str:
    scenario = (
        "name: t\nstack: gpu-operator\npolicy: {driver: {version: 460.32.03}}\nnodes:\n"
        f"  - {{name: n1, preset: {preset}}}\n"
    )
    crash = {"name": "nvidia-driver-ctr", "restarts": 5, "state": {"waiting": "CrashLoopBackOff"}}
    report = diagnosed(
        scenario,
        {
            "do": "pod",
            "daemonset": "nvidia-driver-daemonset",
            "node": "n1",
            "containers": [{**crash, "last": {"terminated": "Error", "exitCode": 1}}],
            "logs": {"nvidia-driver-ctr": IN_USE},
        },
    )
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.id, root.link) == ("driver.host-driver-conflict", "driver")
    return root.fix


def test_on_an_nvswitch_board_the_fabric_manager_package_without_the_driver_is_named() -> None:
    fix = _conflict_fix("a100-40gb-x8")
    assert "remove the host's NVIDIA driver packages and reboot" in fix
    assert "cuda-drivers-fabricmanager-460 meta package" in fix and "install nvidia-fabricmanager-460 alone" in fix


def test_elsewhere_only_the_host_driver_is_taken_off() -> None:
    fix = _conflict_fix("t4-x4")
    assert "remove the host's NVIDIA driver packages and reboot" in fix and "fabricmanager" not in fix
