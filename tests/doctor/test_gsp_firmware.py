"""A driver container whose module finds no GSP firmware: the repair follows how the driver was installed.

The module's line is NVIDIA/open-gpu-kernel-modules src/nvidia/arch/nvalloc/unix/src/osinit.c@595.45.04's
(RmFetchGspRmImages, NV_PRINTF's function prefix), the kernel loader's is torvalds/linux
drivers/base/firmware_loader/main.c@v6.8's for the file kernel-open/nvidia/nv.c names (nvidia/<version>/gsp_*.bin).
A precompiled image before NVIDIA/gpu-driver-container 070e32e (#175) carried its firmware under the mount that hides
it; the driver container that builds the module installs it after the mount and sets the firmware search path
(ubuntu22.04/nvidia-driver@06a208c _load_driver).
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import crashing_pod, diagnosed, pod_image

from gpuchain.doctor import Report, Severity
from gpuchain.doctor.model import FixOp

KERNEL = "5.15.0-1071-aws"


def _driver_crash(log: str, *, version: str, node: str = "gpu-a10-2", image: str = "") -> Report:
    """A GPU Operator node (kernel `KERNEL`) whose driver container crash-loops after writing ``log``; its image
    ``image`` where given (the operator's precompiled tag names the node's kernel)."""
    scenario = (
        f"name: t\nstack: gpu-operator\npolicy: {{driver: {{version: {version}}}}}\nnodes:\n"
        f"  - {{name: {node}, preset: l4-x2, kernel: {KERNEL}}}\n"
    )
    crash = crashing_pod("nvidia-driver-daemonset", "nvidia-driver-ctr", node, log, restarts=6)
    return diagnosed(scenario, crash, *([pod_image("nvidia-driver-daemonset", image)] if image else []))


def _root(report: Report) -> Any:
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.id, root.link) == ("driver.not-ready", "driver")
    return root


MODULE = (
    "Loading NVIDIA driver kernel modules...\n"
    "[   57.120044] NVRM: RmFetchGspRmImages: No firmware image found\n"
    "[   57.120051] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x61:0x56:1697)\n"
)
LOADER = (
    "Loading NVIDIA driver kernel modules...\n"
    "[   61.004113] nvidia 0000:65:00.0: Direct firmware load for nvidia/550.90.07/gsp_ga10x.bin failed with error -2\n"
    "[   61.004120] NVRM: GPU 0000:65:00.0: RmInitAdapter failed! (0x61:0x56:1697)\n"
)


def test_a_precompiled_driver_without_its_firmware_is_built_again_or_replaced() -> None:
    """The operator's precompiled tag (<branch>-<node kernel>-<os>, gpu-operator resolveDriverTag) says so."""
    image = f"nvcr.io/nvidia/driver:570-{KERNEL}-ubuntu22.04"
    root = _root(_driver_crash(MODULE, version="570.172.08", image=image))
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert root.action.changes == {"spec": {"driver": {"usePrecompiled": False}}}
    assert "070e32e" in root.fix and "firmware search path" in root.fix
    evidence = " ".join(root.evidence)
    assert "catalog: nvidia-kernel.gsp-firmware-missing" in evidence and f"built for kernel {KERNEL}" in evidence


def test_a_driver_container_that_builds_the_module_gets_the_hosts_search_path_cleared() -> None:
    """Another line (the kernel loader's), another version and node: the search path, not the precompiled image."""
    root = _root(_driver_crash(LOADER, version="550.90.07", node="edge-9"))
    assert "firmware_class.path=" in root.fix and "/run/nvidia/driver/lib/firmware" in root.fix
    assert "usePrecompiled" not in root.fix and "kubectl cordon edge-9" in root.fix
    assert "catalog: kernel.gsp-firmware-load-failed" in " ".join(root.evidence)


def test_an_adapter_failure_without_a_firmware_line_keeps_its_own_repair() -> None:
    """RmInitAdapter alone (a GPU that does not answer) is not taken for missing firmware."""
    log = "[   57.120051] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x62:0x56:1017)\n"
    image = f"nvcr.io/nvidia/driver:570-{KERNEL}-ubuntu22.04"
    root = _root(_driver_crash(log, version="570.172.08", image=image))
    assert "catalog: nvidia-kernel.rm-init-adapter-failed" in " ".join(root.evidence)
    assert "usePrecompiled" not in root.fix and "firmware_class" not in root.fix
