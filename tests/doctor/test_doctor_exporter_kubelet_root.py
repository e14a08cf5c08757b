"""The stack's own dcgm-exporter on a kubelet with another --root-dir: the GPU Operator mounts the pod-resources
socket at /var/lib/kubelet/pod-resources (NVIDIA/gpu-operator assets/state-dcgm-exporter/0800_daemonset.yaml@06faaf0c),
so the exporter runs ready and attributes no GPU to its pod. Only its log says so, so the doctor reads one such log
where GPU workloads run beside it, and none where none run.

The exporter's line: NVIDIA/dcgm-exporter internal/pkg/transformation/kubernetes.go@4.5.3-4.8.2
("failure connecting to '%s'; err: %w", the socket path its --pod-resources-kubelet-socket flag defaults to)."""

from __future__ import annotations

import json
from pathlib import Path

from gpuchain.doctor import run_doctor
from gpuchain.doctor.model import Report, Severity
from gpuchain.doctor.snapshot import gather, needs_logs

SOCKET_LINE = (
    'time="2025-03-02T10:00:41Z" level=error msg="Failed to collect metrics; err: failed to transform metrics for '
    "transform 'podMapper'; err: failure connecting to '/var/lib/kubelet/pod-resources/kubelet.sock'; err: context "
    'deadline exceeded"'
)
HEALTHY_LINE = 'time="2025-03-02T10:00:11Z" level=info msg="Starting webserver"'


def _case(tmp_path: Path, *, log: str, workloads: bool) -> tuple[Report, list[tuple[str, str, str]]]:
    """A GPU Operator node (kubelet root /var/lib/k0s/kubelet stands for any other root) whose exporter runs ready
    with ``log``; with or without GPU pods on it. The report and the logs the doctor asks for."""
    from sim.heldout import harness

    work = "  workloads:\n    - {name: train, namespace: ml, count: 2, gpus: 1, node: k0s-gpu-1}\n" if workloads else ""
    doc = f"""
name: x
source: gpuchain#0
base:
  stack: gpu-operator
  nodes:
    - {{name: k0s-gpu-1, preset: l4-x2}}
{work}edits:
  - do: pod
    daemonset: nvidia-dcgm-exporter
    node: k0s-gpu-1
    containers:
      - {{name: nvidia-dcgm-exporter, restarts: 0, ready: true, state: {{running: true}}}}
    logs: {{nvidia-dcgm-exporter: {json.dumps(log)}}}
expect: {{root: none, nodes: []}}
"""
    path = tmp_path / "x.yaml"
    path.write_text(doc)
    case = harness.load(path)
    return run_doctor(case.cluster, reader=case.read_log), needs_logs(gather(case.cluster))


def _exporter_read(reads: list[tuple[str, str, str]]) -> bool:
    return any(container == "nvidia-dcgm-exporter" for _, _, container in reads)


def test_the_stacks_exporter_that_cannot_reach_pod_resources_beside_gpu_pods_is_the_exporter(tmp_path: Path) -> None:
    report, reads = _case(tmp_path, log=f"{HEALTHY_LINE}\n{SOCKET_LINE}\n", workloads=True)
    assert _exporter_read(reads)
    roots = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert [(f.id, f.link, f.node) for f in roots] == [("exporter.running-with-errors", "exporter", "k0s-gpu-1")]
    fix = roots[0].fix
    # the repair for the operator's fixed mount, the kubelet roots that differ, and the exporter's own setting
    assert "bind-mount (or link) <root-dir>/pod-resources onto /var/lib/kubelet/pod-resources" in fix
    assert "/var/lib/k0s/kubelet" in fix and "/var/snap/microk8s/common/var/lib/kubelet" in fix
    assert "DCGM_POD_RESOURCES_KUBELET_SOCKET" in fix


def test_a_healthy_exporter_beside_gpu_pods_is_read_and_gives_no_finding(tmp_path: Path) -> None:
    report, reads = _case(tmp_path, log=f"{HEALTHY_LINE}\n", workloads=True)
    assert _exporter_read(reads)
    assert not [f for f in report.findings if f.link == "exporter" and f.severity is not Severity.INFO]


def test_the_exporter_log_is_not_read_where_no_gpu_pod_runs(tmp_path: Path) -> None:
    """Its pod attribution matters only for GPU pods: a cluster without them pays no read."""
    report, reads = _case(tmp_path, log=f"{SOCKET_LINE}\n", workloads=False)
    assert not _exporter_read(reads)
    assert not [f for f in report.findings if f.link == "exporter"]
