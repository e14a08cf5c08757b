"""A dcgm-exporter whose embedded DCGM host engine runs without root's privileges.

DCGM refuses to watch fields with "Host engine is running as non-root" (NVIDIA/DCGM dcgmlib/src/dcgm_errors.c) where
the exporter's container has no SYS_ADMIN; NVIDIA's static dcgm-exporter.yaml lacked it until NVIDIA/dcgm-exporter#403.
The doctor names the exporter and patches its own DaemonSet to run as root with SYS_ADMIN, keeping capabilities the
container already adds; an exporter that runs with it and serves is no error."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp

SCENARIO = (
    "name: t\nstack: nvidia-device-plugin\n"
    "nodes:\n"
    "  - {name: w1, preset: l4-x2, hostDriver: '535.183.01'}\n"
    "  - {name: w2, preset: l4-x2, hostDriver: '535.183.01'}\n"
    "  - {name: w3, preset: l4-x2, hostDriver: '535.183.01'}\n"
)
FATAL = 'time="2025-03-01T10:00:02Z" level=fatal msg="Failed to watch metrics: Error watching fields: {}"\n'


def _exporter(*, crashing: list[str], error: str = "Host engine is running as non-root") -> list[dict[str, Any]]:
    """A hand-made exporter DaemonSet in namespace telemetry on every node, crash-looping on ``crashing``."""
    edits: list[dict[str, Any]] = [
        {
            "do": "add-daemonset",
            "namespace": "telemetry",
            "name": "gpu-metrics",
            "image": "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.5-3.4.1-ubuntu22.04",
            "labels": {"app.kubernetes.io/name": "dcgm-exporter"},
            "containers": ["exporter"],
            "nodes": ["w1", "w2", "w3"],
        }
    ]
    for node in crashing:
        edits.append(
            {
                "do": "pod",
                "daemonset": "gpu-metrics",
                "namespace": "telemetry",
                "node": node,
                "containers": [
                    {
                        "name": "exporter",
                        "restarts": 6,
                        "state": {"waiting": "CrashLoopBackOff", "message": "back-off 2m40s"},
                        "last": {"terminated": "Error", "exitCode": 1},
                    }
                ],
                "logs": {
                    "exporter": 'time="2025-03-01T10:00:01Z" level=info msg="Starting dcgm-exporter"\n'
                    + FATAL.format(error)
                },
            }
        )
    return edits


def test_a_host_engine_without_root_is_the_exporters_fault_and_its_daemonset_gets_root_and_sys_admin() -> None:
    report = diagnosed(SCENARIO, *_exporter(crashing=["w1", "w3"]))
    errors = [f for f in report.findings if f.severity is Severity.ERROR]
    assert sorted((f.id, f.node) for f in errors) == [("exporter.not-ready", "w1"), ("exporter.not-ready", "w3")]
    assert not [f for f in report.findings if f.id == "log.unrecognised"]
    found = errors[0]
    assert "catalog: dcgm.requires-root" in " ".join(found.evidence)
    assert found.action is not None and found.action.op is FixOp.PATCH_DAEMONSET
    assert found.action.target == "telemetry/gpu-metrics"
    (container,) = found.action.changes["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "exporter"
    assert container["securityContext"] == {
        "runAsNonRoot": False,
        "runAsUser": 0,
        "capabilities": {"add": ["SYS_ADMIN"]},
    }
    assert "SYS_ADMIN" in found.fix and "dcgm-exporter#403" in found.fix


def test_another_dcgm_error_gets_no_root_patch() -> None:
    report = diagnosed(
        SCENARIO, *_exporter(crashing=["w2"], error="Profiling is not supported for this group of GPUs or GPU.")
    )
    (found,) = [f for f in report.findings if f.severity is Severity.ERROR]
    assert found.link == "exporter" and "SYS_ADMIN" not in found.fix


def test_an_exporter_that_runs_is_quiet() -> None:
    report = diagnosed(SCENARIO, *_exporter(crashing=[]))
    assert not [f for f in report.findings if f.severity is Severity.ERROR]
