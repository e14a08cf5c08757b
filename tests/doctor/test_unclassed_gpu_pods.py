"""GPU pods that run, ready, with no RuntimeClass on a node whose device plugin runs under one: k3s and RKE2 add the
nvidia runtime to the containerd config they write and keep runc the default (k3s-io/k3s
pkg/agent/containerd/runtimes.go), so such a pod runs without the driver and only its log says so. The words are
bash's for a command it cannot find (bminor/bash execute_cmd.c@bash-5.2, catalog bash.driver-binary-not-found) and
PyTorch's for no libcuda (pytorch/pytorch torch/cuda/__init__.py@v2.3.0, catalog pytorch.no-driver)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doctor.small_cluster import diagnosed
from sim.heldout9 import harness as ninth

from gpuchain.doctor.model import Finding, Report
from gpuchain.doctor.unclassed import classed_daemonsets, running_unclassed
from gpuchain.sim.build import SimCluster

FINDING = "workload.no-driver-in-pod"


def _scenario(dist: str) -> str:
    return (
        f"name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: edge-3, preset: t4-x4, distribution: {dist}}}\n"
        "workloads:\n  - {name: lab, namespace: team-a, count: 2, gpus: 1, node: edge-3}\n"
    )


def _kubelet(version: str) -> dict[str, Any]:
    return {"do": "node", "node": "edge-3", "nodeInfo": {"kubeletVersion": version}}


def _classed_plugin(sim: SimCluster) -> None:
    """The plugin DaemonSet asks for the nvidia RuntimeClass (NVIDIA/k8s-device-plugin's chart value
    runtimeClassName), as tests/sim/heldout9's ``daemonset`` edit writes it."""
    ninth._apply(sim.cluster, {"do": "daemonset", "namespace": "kube-system", "name": PLUGIN, "spec": CLASSED})


PLUGIN = "nvidia-device-plugin-daemonset"
CLASSED = {"template": {"spec": {"runtimeClassName": "nvidia"}}}
CLASSED_PLUGIN = _classed_plugin


def _running(log: str, **spec: Any) -> dict[str, Any]:
    """The workload pod running and ready, its log ``log``."""
    return {
        "do": "pod",
        "daemonset": "lab",
        "namespace": "team-a",
        "node": "edge-3",
        "containers": [{"name": "lab", "ready": True, "restarts": 0, "state": {"running": True}}],
        "logs": {"lab": log},
        **spec,
    }


NO_SMI = "$ nvidia-smi -L\n/bin/sh: line 1: nvidia-smi: command not found\n"
NO_DRIVER = "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU.\n"


def _finding(report: Report) -> Finding | None:
    return next((f for f in report.findings if f.id == FINDING), None)


def test_a_running_pod_without_the_driver_on_rke2_is_the_runtime_with_rke2s_default_runtime_repair() -> None:
    report = diagnosed(_scenario("rke2"), _kubelet("v1.29.4+rke2r1"), CLASSED_PLUGIN, _running(NO_DRIVER))
    found = _finding(report)
    assert found is not None and (found.link, found.node) == ("toolkit", "edge-3")
    assert '"runtimeClassName":"nvidia"' in found.fix
    assert "default-runtime: nvidia in /etc/rancher/rke2/config.yaml" in found.fix
    assert "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl" in found.fix
    assert "nvidia-ctk runtime configure" not in found.fix


def test_the_same_on_k3s_reads_bashs_words() -> None:
    report = diagnosed(_scenario("k3s"), _kubelet("v1.30.2+k3s1"), CLASSED_PLUGIN, _running(NO_SMI))
    found = _finding(report)
    assert found is not None and "/etc/rancher/k3s/config.yaml" in found.fix


def _pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "lab-0", "namespace": "team-a"},
        "spec": {
            "nodeName": "edge-3",
            "containers": [
                {"name": "lab", "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}
            ],
            **spec,
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "lab", "ready": True, "state": {"running": {"startedAt": "2024-04-17T09:12:40Z"}}}
            ],
        },
    }


def test_only_a_running_gpu_pod_that_names_no_runtime_class_is_a_candidate() -> None:
    assert [(on, key) for on, (key, _) in running_unclassed(_pod())] == [("edge-3", ("team-a", "lab-0", "lab"))]
    assert running_unclassed(_pod(runtimeClassName="nvidia")) == []
    cpu = _pod()
    cpu["spec"]["containers"][0]["resources"] = {}
    assert running_unclassed(cpu) == []


