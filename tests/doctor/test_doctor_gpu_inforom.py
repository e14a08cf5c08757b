"""A GPU whose infoROM is corrupted: NVML answers NVML_ERROR_CORRUPTED_INFOROM (go-nvml pkg/nvml/nvml.h: "infoROM is
corrupted"), nvidia-smi warns "WARNING: infoROM is corrupted at gpu <bus id>" and exits 14, so NVIDIA's driver
validation and the driver container's nvidia-smi startup probe fail though the driver loaded (docs.nvidia.com
gpu-operator troubleshooting.html, "infoROM is corrupted (nvidia-smi return code 14)": replace the faulty GPU). The
held-out case (tests/sim/heldout57 h57-02) is a one-GPU P100 worker; here an eight-GPU A100 node, another bus id, and
the warning in the probe's Event alone.
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor.model import Report, Severity

SCENARIO = "name: t\nstack: gpu-operator\nnodes:\n  - {name: dgx-07, preset: a100-40gb-x8}\n  - {name: dgx-08, preset: a100-40gb-x8}\n"
WARNING = "WARNING: infoROM is corrupted at gpu 0000:B7:00.0"
VALIDATION = (
    "running command chroot with args [/run/nvidia/driver nvidia-smi]\n"
    "+-----------------------------------------------------------------------------------------+\n"
    "| NVIDIA-SMI 570.124.06             Driver Version: 570.124.06     CUDA Version: 12.8     |\n"
    "+-----------------------------------------------------------------------------------------+\n"
    f"{WARNING}\n14\n"
)


def _validation_fails() -> dict[str, Any]:
    return {
        "do": "pod",
        "daemonset": "nvidia-operator-validator",
        "node": "dgx-07",
        "init": [
            {
                "name": "driver-validation",
                "restarts": 5,
                "state": {"waiting": "CrashLoopBackOff"},
                "last": {"terminated": "Error", "exitCode": 1},
            }
        ],
        "logs": {"driver-validation": VALIDATION},
    }


def _probe_fails() -> dict[str, Any]:
    return {
        "do": "pod",
        "daemonset": "nvidia-driver-daemonset",
        "node": "dgx-07",
        "containers": [
            {
                "name": "nvidia-driver-ctr",
                "ready": False,
                "restarts": 2,
                "state": {"running": True},
                "last": {"terminated": "Error", "exitCode": 137},
            },
        ],
        "events": [{"reason": "Unhealthy", "count": 40, "message": f"Startup probe failed: +---+\n{WARNING}"}],
    }


def _errors(report: Report) -> list[tuple[str, str | None]]:
    return [(f.id, f.node) for f in report.findings if f.severity is Severity.ERROR]


def test_a_validation_that_fails_on_a_corrupted_inforom_is_the_gpu_to_replace() -> None:
    report = diagnosed(SCENARIO, _validation_fails())
    assert _errors(report) == [("node.gpu-inforom-corrupted", "dgx-07")]
    (found,) = [f for f in report.findings if f.id == "node.gpu-inforom-corrupted"]
    assert found.link == "node" and found.root
    assert "replace the GPU at 0000:B7:00.0" in found.fix and "kubectl uncordon dgx-07" in found.fix
    assert "nvml.corrupted-inforom" in " ".join(found.evidence)


def test_the_driver_containers_probe_alone_says_it_too() -> None:
    report = diagnosed(SCENARIO, _probe_fails())
    assert ("node.gpu-inforom-corrupted", "dgx-07") in _errors(report)
    assert not [e for e in _errors(report) if e[0].startswith("driver.")]


def test_a_node_whose_nvidia_smi_passes_is_quiet() -> None:
    assert _errors(diagnosed(SCENARIO)) == []
