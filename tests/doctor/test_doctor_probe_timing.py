"""An operand the kubelet kills or holds unready through its probes while its log names no error: the probe's
timing is repaired on the DaemonSet (timeoutSeconds for an endpoint slower than the probe waits, initialDelaySeconds
for a liveness probe that starts before the container serves), not an image upgrade or "read its log". The Events
are the kubelet's wording (kubernetes pkg/kubelet/prober/prober.go@v1.34.4, Go net/http's client timeout)."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.kube import POD
from gpuchain.sim.build import SimCluster

PLUGIN = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: g1, preset: l4-x2, hostDriver: '570.153.02'}\n"
EXPORTER = {
    "do": "add-daemonset",
    "namespace": "metrics",
    "name": "gpu-metrics",
    "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.3.1-ubuntu22.04",
    "containers": ["dcgm"],
    "nodes": ["g1"],
}
TIMEOUT = (
    'Get "http://10.1.2.3:9400/health": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
)
REFUSED = 'Get "http://10.1.2.3:9400/health": dial tcp 10.1.2.3:9400: connect: connection refused'
KILLED = {"reason": "Killing", "type": "Normal", "count": 3, "message": "Container dcgm failed liveness probe"}


def _exporter(events: list[dict[str, Any]], *, log: str = "", running: bool = True) -> dict[str, Any]:
    state = {"running": True} if running else {"waiting": "CrashLoopBackOff"}
    edit: dict[str, Any] = {
        "do": "pod",
        "daemonset": "gpu-metrics",
        "namespace": "metrics",
        "node": "g1",
        "containers": [
            {"name": "dcgm", "ready": False, "restarts": 6, "state": state, "last": {"terminated": "Error"}}
        ],
        "events": events,
    }
    if log:
        edit["logs"] = {"dcgm": log}
    return edit


def _unhealthy(kind: str, output: str) -> dict[str, Any]:
    return {"reason": "Unhealthy", "count": 20, "message": f"{kind} probe failed: {output}"}


def _root(report: Report) -> Finding:
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    return root


def _probe_timeout(seconds: int) -> Any:
    def edit(sim: SimCluster) -> None:
        pod = next(p for p in sim.cluster.list(POD) if p["metadata"]["name"].startswith("gpu-metrics-"))
        containers = [{**pod["spec"]["containers"][0], "readinessProbe": {"timeoutSeconds": seconds}}]
        sim.cluster.patch(
            POD, name=pod["metadata"]["name"], namespace="metrics", patch={"spec": {"containers": containers}}
        )

    return edit


def test_probes_that_time_out_get_a_longer_timeout_on_the_probes_that_failed() -> None:
    events = [_unhealthy("Readiness", TIMEOUT), _unhealthy("Liveness", TIMEOUT), KILLED]
    root = _root(diagnosed(PLUGIN, EXPORTER, _exporter(events)))
    assert (root.link, root.node) == ("exporter", "g1")
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    (container,) = root.action.changes["spec"]["template"]["spec"]["containers"]
    assert container == {
        "name": "dcgm",
        "livenessProbe": {"timeoutSeconds": 5},
        "readinessProbe": {"timeoutSeconds": 5},
    }
    assert "patch ds gpu-metrics --type strategic" in root.fix


def test_a_probe_already_given_more_than_the_default_is_given_more_again() -> None:
    events = [_unhealthy("Readiness", TIMEOUT)]
    root = _root(diagnosed(PLUGIN, EXPORTER, _exporter(events), _probe_timeout(4)))
    assert root.action is not None
    (container,) = root.action.changes["spec"]["template"]["spec"]["containers"]
    assert container == {"name": "dcgm", "readinessProbe": {"timeoutSeconds": 8}}


def test_a_liveness_probe_refused_while_the_log_shows_a_clean_start_gets_a_longer_initial_delay() -> None:
    log = 'time="2026-01-01T00:00:01Z" level=info msg="Starting dcgm-exporter"\n'
    events = [_unhealthy("Liveness", REFUSED), KILLED]
    root = _root(diagnosed(PLUGIN, EXPORTER, _exporter(events, log=log, running=False)))
    assert root.action is not None
    (container,) = root.action.changes["spec"]["template"]["spec"]["containers"]
    assert (
        container == {"name": "dcgm", "livenessProbe": {"initialDelaySeconds": 45}}
        and "initialDelaySeconds" in root.fix
    )


def test_a_container_whose_log_names_its_error_is_read_by_its_log_not_its_probes() -> None:
    log = 'time="2026-01-01T00:00:01Z" level=fatal msg="Failed to watch metrics: Error watching fields: boom"\n'
    events = [_unhealthy("Liveness", REFUSED), KILLED]
    root = _root(diagnosed(PLUGIN, EXPORTER, _exporter(events, log=log, running=False)))
    assert root.link == "exporter" and "initialDelaySeconds" not in root.fix and "timeoutSeconds" not in root.fix
