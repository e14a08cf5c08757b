"""A dcgm-exporter that serves but is not marked ready yet is no failure.

From 4.0.0-4.0.1 dcgm-exporter's /health (what its readiness probe asks) answers 200 whenever its web server runs
(NVIDIA/dcgm-exporter internal/pkg/server/server.go@4.0.0-4.0.1); before, it answered 503 until the first metrics.
So a pod of such a release that logged "Starting webserver", never restarted, logged no error and has no failed
probe is serving, and the doctor says nothing wrong of it; an older release, a failed probe or restarts keep the
not-ready error."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Report

SCENARIO = (
    "name: t\nstack: nvidia-device-plugin\n"
    "nodes:\n"
    "  - {name: g1, preset: t4-x4, hostDriver: '570.133.20'}\n"
    "  - {name: g2, preset: t4-x4, hostDriver: '570.133.20'}\n"
    "  - {name: g3, preset: t4-x4, hostDriver: '570.133.20'}\n"
)


def _log(release: str) -> str:
    exporter = release.split("-")[1]
    return (
        f'time=2026-02-11T07:00:01.010Z level=INFO msg="Starting dcgm-exporter" Version={exporter}\n'
        'time=2026-02-11T07:00:02.200Z level=INFO msg="DCGM successfully initialized!"\n'
        'time=2026-02-11T07:00:02.310Z level=INFO msg="Initializing system entities of type" deviceType=GPU\n'
        'time=2026-02-11T07:00:02.400Z level=INFO msg="Pipeline starting"\n'
        'time=2026-02-11T07:00:02.410Z level=INFO msg="Starting webserver"\n'
    )


def _exporter(release: str, *, restarts: int = 0, probe: str = "") -> list[dict[str, Any]]:
    """dcgm-exporter's own chart on every node, its pod on g2 Running but not ready, with a clean start-up log."""
    image = f"nvcr.io/nvidia/k8s/dcgm-exporter:{release}-ubuntu22.04"
    pod: dict[str, Any] = {
        "do": "pod",
        "daemonset": "metrics-exporter",
        "namespace": "observability",
        "node": "g2",
        "containers": [{"name": "exporter", "state": {"running": True}, "restarts": restarts}],
        "logs": {"exporter": _log(release)},
    }
    if probe:
        pod["events"] = [{"reason": "Unhealthy", "count": 4, "message": probe}]
    return [
        {
            "do": "add-daemonset",
            "namespace": "observability",
            "name": "metrics-exporter",
            "image": image,
            "labels": {"app.kubernetes.io/name": "dcgm-exporter", "app.kubernetes.io/instance": "metrics"},
            "containers": ["exporter"],
            "nodes": ["g1", "g2", "g3"],
        },
        pod,
    ]


def _exporter_errors(report: Report) -> list[Any]:
    return [f for f in report.findings if f.severity is Severity.ERROR and f.link == "exporter"]


def test_an_exporter_that_started_its_web_server_and_is_not_ready_yet_is_no_error() -> None:
    assert not _exporter_errors(diagnosed(SCENARIO, *_exporter("4.2.3-4.1.1")))


def test_an_exporter_before_its_health_answered_while_serving_stays_an_error() -> None:
    (found,) = _exporter_errors(diagnosed(SCENARIO, *_exporter("3.3.8-3.6.0")))
    assert (found.id, found.node) == ("exporter.not-ready", "g2")


def test_a_failing_readiness_probe_or_a_restart_stays_an_error() -> None:
    refused = "Readiness probe failed: Get http://10.1.2.3:9400/health: dial tcp 10.1.2.3:9400: connect: refused"
    assert _exporter_errors(diagnosed(SCENARIO, *_exporter("4.2.3-4.1.1", probe=refused)))
    assert _exporter_errors(diagnosed(SCENARIO, *_exporter("4.2.3-4.1.1", restarts=3)))
