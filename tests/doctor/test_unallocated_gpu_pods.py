"""Pods whose CUDA finds no driver or no GPU platform: a GPU pod with no RuntimeClass under a runc default (vLLM's
words, vllm-project/vllm vllm/platforms/__init__.py@00e2bbc4 and vllm/platforms/interface.py@v0.6.0), and a pod
placed for a GPU node that requests no nvidia.com/gpu, which the device plugin therefore never gave the driver or a
device (k8s.io/kubelet deviceplugin/v1beta1 api.proto ContainerAllocateResponse; the loader's words, bminor/glibc
elf/dl-load.c@glibc-2.35; PyTorch's, pytorch/pytorch c10/cuda/CUDAFunctions.cpp). Fixture shapes follow
tests/sim/heldout38 h38-01 and h38-03 with other versions, nodes, stacks and wordings."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from doctor.small_cluster import built, diagnosed
from doctor.test_unclassed_gpu_pods import CLASSED_PLUGIN

from gpuchain.doctor import catalog
from gpuchain.doctor.model import Finding, Report
from gpuchain.doctor.snapshot import MAX_WORKLOAD_LOGS, gather, needs_logs
from gpuchain.sim.build import SimCluster

UNCLASSED = "workload.no-driver-in-pod"
UNREQUESTED = "workload.gpu-not-requested"

KUBEADM = (
    "name: t\nstack: nvidia-device-plugin\nnodes:\n"
    "  - {name: a10-node-7, preset: l4-x2, osImage: Ubuntu 22.04.5 LTS, containerRuntime: 'containerd://1.7.22'}\n"
)
GKE = (
    "name: t\nstack: gke\nnodes:\n"
    "  - {name: gke-ml-l4-pool-1a2b3c4d-x9q1, preset: l4-x2, hostDriver: '535.183.01', "
    "osImage: Container-Optimized OS from Google, labels: {cloud.google.com/gke-accelerator: nvidia-l4}}\n"
)


def _pod(
    name: str, node: str, *, spec: dict[str, Any], ready: bool = True, owner: str = "ReplicaSet"
) -> Callable[[SimCluster], None]:
    """An edit: a Deployment's pod bound to ``node``, ``spec`` merged into its spec (as tests/sim/heldout9's
    ``create`` edit writes one)."""
    state: dict[str, Any] = (
        {"running": {"startedAt": "2025-01-10T10:00:00Z"}} if ready else {"waiting": {"reason": "CrashLoopBackOff"}}
    )
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-5d8f7c9b6-abcde",
            "namespace": "ml",
            "labels": {"app": name, "pod-template-hash": "5d8f7c9b6"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": owner, "name": f"{name}-5d8f7c9b6", "controller": True}
            ],
        },
        "spec": {"nodeName": node, **spec},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": str(ready)}],
            "containerStatuses": [
                {"name": "main", "ready": ready, "restartCount": 0 if ready else 4, "state": state}
                | ({} if ready else {"lastState": {"terminated": {"reason": "Error", "exitCode": 1}}})
            ],
        },
    }

    def edit(sim: SimCluster) -> None:
        sim.cluster.create(copy.deepcopy(obj))

    return edit


def _logs(name: str, node: str, log: str) -> dict[str, Any]:
    return {"do": "pod", "daemonset": name, "namespace": "ml", "node": node, "logs": {"main": log}}


def _finding(report: Report, fid: str) -> Finding | None:
    return next((f for f in report.findings if f.id == fid), None)


GPU_LIMIT = {
    "containers": [
        {"name": "main", "image": "vllm/vllm-openai:v0.7.3", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    ]
}
NO_PLATFORM = "INFO 01-10 10:00:03 __init__.py:211] No platform detected, vLLM is running on UnspecifiedPlatform\n"
FRAME = (
    'Traceback (most recent call last):\n  File "/usr/local/lib/python3.12/dist-packages/vllm/platforms/interface.py",'
    " line 41, in get_device_name\n    raise NotImplementedError\nNotImplementedError\n"
)
DETECTED = "INFO 01-10 10:00:03 __init__.py:207] Automatically detected platform cuda.\n"


def test_vllm_without_a_platform_in_a_gpu_pod_with_no_runtime_class_is_the_runtime() -> None:
    node = "a10-node-7"
    report = diagnosed(
        KUBEADM, CLASSED_PLUGIN, _pod("vllm", node, spec=GPU_LIMIT, ready=False), _logs("vllm", node, NO_PLATFORM)
    )
    found = _finding(report, UNCLASSED)
    assert found is not None and (found.link, found.node) == ("toolkit", node)
    assert '"runtimeClassName":"nvidia"' in found.fix
    assert any("vllm.no-platform" in e for e in found.evidence)


def test_older_vllms_traceback_from_its_unspecified_platform_says_the_same() -> None:
    node = "a10-node-7"
    report = diagnosed(
        KUBEADM, CLASSED_PLUGIN, _pod("llm", node, spec=GPU_LIMIT, ready=False), _logs("llm", node, FRAME)
    )
    found = _finding(report, UNCLASSED)
    assert found is not None and any("vllm.unspecified-platform" in e for e in found.evidence)


def test_vllm_that_detected_cuda_stays_quiet() -> None:
    node = "a10-node-7"
    report = diagnosed(
        KUBEADM, CLASSED_PLUGIN, _pod("vllm", node, spec=GPU_LIMIT, ready=False), _logs("vllm", node, DETECTED)
    )
    assert _finding(report, UNCLASSED) is None


#: Ollama's discovery at start (ollama/ollama discover/gpu.go@05de33f8 GetGPUInfo, loadNVCUDAMgmt) as its server log
#: writes it: no GPU found, and (another pod) the driver library's version refused before that.
OLLAMA = {
    "containers": [{"name": "main", "image": "ollama/ollama:0.6.8", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
}
NO_GPUS = (
    'time=2025-05-02T08:11:02.118Z level=INFO source=gpu.go:217 msg="looking for compatible GPUs"\n'
    'time=2025-05-02T08:11:02.131Z level=INFO source=gpu.go:377 msg="no compatible GPUs were discovered"\n'
    'time=2025-05-02T08:11:02.131Z level=INFO source=types.go:130 msg="inference compute" id=0 library=cpu\n'
)
MISMATCH = (
    'time=2025-05-02T08:11:02.125Z level=WARN source=gpu.go:669 msg="version mismatch between driver and cuda driver '
    'library - reboot or upgrade may be required: library /usr/lib/x86_64-linux-gnu/libcuda.so.570.133.20"\n' + NO_GPUS
)


def test_ollama_serving_on_the_cpu_in_a_gpu_pod_with_no_runtime_class_is_the_runtime() -> None:
    node = "a10-node-7"
    report = diagnosed(
        KUBEADM, CLASSED_PLUGIN, _pod("ollama", node, spec=OLLAMA, ready=False), _logs("ollama", node, NO_GPUS)
    )
    found = _finding(report, UNCLASSED)
    assert found is not None and (found.link, found.node) == ("toolkit", node)
    assert '"runtimeClassName":"nvidia"' in found.fix
    assert any("ollama.no-compatible-gpus" in e for e in found.evidence)


def test_ollama_that_names_the_driver_librarys_version_is_the_driver_to_reboot() -> None:
    node = "a10-node-7"
    report = diagnosed(
        KUBEADM, CLASSED_PLUGIN, _pod("ollama", node, spec=OLLAMA, ready=False), _logs("ollama", node, MISMATCH)
    )
    assert _finding(report, UNCLASSED) is None
    found = _finding(report, "workload.cuda-unusable")
    assert found is not None and found.link == "driver" and "reboot the node" in found.fix
    assert any("ollama.driver-library-mismatch" in e for e in found.evidence)


NODE = "gke-ml-l4-pool-1a2b3c4d-x9q1"
TOLERATES = {
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "containers": [{"name": "main", "image": "example/embed:1.0", "resources": {"requests": {"cpu": "1"}}}],
}
NO_LIBCUDA = "OSError: libcuda.so.1: cannot open shared object file: No such file or directory\n"
TORCH_NO_DRIVER = "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU.\n"


def test_a_pod_placed_for_the_gpu_that_requests_none_is_given_the_request() -> None:
    report = diagnosed(GKE, _pod("embed", NODE, spec=TOLERATES), _logs("embed", NODE, NO_LIBCUDA))
    found = _finding(report, UNREQUESTED)
    assert found is not None and (found.link, found.node) == ("device-plugin", NODE)
    assert "patch deployment embed --type json" in found.fix
    # the container had requests but no limits: the limits object is added with the GPU in it
    assert '"path":"/spec/template/spec/containers/0/resources/limits","value":{"nvidia.com/gpu":"1"}' in found.fix
    assert _finding(report, UNCLASSED) is None


def test_a_pod_selecting_a_gfd_label_with_pytorchs_words_on_the_plugin_stack() -> None:
    node = "a10-node-7"
    spec = {
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
        "containers": [{"name": "main", "image": "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"}],
    }
    report = diagnosed(KUBEADM, _pod("train", node, spec=spec), _logs("train", node, TORCH_NO_DRIVER))
    found = _finding(report, UNREQUESTED)
    assert found is not None and found.node == node
    assert '"path":"/spec/template/spec/containers/0/resources","value":{"limits":{"nvidia.com/gpu":"1"}}' in found.fix


def test_a_pod_placed_for_the_gpu_whose_log_is_clean_stays_quiet() -> None:
    report = diagnosed(GKE, _pod("embed", NODE, spec=TOLERATES), _logs("embed", NODE, "serving on :8080\n"))
    assert _finding(report, UNREQUESTED) is None


def test_a_pod_not_placed_for_a_gpu_is_not_read() -> None:
    spec = {"containers": [{"name": "main", "image": "example/web:1.0"}]}
    sim = built(GKE, _pod("web", NODE, spec=spec), _logs("web", NODE, NO_LIBCUDA))
    assert not any(key[1].startswith("web-") for key in needs_logs(gather(sim.cluster)))


def test_the_read_of_unrequested_pods_is_bounded() -> None:
    edits = [_pod(f"embed{i}", NODE, spec=TOLERATES) for i in range(MAX_WORKLOAD_LOGS + 3)]
    sim = built(GKE, *edits)
    read = [key for key in needs_logs(gather(sim.cluster)) if key[1].startswith("embed")]
    assert len(read) == MAX_WORKLOAD_LOGS


def test_the_catalog_lines_match_their_patterns() -> None:
    for entry in ("loader.no-driver-library", "vllm.no-platform", "vllm.unspecified-platform"):
        e = catalog.entry(entry)
        assert e.regex.search(catalog.printed(e.line, e.args)) is not None, entry
    assert (
        catalog.find(
            "libcudart.so.12: cannot open shared object file: No such file or directory", "loader.no-driver-library"
        )
        is None
    )


def test_a_daemonsets_agent_that_tolerates_the_gpu_taint_is_not_read() -> None:
    sim = built(GKE, _pod("agent", NODE, spec=TOLERATES, owner="DaemonSet"), _logs("agent", NODE, NO_LIBCUDA))
    assert not any(key[1].startswith("agent-") for key in needs_logs(gather(sim.cluster)))
