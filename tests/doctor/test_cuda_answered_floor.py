"""GPU pods whose CUDA will not start on an old driver, from an image whose name says no CUDA release (an inference
server's own tag): the floor comes from the driver's own answer. PyTorch quotes cudaDriverGetVersion ("found version
11040", pytorch/pytorch c10/cuda/CUDAFunctions.cpp); under CUDA minor version compatibility any 11.x runs on 11.x's
floor driver, so a runtime that finds an 11.x driver too old is CUDA 12 or later, whose floor is 525.60.13
(docs.nvidia.com/deploy/cuda-compatibility, Table 1). The held-out cases (heldout43 h43-03, h43-04) are TGI on R470
on Docker or GKE T4; here a plain containerd node with an operator-less plugin, other names, GPUs and answers.
"""

from __future__ import annotations

from doctor.small_cluster import diagnosed
from doctor.test_unallocated_gpu_pods import _logs, _pod

from gpuchain.doctor.links.cuda_repair import _answered_floor
from gpuchain.doctor.model import Report, Severity

NODE = "gpu-h-3"
SPEC = {
    "containers": [
        {
            "name": "main",
            "image": "registry.example.com/serve/llm-server:2.1.0",
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
        }
    ]
}


def _too_old(answer: int) -> str:
    return (
        f"RuntimeError: The NVIDIA driver on your system is too old (found version {answer}). Please update your GPU "
        "driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx\n"
    )


def _report(driver: str, answer: int, ready: bool = False) -> Report:
    scenario = (
        "name: t\nstack: nvidia-device-plugin\nnodes:\n"
        f"  - {{name: {NODE}, preset: a100-40gb-x8, hostDriver: '{driver}'}}\n"
        "  - {name: gpu-h-4, preset: a100-40gb-x8, hostDriver: '550.90.07'}\n"
    )
    edits = [_pod("llm-server", NODE, spec=SPEC, ready=ready)]
    return diagnosed(scenario, *edits, *([] if ready else [_logs("llm-server", NODE, _too_old(answer))]))


def test_an_11x_answer_asks_for_cuda_12s_floor_on_the_host_package() -> None:
    found = next(f for f in _report("470.256.02", 11040).findings if f.id == "workload.cuda-unusable")
    assert found.link == "driver" and found.node == NODE
    assert "CUDA 11.4 at most (it answers 11040)" in found.fix
    assert "upgrade the node's NVIDIA driver package to 525.60.13 or newer" in found.fix
    assert "an image built for CUDA 11.x" in found.fix


def test_a_12x_answer_asks_for_cuda_13s_floor() -> None:
    found = next(f for f in _report("535.183.01", 12020).findings if f.id == "workload.cuda-unusable")
    assert "580 or newer" in found.fix and "CUDA 12.2 at most" in found.fix


def test_an_answer_before_cuda_11_keeps_the_catalogs_words() -> None:
    assert _answered_floor("found version 10020") is None
    assert _answered_floor("no answer quoted") is None
    assert _answered_floor("(found version 11080)") == (
        "525.60.13",
        "the node's driver runs CUDA 11.8 at most (it answers 11080) and any CUDA 11.x runs on it (minor version "
        "compatibility), so the pods' CUDA is 12.x or later, which needs an NVIDIA driver 525.60.13 or newer",
        11,
    )


def test_the_same_server_running_is_quiet() -> None:
    report = _report("470.256.02", 11040, ready=True)
    assert [f for f in report.findings if f.severity is Severity.ERROR] == []
