"""GPU workload pods that ended Failed (restartPolicy Never: a Job's or a trial's pod that fails at its first run): the
pod list keeps the newest few on GPU nodes (doctor/finished.py) and their failed containers' logs are read, so a CUDA
error there names the node's driver as a crash-looping pod's does; the list call is the one the doctor makes anyway.

Pod states as the kubelet reports a container that exited (state.terminated with reason Error and the exit code, the
pod's phase Failed); the CUDA runtime's text for cudaErrorInsufficientDriver as NVIDIA's vectorAdd sample prints it
(catalog.yaml cuda.insufficient-driver); CUDA 13.x needs a driver >= 580 (docs.nvidia.com/deploy/cuda-compatibility).
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import built

from gpuchain.doctor import Severity, run_doctor
from gpuchain.doctor.finished import MAX_FINISHED, split_finished
from gpuchain.kube import NODE, POD
from gpuchain.sim.build import SimCluster

CLUSTER = (
    "name: t\nstack: gpu-operator\nnodes:\n  - {name: ctl, gpu: false}\n  - {name: h100-1, preset: h100-80gb-x8}\n"
)
INSUFFICIENT = (
    "Failed to allocate device vector A (error code CUDA driver version is insufficient for CUDA runtime version)!"
)


def _failed(name: str, log: str, *, gpus: int = 1, node: str = "h100-1", phase: str = "Failed") -> Any:
    """An edit: pod ``name`` of namespace research, run once on ``node`` (restartPolicy Never), ended ``phase`` with
    its container exited 1 (0 where it Succeeded), its log ``log``."""

    def edit(sim: SimCluster) -> None:
        limits = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
        code, reason = (0, "Completed") if phase == "Succeeded" else (1, "Error")
        ended = {"terminated": {"reason": reason, "exitCode": code, "finishedAt": "2026-12-06T12:00:00Z"}}
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "research"},
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "runtimeClassName": "nvidia",
                    "containers": [
                        {
                            "name": "train",
                            "image": "nvcr.io/nvidia/cuda:13.0.0-runtime-ubuntu24.04",
                            "resources": limits,
                        }
                    ],
                },
                "status": {
                    "phase": phase,
                    "containerStatuses": [{"name": "train", "ready": False, "restartCount": 0, "state": ended}],
                },
            }
        )
        sim.cluster.set_logs(name, namespace="research", container="train", text=log)

    return edit


def test_a_failed_job_pod_whose_cuda_needs_a_newer_driver_names_the_driver() -> None:
    sim = built(CLUSTER, _failed("sweep-7-0", INSUFFICIENT))
    report = run_doctor(sim.cluster, reader=sim.read_log)
    found = [f for f in report.findings if f.severity is Severity.ERROR]
    assert [(f.id, f.node, f.link) for f in found] == [("workload.cuda-unusable", "h100-1", "driver")]
    assert any("research/sweep-7-0" in e for e in found[0].evidence) and "580" in found[0].fix
    assert report.api_calls["list"] == run_doctor(built(CLUSTER).cluster).api_calls["list"]  # no list of its own


def test_succeeded_failed_without_gpus_and_off_gpu_nodes_are_not_read() -> None:
    sim = built(
        CLUSTER,
        _failed("done", INSUFFICIENT, phase="Succeeded"),
        _failed("cpu-only", INSUFFICIENT, gpus=0),
        _failed("on-ctl", INSUFFICIENT, node="ctl"),
    )
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]
    assert "logs" not in report.api_calls


def test_only_the_newest_failed_gpu_pods_are_kept() -> None:
    sim = built(CLUSTER, *(_failed(f"trial-{i:02d}", "oops") for i in range(MAX_FINISHED + 5)))
    pods = sim.cluster.list(POD)
    trials = sorted(
        (p for p in pods if p["metadata"]["name"].startswith("trial-")), key=lambda p: p["metadata"]["name"]
    )
    for i, pod in enumerate(trials):
        pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = f"2026-12-06T12:{i:02d}:00Z"
    live, finished = split_finished(pods, sim.cluster.list(NODE))
    assert not any(p["status"].get("phase") in ("Failed", "Succeeded") for p in live)
    assert [p["metadata"]["name"] for p in finished] == [p["metadata"]["name"] for p in reversed(trials)][:MAX_FINISHED]
