"""A user's GPU pod that the scheduler placed and the device plugin gave a GPU, failing because its container has
no driver library: the runtime that started it is not nvidia. Read from the pod's own state (CrashLoopBackOff,
its last run's termination message), mapped to the toolkit link by what the workload's source says it means.

Facts: the message is PyTorch's for cudaErrorInsufficientDriver with no driver found (pytorch/pytorch
c10/cuda/CUDAFunctions.cpp@68e217b9e71fcecbd34d831dd3e3e5a4ea9028fd, device_count_impl); the container states as
the kubelet reports them (kubernetes pkg/kubelet/kuberuntime@v1.34.4: waiting CrashLoopBackOff, lastState
terminated Error with the termination message); RuntimeClass node.k8s.io/v1 with handler nvidia as NVIDIA's
operator creates it (NVIDIA/gpu-operator assets/state-container-toolkit).
"""

from __future__ import annotations

import json
from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor.model import FixOp, Report
from gpuchain.kube import POD, RUNTIME_CLASS
from gpuchain.sim.build import SimCluster

STANDALONE = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, hostDriver: 550.54.15}\n"
SAID = (
    'Traceback (most recent call last):\n  File "/app/train.py", line 12, in <module>\n'
    "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a "
    "driver from http://www.nvidia.com/Download/index.aspx"
)


def failing_gpu_pod(runtime_class: str = "", said: str = SAID, reason: str = "Error") -> Any:
    """An edit: Deployment ml/train's pod on n1 with one GPU, crash-looping with ``said`` as its last run's
    termination message (``reason``); PyTorch's no-driver message by default. The node's default runtime is not
    nvidia, so the device plugin, which registered, runs under RuntimeClass nvidia (NVIDIA's chart's
    runtimeClassName value): a plugin without one that found NVML would say the default runtime is nvidia."""

    def edit(sim: SimCluster) -> None:
        if sim.cluster.get_or_none(RUNTIME_CLASS, name="nvidia") is None:
            nvidia = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}}
            sim.cluster.create({**nvidia, "handler": "nvidia"})
        for plugin in sim.cluster.list(POD):
            if plugin["metadata"]["name"].startswith("nvidia-device-plugin"):
                name, ns = plugin["metadata"]["name"], plugin["metadata"]["namespace"]
                sim.cluster.patch(POD, name=name, namespace=ns, patch={"spec": {"runtimeClassName": "nvidia"}})
        spec: dict[str, Any] = {
            "nodeName": "n1",
            "containers": [
                {
                    "name": "train",
                    "image": "pytorch/pytorch:2.5.1-cuda12.4",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        }
        if runtime_class:
            spec["runtimeClassName"] = runtime_class
        status = {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "train",
                    "ready": False,
                    "restartCount": 5,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"reason": reason, "exitCode": 1, "message": said}},
                }
            ],
        }
        meta = {
            "name": "train-7c9f8-abcde",
            "namespace": "ml",
            "labels": {"pod-template-hash": "7c9f8"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "train-7c9f8", "controller": True}],
        }
        sim.cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status})

    return edit


def _found(report: Report) -> list[Any]:
    return [f for f in report.findings if f.id == "workload.no-driver-in-pod"]


def test_a_gpu_pod_without_the_driver_in_its_container_gets_the_nvidia_runtime_class_on_its_deployment() -> None:
    (found,) = _found(diagnosed(STANDALONE, failing_gpu_pod()))
    assert found.root and (found.link, found.node) == ("toolkit", "n1")
    assert any("Found no NVIDIA driver" in e for e in found.evidence)
    assert found.action is not None and found.action.op is FixOp.PATCH_WORKLOAD
    assert found.action.target == "Deployment/ml/train"
    patch = {"spec": {"template": {"spec": {"runtimeClassName": "nvidia"}}}}
    assert (
        f"kubectl -n ml patch deployment train --type merge -p '{json.dumps(patch, separators=(',', ':'))}'"
        in found.fix
    )


def test_a_gpu_pod_that_already_names_a_runtime_class_is_not_told_to() -> None:
    assert not _found(diagnosed(STANDALONE, failing_gpu_pod("nvidia")))
