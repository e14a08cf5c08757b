"""Per-process attribution on the real node (issue 29): real containers, real cgroups.

Two pods run on the real kubelet and containerd; the simulated GPU reports their processes (by
the PIDs the machine gives them) time-sliced on one GPU, as NVML would. The exporter's collector
maps each PID to its pod and container through the process's own ``/proc/<pid>/cgroup`` (as
containerd and the kubelet laid it out, cgroupfs driver) and the Pod objects the API server
holds, and each pod's metric names the container the process really runs in.
"""

from __future__ import annotations

import os
from pathlib import Path

from fakes.fake_pynvml import nvml_over

from gpuchain.exporter.cgroups import read_cgroup
from gpuchain.exporter.collector import GpuMetricsCollector
from gpuchain.exporter.counters import load_collectors
from gpuchain.exporter.exposition import render
from gpuchain.exporter.podresources import Assignment, PodRef
from gpuchain.exporter.usage import pod_directory
from gpuchain.gpu.sim import SimBackend
from peers.node import RealNode, busybox_pod, wait_for

NS = "gpu"
#: Each pod's sleep carries its own argument, so its process is found on the machine by argv.
PODS = {"usage-a": "3601", "usage-b": "3602"}


def _pid_running(argv: list[str]) -> int | None:
    want = "\0".join(argv).encode() + b"\0"
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == want:
                    return int(entry.name)
            except OSError:
                continue
    return None


def _value(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_each_process_is_charged_to_the_container_it_runs_in(node: RealNode) -> None:
    for name, arg in PODS.items():
        node.create_pod(NS, busybox_pod(name, f"exec sleep {arg}"))
    try:
        pods = [node.wait_pod_phase(NS, name, ("Running",)) for name in PODS]
        pids = {
            name: wait_for(f"{name}'s process", lambda a=arg: _pid_running(["sleep", a]), 30)
            for name, arg in PODS.items()
        }
        assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()

        sim = SimBackend.from_preset("h100-80gb-x8")
        gpu = sim.inventory().gpus[0]
        sim.run_process(0, pid=pids["usage-a"], memory_mib=1_000, sm_percent=20)
        sim.run_process(0, pid=pids["usage-b"], memory_mib=3_000, sm_percent=30)
        rows = [
            Assignment("nvidia.com/gpu", f"{gpu.uuid}::{i}", PodRef(NS, name, "main")) for i, name in enumerate(PODS)
        ]
        collector = GpuMetricsCollector(
            nvml_over(sim),
            counters=load_collectors(),
            hostname="node",
            pod_lister=lambda: rows,
            processes=True,
            cgroup_of=read_cgroup,
            pod_directory=lambda: pod_directory(pods),
        )
        assert collector.collect_once()
        text = render(collector.registry).decode()

        # what the cgroup says is what the API server says: each PID is in its own pod's container
        for pod in pods:
            cgroup = read_cgroup(pids[pod["metadata"]["name"]])
            assert cgroup is not None and cgroup.pod_uid == pod["metadata"]["uid"]
            (status,) = pod["status"]["containerStatuses"]
            assert status["containerID"] == f"containerd://{cgroup.container_id}"
        fb = {name: _value(text, "DCGM_FI_DEV_FB_USED", UUID=gpu.uuid, pod=name, container="main") for name in PODS}
        assert fb == {"usage-a": 1_000, "usage-b": 3_000}
        assert _value(text, "gpuchain_gpu_processes", UUID=gpu.uuid, pod="usage-a", container="main") == 1
        assert _value(text, "gpuchain_gpu_unattributed_processes", UUID=gpu.uuid) == 0
    finally:
        for name in PODS:
            node.delete_pod(NS, name)
