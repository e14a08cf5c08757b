"""The simulator's pods run processes: per-pod figures on shared GPUs, as the exporter reports them."""

from __future__ import annotations

from gpuchain.exporter.podresources import PodRef
from gpuchain.sim import build, load_scenario
from gpuchain.sim.usage import MPS_SERVER_MIB, node_usage


def test_time_sliced_pods_on_one_gpu_differ_and_sum_to_at_most_the_gpus() -> None:
    nodes = {n.node: n for n in node_usage(build(load_scenario("time-sliced")))}
    node = nodes["gpu-0"]
    usage = node.collector.usage
    assert usage is not None
    shared = [(uuid, u) for uuid, u in usage.items() if len(u.pods) >= 2]
    assert len(shared) == 1
    uuid, gpu = shared[0]
    figures = {ref.pod: (u.memory_mib, u.sm_percent) for ref, u in gpu.pods.items()}
    assert figures == {"train": (40_000, 55), "infer-0": (12_000, 15), "infer-1": (12_000, 15), "notebook": (2_000, 3)}
    assert len(set(figures.values())) >= 3  # not the GPU's numbers copied to every pod
    telemetry = node.backend.telemetry(uuid)
    assert sum(m for m, _ in figures.values()) <= (telemetry.memory_used_mib or 0)
    assert sum(s or 0 for _, s in figures.values()) <= (telemetry.gpu_util or 0)


def test_mps_clients_are_attributed_and_the_server_is_counted_in_no_pod() -> None:
    node = {n.node: n for n in node_usage(build(load_scenario("time-sliced")))}["gpu-1"]
    usage = node.collector.usage
    assert usage is not None
    (gpu,) = usage.values()
    assert set(gpu.pods) == {PodRef("ml", "serve-0", "main"), PodRef("ml", "serve-1", "main")}
    assert (gpu.unattributed_processes, gpu.unattributed_memory_mib) == (1, MPS_SERVER_MIB)
    assert all(p.mps for p in node.backend.processes(next(iter(usage))) if p.used_memory_mib != MPS_SERVER_MIB)
