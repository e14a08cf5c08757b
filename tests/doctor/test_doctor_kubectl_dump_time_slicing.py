"""A plain ``kubectl cluster-info dump`` of a node whose GPUs NVIDIA's device plugin shares by time-slicing: the dump
has none of the plugin's ConfigMaps and no GPU Feature Discovery runs to label the sharing, but the plugin's own log
prints the config it runs at its start (NVIDIA/k8s-device-plugin cmd/nvidia-device-plugin/main.go@v0.17.0: "Running
with config:" and the config as indented JSON), so a GPU pod out of device memory beside running co-tenants is read as
the time-sliced GPU's missing memory isolation, as live; a plugin that prints no sharing leaves it the pod's own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from doctor.small_cluster import built

from gpuchain.doctor import Severity
from gpuchain.doctor.diagnose import diagnose
from gpuchain.doctor.dump import read_dump, write_dump
from gpuchain.doctor.model import Report
from gpuchain.sim.build import SimCluster

NODE = "l4-a"
CLUSTER = f"name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: {NODE}, preset: l4-x2}}\n  - {{name: cpu, gpu: false}}\n"
OOM = (
    "Loading checkpoint shards: 100%|##########| 4/4\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total capacity of 22.05 GiB "
    "of which 1.12 GiB is free."
)


def _plugin_log(replicas: int) -> str:
    """The device plugin's start as it logs it: the klog header line, then the config it runs as indented JSON."""
    sharing: dict[str, Any] = (
        {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "devices": "all", "replicas": replicas}]}}
        if replicas
        else {}
    )
    config = {
        "version": "v1",
        "flags": {"migStrategy": "none", "failOnInitError": True, "plugin": {"deviceListStrategy": ["envvar"]}},
        "resources": {"gpus": [{"pattern": "*", "name": "nvidia.com/gpu"}]},
        "sharing": sharing,
    }
    return (
        "I1207 09:00:01.100000       1 main.go:235] Starting NVIDIA Device Plugin\n"
        "I1207 09:00:01.120000       1 main.go:353] \nRunning with config:\n"
        + json.dumps(config, indent=2)
        + "\nI1207 09:00:01.300000       1 server.go:195] Starting GRPC server for 'nvidia.com/gpu'\n"
        "I1207 09:00:01.310000       1 server.go:146] Registered device plugin for 'nvidia.com/gpu' with Kubelet"
    )


def _gpu_pod(name: str, log: str) -> Any:
    """An edit: a Deployment's pod running on the node with one nvidia.com/gpu, its log ``log``."""

    def edit(sim: SimCluster) -> None:
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-5f7c9d8b6-x2k4p",
                    "namespace": "apps",
                    "ownerReferences": [{"kind": "ReplicaSet", "name": f"{name}-5f7c9d8b6", "controller": True}],
                },
                "spec": {
                    "nodeName": NODE,
                    "containers": [
                        {"name": name, "image": "python:3.12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                    ],
                },
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "containerStatuses": [
                        {
                            "name": name,
                            "ready": True,
                            "restartCount": 0,
                            "state": {"running": {"startedAt": "2026-12-07T09:05:00Z"}},
                        }
                    ],
                },
            }
        )
        sim.cluster.set_logs(f"{name}-5f7c9d8b6-x2k4p", namespace="apps", container=name, text=log)

    return edit


def _shared(replicas: int) -> list[Any]:
    """Edits: the node announcing its 2 GPUs ``replicas`` times each, the plugin's log saying it runs that config."""
    gpus = str(2 * (replicas or 1))
    return [
        {"do": "node", "node": NODE, "capacity": {"nvidia.com/gpu": gpus}, "allocatable": {"nvidia.com/gpu": gpus}},
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "namespace": "kube-system",
            "node": NODE,
            "logs": {"nvidia-device-plugin-ctr": _plugin_log(replicas)},
        },
    ]


def _from_kubectl_dump(sim: SimCluster, where: Path) -> Report:
    write_dump(sim.cluster, where, extras=False)
    return diagnose(read_dump(where))


def test_an_oom_beside_co_tenants_on_a_gpu_the_plugin_log_says_is_time_sliced(tmp_path: Path) -> None:
    sim = built(CLUSTER, *_shared(4), _gpu_pod("embedder", "serving on :8080"), _gpu_pod("chat", OOM))
    roots = [f for f in _from_kubectl_dump(sim, tmp_path).findings if f.root and f.severity is Severity.ERROR]
    assert [(f.id, f.node) for f in roots] == [("device-plugin.time-sliced-oom", NODE)]
    assert any("Running with config: sharing.timeSlicing replicas 4" in e for e in roots[0].evidence)
    assert "apps/embedder-5f7c9d8b6-x2k4p" in roots[0].fix


def test_a_plugin_log_without_sharing_leaves_the_oom_the_pods_own(tmp_path: Path) -> None:
    sim = built(CLUSTER, *_shared(0), _gpu_pod("embedder", "serving on :8080"), _gpu_pod("chat", OOM))
    report = _from_kubectl_dump(sim, tmp_path)
    assert "device-plugin.time-sliced-oom" not in {f.id for f in report.findings}


def test_a_time_sliced_node_with_no_oom_is_quiet_in_a_kubectl_dump(tmp_path: Path) -> None:
    sim = built(CLUSTER, *_shared(4), _gpu_pod("embedder", "serving on :8080"), _gpu_pod("chat", "ready"))
    assert not [f for f in _from_kubectl_dump(sim, tmp_path).findings if f.severity is Severity.ERROR]
