"""Per-pod usage on shared GPUs from the GPUs' processes, and the trust signals of a scrape."""

from __future__ import annotations

from pathlib import Path

from fakes.fake_pynvml import nvml_over

from gpuchain.exporter.cgroups import ContainerCgroup
from gpuchain.exporter.collector import GpuMetricsCollector
from gpuchain.exporter.counters import load_collectors
from gpuchain.exporter.expected import gfd_gpu_count
from gpuchain.exporter.exposition import render
from gpuchain.exporter.podresources import Assignment, PodRef
from gpuchain.exporter.usage import PodIdentity, pod_directory
from gpuchain.gpu.sim import SimBackend

COUNTERS = load_collectors()
A, B, C = PodRef("ml", "train-a", "main"), PodRef("ml", "infer-b", "server"), PodRef("ml", "notebook-c", "lab")


def _uid(n: int) -> str:
    return f"{n:08x}-0000-4000-8000-000000000000"


def _cid(n: int) -> str:
    return f"{n:064x}"


def _shared_gpu() -> tuple[SimBackend, list[Assignment], dict[int, ContainerCgroup | None], dict[str, PodIdentity]]:
    """GPU 0 time-sliced three ways (replica ids); pod A runs two processes, B one, C none, and the
    host one (the MPS server, in no pod)."""
    sim = SimBackend.from_preset("h100-80gb-x8")
    uuid = sim.inventory().gpus[0].uuid
    rows = [Assignment("nvidia.com/gpu", f"{uuid}::{i}", ref) for i, ref in enumerate((A, B, C))]
    sim.run_process(0, pid=100, memory_mib=30_000, sm_percent=40)
    sim.run_process(0, pid=101, memory_mib=2_000, sm_percent=10)
    sim.run_process(0, pid=200, memory_mib=9_000, sm_percent=25)
    sim.run_process(0, pid=300, memory_mib=500, sm_percent=0)
    cgroups: dict[int, ContainerCgroup | None] = {
        100: ContainerCgroup(_uid(1), _cid(1)),
        101: ContainerCgroup(_uid(1), _cid(1)),
        200: ContainerCgroup(_uid(2), _cid(2)),
        300: None,
    }
    directory = {
        _uid(1): PodIdentity("ml", "train-a", {_cid(1): "main"}),
        _uid(2): PodIdentity("ml", "infer-b", {_cid(2): "server"}),
        _uid(3): PodIdentity("ml", "notebook-c", {_cid(3): "lab"}),
    }
    return sim, rows, cgroups, directory


