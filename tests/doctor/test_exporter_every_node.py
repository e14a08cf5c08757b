"""A fault every pod of an exporter DaemonSet shows is reported on every node it holds, with one log read.

The live doctor reads one running exporter pod's log per DaemonSet (snapshot._log_candidates); the others run from
the same template (the same pod-resources hostPath, the same flags) on nodes built alike, so they fail alike and say
so through their read sibling (doctor/siblings.py). Where a node differs (its kubelet, kernel or GPU) or a pod runs
another template (another image), it speaks only for itself.

The exporter's line: NVIDIA/dcgm-exporter internal/pkg/transformation/kubernetes.go@4.5.3-4.8.2 ("failure connecting
to '%s'; err: %w"), its pod-resources flag's default socket (NVIDIA/dcgm-exporter#199 made it configurable); pool
names, kubelet root, releases and counts are stand-ins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.heldout9.harness import load

from gpuchain.doctor import run_doctor
from gpuchain.doctor.model import Finding, Severity
from gpuchain.doctor.snapshot import gather, needs_logs
from gpuchain.kube import POD

FAILING = (
    'time="2025-07-14T08:21:09Z" level=error msg="Failed to collect metrics; err: failed to transform metrics for '
    "transform 'podMapper'; err: failure connecting to '/var/lib/kubelet/pod-resources/kubelet.sock'; err: context "
    'deadline exceeded"'
)
HEALTHY = 'time="2025-07-14T08:20:31Z" level=info msg="Starting webserver"'
POOL = ["h100-pool-a-0", "h100-pool-a-1", "h100-pool-a-2"]


def _run(
    tmp_path: Path, *, log: str, edits: list[dict[str, Any]] | None = None, revision_on: str = ""
) -> tuple[list[Finding], int]:
    """Three alike nodes whose kubelet keeps its root under /mnt/kubelet (the plugin's hostPath follows it) and a
    dcgm-exporter release of its own mounting the default pod-resources path; each exporter pod logs ``log``; the pod
    on ``revision_on`` made from another revision of the template. The error findings, and how many exporter logs
    the doctor asks for."""
    doc = {
        "name": "exporter-every-node",
        "source": "NVIDIA/dcgm-exporter#199",
        "base": {
            "stack": "nvidia-device-plugin",
            "nodes": [{"name": "h100-pool-a", "count": 3, "preset": "h100-80gb-x8", "hostDriver": "550.127.05"}],
            "workloads": [{"name": "pretrain", "namespace": "research", "count": 3, "gpus": 8}],
        },
        "edits": [
            {
                "do": "daemonset",
                "namespace": "kube-system",
                "name": "nvidia-device-plugin-daemonset",
                "spec": {
                    "template": {
                        "spec": {
                            "volumes": [{"name": "device-plugin", "hostPath": {"path": "/mnt/kubelet/device-plugins"}}]
                        }
                    }
                },
            },
            {
                "do": "add-daemonset",
                "namespace": "observability",
                "name": "dcgm-exporter",
                "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04",
                "labels": {"app.kubernetes.io/name": "dcgm-exporter"},
                "containers": ["exporter"],
                "nodes": POOL,
            },
            {
                "do": "pod",
                "daemonset": "dcgm-exporter",
                "namespace": "observability",
                "containers": [{"name": "exporter", "ready": True, "state": {"running": True}}],
                "logs": {"exporter": log},
            },
            *(edits or []),
        ],
        "expect": {"root": "none"},
    }
    path = tmp_path / "case.yaml"
    path.write_text(json.dumps(doc))
    case = load(path)
    for pod in case.cluster.list(POD, namespace="observability"):
        if pod["spec"].get("nodeName") == revision_on:
            revision = {"metadata": {"labels": {"controller-revision-hash": "6f9d8c7b5"}}}
            case.cluster.patch(POD, name=pod["metadata"]["name"], patch=revision, namespace="observability")
    reads = [key for key in needs_logs(gather(case.cluster)) if key[2] == "exporter"]
    report = run_doctor(case.cluster, reader=case.read_log)
    return [f for f in report.findings if f.severity is Severity.ERROR], len(reads)


def _exporter_nodes(findings: list[Finding]) -> list[str]:
    return sorted(str(f.node) for f in findings if f.id == "exporter.running-with-errors")


def test_every_node_of_the_pool_is_named_with_one_exporter_log_read(tmp_path: Path) -> None:
    findings, reads = _run(tmp_path, log=f"{HEALTHY}\n{FAILING}\n")
    assert reads == 1
    assert _exporter_nodes(findings) == POOL
    inferred = [f for f in findings if "its log not read" in " ".join(f.evidence)]
    assert len(inferred) == 2 and all("DCGM_POD_RESOURCES_KUBELET_SOCKET" in f.fix for f in inferred)


def test_a_healthy_read_sibling_names_no_node(tmp_path: Path) -> None:
    findings, _ = _run(tmp_path, log=f"{HEALTHY}\n")
    assert _exporter_nodes(findings) == []


def test_a_node_built_otherwise_is_not_named_from_its_sibling(tmp_path: Path) -> None:
    """The last node runs another kernel and kubelet: its exporter's work may go otherwise, and its log was not read."""
    other = {
        "do": "node",
        "node": POOL[2],
        "nodeInfo": {"kernelVersion": "6.8.0-1015-nvidia", "kubeletVersion": "v1.31.2"},
    }
    findings, _ = _run(tmp_path, log=f"{FAILING}\n", edits=[other])
    assert POOL[2] not in _exporter_nodes(findings)
    assert POOL[0] in _exporter_nodes(findings)


def test_a_pod_of_another_template_is_not_named_from_its_sibling(tmp_path: Path) -> None:
    """A pod still on the DaemonSet's previous revision mounts what that revision mounted."""
    findings, _ = _run(tmp_path, log=f"{FAILING}\n", revision_on=POOL[1])
    assert POOL[1] not in _exporter_nodes(findings)
    assert POOL[2] in _exporter_nodes(findings)