def test_a_daemonset_whose_template_names_a_class_is_classed() -> None:
    ds = {"metadata": {"name": "p", "namespace": "kube-system"}, "spec": {"template": {"spec": {}}}}
    classed = {"metadata": {"name": "q", "namespace": "kube-system"}}
    classed["spec"] = {"template": {"spec": {"runtimeClassName": "nvidia"}}}
    assert classed_daemonsets([ds, classed]) == {("kube-system", "q")}


def test_a_node_whose_plugin_names_no_class_reads_no_running_pod() -> None:
    """The plugin gets the driver from the node's default runtime: nvidia is the default, the pods run with it."""
    report = diagnosed(_scenario("kubeadm"), _running(NO_DRIVER))
    assert _finding(report) is None


def test_a_running_pod_whose_log_says_nothing_of_the_driver_says_nothing() -> None:
    report = diagnosed(_scenario("k3s"), _kubelet("v1.30.2+k3s1"), CLASSED_PLUGIN, _running("Serving on :8888\n"))
    assert _finding(report) is None and not [f for f in report.findings if f.severity.name == "ERROR"]


#: The GPU Operator on a k3s node (its kubeletVersion says so), a CUDA sample that names no RuntimeClass crash-looping with the CUDA runtime's
#: words for cudaErrorInsufficientDriver (NVIDIA/cuda-samples Samples/0_Introduction/vectorAdd/vectorAdd.cu@v12.8
#: prints "Failed to allocate device vector A (error code %s)!"), what CUDA answers where no libcuda is in the container.
OPERATOR = (
    "name: t\nstack: gpu-operator\nnodes:\n  - {name: agent-7, preset: l4-x2}\n"
    "workloads:\n  - {name: vadd, namespace: bench, count: 2, gpus: 1, node: agent-7}\n"
)
INSUFFICIENT = {
    "do": "pod",
    "daemonset": "vadd",
    "namespace": "bench",
    "node": "agent-7",
    "containers": [
        {
            "name": "main",
            "ready": False,
            "restarts": 3,
            "state": {"waiting": "CrashLoopBackOff"},
            "last": {"terminated": "Error", "exitCode": 1},
        }
    ],
    "logs": {
        "main": "Failed to allocate device vector A (error code CUDA driver version is insufficient for CUDA runtime "
        "version)!\n"
    },
}


def _toolkit_config(path: str) -> Callable[[SimCluster], None]:
    """The ClusterPolicy's toolkit pointed at ``path`` (spec.toolkit.env CONTAINERD_CONFIG)."""

    def edit(sim: SimCluster) -> None:
        env = [{"name": "CONTAINERD_CONFIG", "value": path}]
        ninth._apply(sim.cluster, {"do": "policy", "spec": {"toolkit": {"env": env}}})

    return edit


def test_cudas_insufficient_driver_in_an_unclassed_pod_on_k3s_is_no_driver_library() -> None:
    report = diagnosed(OPERATOR, _kubelet_on("agent-7", "v1.26.4+k3s1"), INSUFFICIENT)
    found = _finding(report)
    assert found is not None and (found.link, found.node) == ("toolkit", "agent-7")
    assert '"runtimeClassName":"nvidia"' in found.fix and "workload.cuda-unusable" not in report.ids
    assert "keeps runc its default" in found.cause


def test_the_same_words_where_the_toolkit_writes_k3s_template_stay_the_driver() -> None:
    """The toolkit pointed at k3s's config.toml.tmpl makes nvidia the default there: the words are the driver's."""
    template = _toolkit_config("/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl")
    report = diagnosed(OPERATOR, _kubelet_on("agent-7", "v1.26.4+k3s1"), template, INSUFFICIENT)
    assert _finding(report) is None


def test_the_same_words_on_a_kubeadm_node_stay_the_driver() -> None:
    report = diagnosed(OPERATOR, INSUFFICIENT)
    assert _finding(report) is None


def _kubelet_on(node: str, version: str) -> dict[str, Any]:
    return {"do": "node", "node": node, "nodeInfo": {"kubeletVersion": version}}