def _value(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_pods_time_sliced_on_one_gpu_get_their_own_figures_summing_to_at_most_the_gpus() -> None:
    sim, rows, cgroups, directory = _shared_gpu()
    collector = GpuMetricsCollector(
        nvml_over(sim),
        counters=COUNTERS,
        hostname="n",
        pod_lister=lambda: rows,
        processes=True,
        cgroup_of=cgroups.__getitem__,
        pod_directory=lambda: directory,
    )
    assert collector.collect_once()
    text = render(collector.registry).decode()
    gpu = sim.inventory().gpus[0]
    fb = {r.pod: _value(text, "DCGM_FI_DEV_FB_USED", UUID=gpu.uuid, pod=r.pod) for r in (A, B, C)}
    sm = {r.pod: _value(text, "DCGM_FI_DEV_GPU_UTIL", UUID=gpu.uuid, pod=r.pod) for r in (A, B, C)}
    assert fb == {"train-a": 32_000, "infer-b": 9_000, "notebook-c": 0}
    assert sm == {"train-a": 50, "infer-b": 25, "notebook-c": 0}
    telemetry = sim.telemetry(gpu.uuid)
    assert sum(v or 0 for v in fb.values()) <= (telemetry.memory_used_mib or 0)
    assert sum(v or 0 for v in sm.values()) <= (telemetry.gpu_util or 0)
    # The host process is counted, not dropped, and not charged to anyone.
    assert _value(text, "gpuchain_gpu_unattributed_processes", UUID=gpu.uuid) == 1
    assert _value(text, "gpuchain_gpu_unattributed_fb_used_mib", UUID=gpu.uuid) == 500
    assert _value(text, "gpuchain_gpu_processes", UUID=gpu.uuid, pod="train-a", container="main") == 2
    # Fields that cannot be split stay the GPU's on every holder.
    assert _value(text, "DCGM_FI_DEV_POWER_USAGE", pod="infer-b") == _value(
        text, "DCGM_FI_DEV_POWER_USAGE", pod="train-a"
    )


def test_without_a_directory_only_a_single_holder_is_named() -> None:
    sim, rows, cgroups, _ = _shared_gpu()
    other = sim.inventory().gpus[1].uuid
    rows.append(Assignment("nvidia.com/gpu", other, A))
    sim.run_process(1, pid=400, memory_mib=1_000, sm_percent=30)
    cgroups[400] = ContainerCgroup(_uid(1), _cid(1))
    collector = GpuMetricsCollector(
        sim, counters=COUNTERS, hostname="n", pod_lister=lambda: rows, processes=True, cgroup_of=cgroups.get
    )
    collector.collect_once()
    text = render(collector.registry).decode()
    assert _value(text, "DCGM_FI_DEV_FB_USED", UUID=other, pod="train-a") == 1_000
    # GPU 0 has three holders: nobody can be named without pod UIDs, and nothing is guessed.
    assert _value(text, "gpuchain_gpu_unattributed_processes", UUID=sim.inventory().gpus[0].uuid) == 4
    assert _value(text, "DCGM_FI_DEV_FB_USED", UUID=sim.inventory().gpus[0].uuid, pod="train-a") == 0


def test_a_pod_running_on_a_gpu_it_was_not_given_is_shown_there() -> None:
    sim, rows, cgroups, directory = _shared_gpu()
    sim.run_process(5, pid=500, memory_mib=4_000, sm_percent=60)
    cgroups[500] = ContainerCgroup(_uid(2), _cid(2))
    collector = GpuMetricsCollector(
        sim,
        counters=COUNTERS,
        hostname="n",
        pod_lister=lambda: rows,
        processes=True,
        cgroup_of=cgroups.__getitem__,
        pod_directory=lambda: directory,
    )
    collector.collect_once()
    text = render(collector.registry).decode()
    assert _value(text, "DCGM_FI_DEV_FB_USED", UUID=sim.inventory().gpus[5].uuid, pod="infer-b") == 4_000


def test_a_gpu_that_stops_answering_is_visible_and_counts_against_the_expected() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    collector = GpuMetricsCollector(sim, counters=COUNTERS, hostname="n")
    collector.collect_once()
    text = render(collector.registry).decode()
    assert (_value(text, "gpuchain_gpus_expected", source="seen"), _value(text, "gpuchain_gpus_exported")) == (8, 8)
    lost = sim.inventory().gpus[3].uuid
    stamp = _value(text, "gpuchain_gpu_last_sample_timestamp_seconds", UUID=lost)
    assert stamp is not None and stamp > 0
    sim.lose_gpu(3)
    collector.collect_once()
    text = render(collector.registry).decode()
    assert _value(text, "gpuchain_gpu_up", UUID=lost) == 0
    assert _value(text, "gpuchain_gpu_up", UUID=sim.inventory().gpus[0].uuid) == 1
    assert _value(text, "gpuchain_gpu_last_sample_timestamp_seconds", UUID=lost) == stamp
    assert (_value(text, "gpuchain_gpus_expected", source="seen"), _value(text, "gpuchain_gpus_exported")) == (8, 7)


def test_the_expected_count_comes_from_feature_discovery_when_told() -> None:
    collector = GpuMetricsCollector(
        SimBackend.from_preset("h100-80gb-x8"), counters=COUNTERS, hostname="n", expected_gpus=lambda: (16, "gfd")
    )
    collector.collect_once()
    assert _value(render(collector.registry).decode(), "gpuchain_gpus_expected", source="gfd") == 16


def test_the_expected_count_reads_gfd_feature_file(tmp_path: Path) -> None:
    features = tmp_path / "gfd"
    assert gfd_gpu_count(features) is None
    features.write_text("nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\nnvidia.com/gpu.count=8\n")
    assert gfd_gpu_count(features) == (8, "gfd")


def test_the_pod_directory_reads_uids_and_container_ids_from_pod_objects() -> None:
    """Pod objects as the API server returns them (containerID as the kubelet writes it)."""
    pods = [
        {
            "metadata": {"name": "train-a", "namespace": "ml", "uid": _uid(1)},
            "status": {
                "initContainerStatuses": [{"name": "fetch", "containerID": f"containerd://{_cid(9)}"}],
                "containerStatuses": [
                    {"name": "main", "containerID": f"cri-o://{_cid(1)}"},
                    {"name": "waiting"},
                ],
            },
        },
        {"metadata": {"name": "no-uid", "namespace": "ml"}},
    ]
    assert pod_directory(pods) == {_uid(1): PodIdentity("ml", "train-a", {_cid(9): "fetch", _cid(1): "main"})}
