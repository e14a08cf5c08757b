"""An operand the kernel OOM-kills again and again, seen between two kills: Running and ready, but restarted several
times, its last end "OOMKilled" (the kubelet's lastState.terminated.reason for a container killed at its cgroup
memory limit). It is killed again at the next peak of what it serves (more GPUs, more metrics), so the repair is its
memory limit as for a crash-looping one; a pod restarted once, or for another reason, stays healthy.
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Report

OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1, preset: a100-40gb-x8}\n  - {name: n2, preset: t4-x4}\n"


def _exporter(restarts: int, reason: str) -> dict[str, Any]:
    running = {"name": "nvidia-dcgm-exporter", "restarts": restarts, "ready": True, "state": {"running": True}}
    return {
        "do": "pod",
        "daemonset": "nvidia-dcgm-exporter",
        "node": "n1",
        "containers": [{**running, "last": {"terminated": reason, "exitCode": 137}}],
    }


def _errors(report: Report) -> list[Any]:
    return [f for f in report.findings if f.severity is Severity.ERROR]


def test_an_exporter_running_between_oom_kills_gets_its_memory_limit_raised() -> None:
    (found,) = _errors(diagnosed(OPERATOR, _exporter(5, "OOMKilled")))
    assert (found.link, found.node, found.root) == ("exporter", "n1", True)
    assert '"dcgmExporter":{"resources":{"limits":{"memory":"512Mi"}}}' in found.fix
    assert "terminated OOMKilled (exit 137), 5 restarts" in " ".join(found.evidence)


def test_one_oom_kill_or_restarts_for_another_reason_are_no_fault() -> None:
    assert not _errors(diagnosed(OPERATOR, _exporter(1, "OOMKilled")))
    assert not _errors(diagnosed(OPERATOR, _exporter(5, "Error")))
