"""Volcano's vGPU device plugin, HAMi's plugin for Volcano's scheduler (Project-HAMi/volcano-vgpu-device-plugin):
the DaemonSet ``volcano-device-plugin`` with containers ``volcano-device-plugin`` and ``monitor`` from
``projecthami/volcano-vgpu-device-plugin`` (deployments/helm/volcano-vgpu-device-plugin/templates/daemonset.yaml),
announcing ``volcano.sh/vgpu-number`` instead of ``nvidia.com/gpu``; its log lines at start are NVIDIA's plugin's
(cmd/vgpu/main.go). Before v1.12.0 its Allocate took the oldest pod bound to the node whatever it asked
(pkg/plugin/vgpu/plugin.go@v1.11.0 "device number not matched"; fixed by commit 4faec4c). The held-out cases
(tests/sim/heldout59 h59-01 to h59-03) are T4 workers under Volcano v1.12; here L4 nodes, other names and versions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doctor.small_cluster import diagnosed
from sim.heldout9.harness import _apply as apply_edit

from gpuchain.doctor.model import Finding, Report, Severity
from gpuchain.kube.gpu_resources import is_gpu_resource, pod_gpu_requests

SCENARIO = (
    "name: t\nstack: none\nnodes:\n"
    "  - {name: cpu-1, gpu: false}\n"
    "  - {name: l4-1, preset: l4-x2, nfd: false, hostDriver: 570.172.08}\n"
    "  - {name: l4-2, preset: l4-x2, nfd: false, hostDriver: 570.172.08}\n"
)
IMAGE = "docker.io/projecthami/volcano-vgpu-device-plugin:v1.11.0"
VGPUS = {"volcano.sh/vgpu-number": 10, "volcano.sh/vgpu-memory": 23028, "volcano.sh/vgpu-cores": 100}
NO_NVML = (
    'I0115 03:12:40.102938       1 main.go:267] "Starting NVIDIA Device Plugin" version="unknown"\n'
    "I0115 03:12:40.103011       1 main.go:271] Failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND.\n"
    "E0115 03:12:40.103102       1 main.go:205] failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND\n"
)


def _created(obj: dict[str, Any]) -> Callable[[Any], None]:
    return lambda sim: apply_edit(sim.cluster, {"do": "create", "object": obj})


def _plugin(nodes: dict[str, bool]) -> list[Any]:
    """The plugin's DaemonSet and a pod on each node of ``nodes`` (node -> whether it runs ready)."""
    meta = {"labels": {"name": "volcano-device-plugin"}}
    containers = [{"name": "volcano-device-plugin", "image": IMAGE}, {"name": "monitor", "image": IMAGE}]
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "volcano-device-plugin", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": meta["labels"]},
            "template": {"metadata": meta, "spec": {"containers": containers}},
        },
        "status": {"desiredNumberScheduled": len(nodes), "numberReady": sum(nodes.values())},
    }
    edits: list[Any] = [_created(ds)]
    for i, (node, ready) in enumerate(sorted(nodes.items())):
        state = (
            {"running": {"startedAt": "2026-01-15T03:00:00Z"}} if ready else {"waiting": {"reason": "CrashLoopBackOff"}}
        )
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"volcano-device-plugin-{i}x7q",
                "namespace": "kube-system",
                **meta,
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "volcano-device-plugin", "controller": True}
                ],
            },
            "spec": {"nodeName": node, "containers": containers},
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "volcano-device-plugin", "ready": ready, "restartCount": 0 if ready else 6, "state": state}
                    | ({} if ready else {"lastState": {"terminated": {"reason": "Error", "exitCode": 1}}}),
                    {
                        "name": "monitor",
                        "ready": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": "2026-01-15T03:00:00Z"}},
                    },
                ],
            },
        }
        edits.append(_created(pod))
        if not ready:
            edits.append(
                {
                    "do": "pod",
                    "daemonset": "volcano-device-plugin",
                    "namespace": "kube-system",
                    "node": node,
                    "logs": {"volcano-device-plugin": NO_NVML},
                }
            )
        else:
            edits.append({"do": "node", "node": node, "capacity": VGPUS, "allocatable": VGPUS})
    return edits


def _errors(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.severity is Severity.ERROR]


def test_volcanos_vgpus_are_gpus_and_a_pod_asking_them_a_gpu_pod() -> None:
    assert is_gpu_resource("volcano.sh/vgpu-number") and not is_gpu_resource("volcano.sh/vgpu-memory")
    pod = {
        "spec": {
            "containers": [{"resources": {"limits": {"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "4000"}}}]
        }
    }
    assert pod_gpu_requests(pod) == {"volcano.sh/vgpu-number": 2}


def test_the_plugin_announcing_vgpus_on_every_node_is_healthy_and_read_as_hamis() -> None:
    report = diagnosed(SCENARIO, *_plugin({"l4-1": True, "l4-2": True}))
    assert report.stack["id"] == "hami" and "Volcano" in report.stack["notes"][0]
    assert _errors(report) == []


def test_a_plugin_without_nvml_on_a_node_nothing_marks_is_the_runtime_with_both_readings() -> None:
    runtime_class = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia"},
        "handler": "nvidia",
    }
    report = diagnosed(SCENARIO, _created(runtime_class), *_plugin({"l4-1": True, "l4-2": False}))
    (found,) = _errors(report)
    assert (found.id, found.link, found.node) == ("toolkit.runtime-not-default", "toolkit", "l4-2")
    assert "its chart's runtimeClassName=nvidia" in found.fix
    assert "if l4-2 has no GPU: keep the device plugin off it" in found.fix
    assert any("no label or capacity marks l4-2" in e for e in found.evidence)


def test_the_allocate_race_before_v1_12_is_the_plugin_to_upgrade() -> None:
    refused = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "infer-b-0.18b2", "namespace": "ml"},
        "involvedObject": {"kind": "Pod", "name": "infer-b-0", "namespace": "ml"},
        "type": "Warning",
        "reason": "UnexpectedAdmissionError",
        "message": "Allocate failed due to rpc error: code = Unknown desc = device number not matched, which is unexpected",
        "source": {"component": "kubelet", "host": "l4-1"},
    }
    report = diagnosed(SCENARIO, *_plugin({"l4-1": True, "l4-2": True}), _created(refused))
    (found,) = _errors(report)
    assert (found.id, found.node) == ("workload.admission-failed", "l4-1")
    assert "v1.12.0 or later" in found.fix and "restart kubelet" not in found.fix
    assert any("volcano-vgpu-device-plugin.device-number-not-matched" in e for e in found.evidence)
