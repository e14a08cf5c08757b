"""CUDA's "no CUDA-capable device is detected" in a GPU pod that names no RuntimeClass, on a node whose containerd keeps
runc its default runtime: runc does not act on the device plugin's NVIDIA_VISIBLE_DEVICES, so no device node reaches
the container and CUDA finds none. That is the toolkit link (the pod's runtime class, or nvidia made the default),
not a driver that does not serve the GPU.

Facts: the toolkit installer's set-as-default flag (NVIDIA/nvidia-container-toolkit
cmd/nvidia-ctk-installer/container/runtime/runtime.go), k3s's containerd that adds the nvidia runtime but never as
its default (k3s-io/k3s pkg/agent/containerd/runtimes.go), the CUDA runtime's words for cudaErrorNoDevice.
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed
from sim.heldout3.harness import _apply

from gpuchain.doctor.model import Severity
from gpuchain.kube import POD
from gpuchain.sim.build import SimCluster

NO_DEVICE = "cudaGetDeviceCount failed\nCUDA error: no CUDA-capable device is detected\nexiting\n"


def cluster(stack: str, node: str, extra: str = "") -> str:
    return (
        f"name: t\nstack: {stack}\nnodes:\n  - {{name: {node}, preset: l4-x2{extra}}}\n"
        f"workloads:\n  - {{name: infer, namespace: serve, count: 2, gpus: 1, node: {node}}}\n"
    )


def toolkit(value: str) -> Any:
    def edit(sim: SimCluster) -> None:
        _apply(
            sim.cluster,
            {"do": "policy", "spec": {"toolkit": {"env": [{"name": "CONTAINERD_SET_AS_DEFAULT", "value": value}]}}},
        )

    return edit


def said(node: str, text: str) -> dict[str, Any]:
    return {"do": "pod", "daemonset": "infer", "namespace": "serve", "node": node, "logs": {"main": text}}


def classed(sim: SimCluster) -> None:
    for pod in sim.cluster.list(POD, namespace="serve"):
        sim.cluster.patch(
            POD, name=pod["metadata"]["name"], namespace="serve", patch={"spec": {"runtimeClassName": "nvidia"}}
        )


def test_no_device_under_a_toolkit_told_not_to_default_is_the_runtime_class() -> None:
    report = diagnosed(cluster("gpu-operator", "infer-3"), toolkit("0"), said("infer-3", NO_DEVICE))
    (found,) = [f for f in report.findings if f.id == "workload.no-driver-in-pod"]
    assert found.node == "infer-3" and found.link == "toolkit" and found.root
    assert '"runtimeClassName":"nvidia"' in found.fix and "CONTAINERD_SET_AS_DEFAULT" in found.fix
    assert not [f for f in report.findings if f.id == "workload.cuda-unusable"]


def test_no_device_on_k3s_with_the_standalone_plugin_is_the_runtime_class() -> None:
    report = diagnosed(cluster("nvidia-device-plugin", "edge-9", ", distribution: k3s"), said("edge-9", NO_DEVICE))
    (found,) = [f for f in report.findings if f.id == "workload.no-driver-in-pod"]
    assert found.node == "edge-9" and found.link == "toolkit"
    assert '"runtimeClassName":"nvidia"' in found.fix and "default-runtime: nvidia" in found.fix


def test_a_pod_with_the_class_is_not_read_as_missing_the_runtime() -> None:
    report = diagnosed(cluster("gpu-operator", "infer-3"), toolkit("false"), classed, said("infer-3", NO_DEVICE))
    assert not [f for f in report.findings if f.id == "workload.no-driver-in-pod"]


def test_a_toolkit_left_default_is_not_read_as_missing_the_runtime() -> None:
    report = diagnosed(cluster("gpu-operator", "infer-3"), toolkit("true"), said("infer-3", NO_DEVICE))
    assert not [f for f in report.findings if f.id == "workload.no-driver-in-pod"]


def test_a_healthy_pod_under_the_same_toolkit_stays_quiet() -> None:
    report = diagnosed(cluster("gpu-operator", "infer-3"), toolkit("false"), classed, said("infer-3", "L4 ready\n"))
    assert [f for f in report.findings if f.severity is Severity.ERROR] == []


#: The loader's words when a container's process needs libcuda and the runtime gave it none (glibc elf/dl-load.c).
NO_LIBCUDA = (
    "sleep: error while loading shared libraries: libcuda.so.1: cannot open shared object file: No such file or "
    "directory\n"
)


def crashing(node: str, text: str) -> dict[str, Any]:
    """The infer pod on ``node`` exiting 127 on ``text``, again and again."""
    last = {"terminated": "Error", "exitCode": 127}
    return {
        **said(node, text),
        "containers": [{"name": "main", "restarts": 5, "state": {"waiting": "CrashLoopBackOff"}, "last": last}],
    }


def asking(resources: dict[str, str]) -> Any:
    """An edit: the infer pods ask for ``resources`` only, as a GPU-sharing scheduler's pods do."""

    def edit(sim: SimCluster) -> None:
        for pod in sim.cluster.list(POD, namespace="serve"):
            containers = [{**c, "resources": {"limits": resources}} for c in pod["spec"]["containers"]]
            sim.cluster.patch(
                POD, name=pod["metadata"]["name"], namespace="serve", patch={"spec": {"containers": containers}}
            )

    return edit


def test_a_shared_gpu_pod_without_a_runtime_class_and_no_libcuda_is_the_runtime_class() -> None:
    """koordinator-sh/koordinator#2781: a pod given part of a GPU by Koordinator's device plugin (HAMi-core), under
    runc, finds no libcuda."""
    koordinator = {
        "koordinator.sh/gpu.shared": "1",
        "koordinator.sh/gpu-core": "50",
        "koordinator.sh/gpu-memory": "4Gi",
    }
    report = diagnosed(
        cluster("gpu-operator", "infer-3"), toolkit("false"), asking(koordinator), crashing("infer-3", NO_LIBCUDA)
    )
    (found,) = [f for f in report.findings if f.id == "workload.no-driver-in-pod"]
    assert found.node == "infer-3" and found.link == "toolkit" and '"runtimeClassName":"nvidia"' in found.fix


def test_a_pod_asking_for_no_gpu_at_all_is_not_read_as_missing_the_runtime() -> None:
    report = diagnosed(
        cluster("gpu-operator", "infer-3"), toolkit("false"), asking({"cpu": "4"}), crashing("infer-3", NO_LIBCUDA)
    )
    assert not [f for f in report.findings if f.id == "workload.no-driver-in-pod"]


def test_a_shared_gpu_pod_is_read_where_the_node_announces_only_the_sharing_plugin_s_resources() -> None:
    """A node whose GPUs only a sharing scheduler's plugin announces (no nvidia.com/gpu in its capacity): the gather
    step reads a troubled pod's log by its share, as a GPU pod's."""
    koordinator = {"koordinator.sh/gpu.shared": "1", "koordinator.sh/gpu-core": "50"}
    shared = {"koordinator.sh/gpu.shared": "200", "koordinator.sh/gpu-core": "200", "nvidia.com/gpu": None}
    only = {"do": "node", "node": "infer-3", "capacity": shared, "allocatable": shared}
    report = diagnosed(
        cluster("gpu-operator", "infer-3"), toolkit("false"), asking(koordinator), crashing("infer-3", NO_LIBCUDA), only
    )
    assert [f.node for f in report.findings if f.id == "workload.no-driver-in-pod"] == ["infer-3"]
