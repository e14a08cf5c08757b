"""The live device-plugin link: the real plugin and kubelet peer over unix sockets agree with the render."""

from __future__ import annotations

from gpuchain.kube import NODE
from gpuchain.sim import build, go_live, load_scenario
from gpuchain.sim.testpod import nvidia_smi, run_test_pod


async def test_live_kubelet_numbers_match_the_rendered_ones_and_land_in_node_status() -> None:
    for name, node, capacity, allocatable in (
        ("leftover-time-slicing", "gpu-2", {"nvidia.com/gpu": 16}, {"nvidia.com/gpu": 16}),
        ("mig-56", "gpu-mig", {"nvidia.com/mig-1g.10gb": 56}, {"nvidia.com/mig-1g.10gb": 56}),
        ("gpu-fell-off-bus", "gpu-17", {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 7}),
    ):
        sim = build(load_scenario(name))
        live = {n.node: n for n in await go_live(sim, limit=3)}
        got = live[node]
        assert (got.capacity, got.allocatable) == (capacity, allocatable), name
        assert got.agrees
        status = sim.cluster.get(NODE, name=node)["status"]
        resource = next(iter(capacity))
        assert status["allocatable"][resource] == str(allocatable[resource])
        assert status["capacity"]["cpu"] == "96"  # non-GPU resources kept


async def test_live_admission_binds_pods_to_devices_and_endpoints_are_nvidias_names() -> None:
    sim = build(load_scenario("gpu-fell-off-bus"))
    live = {n.node: n for n in await go_live(sim, limit=2)}
    assert live["gpu-17"].endpoints == {"nvidia.com/gpu": "nvidia-gpu.sock"}
    assert len(live["gpu-17"].admitted) == 8
    assert all(len(ids) == 1 for ids in live["gpu-17"].admitted.values())


async def test_gpu_test_pod_runs_nvidia_smi_on_a_free_gpu_or_is_unschedulable() -> None:
    ok = await run_test_pod(build(load_scenario("healthy")))
    assert ok.ok and ok.node == "gpu-2"  # gpu-0 and gpu-1 are full of 8-GPU training pods
    assert "NVIDIA H100 80GB HBM3" in ok.output and ok.output.count("\nGPU ") == 1
    blocked = await run_test_pod(build(load_scenario("friday-scale-out")))
    assert not blocked.ok and "Insufficient nvidia.com/gpu" in blocked.reason


def test_nvidia_smi_shows_only_the_visible_devices(h100_sim) -> None:  # type: ignore[no-untyped-def]
    inv = h100_sim.inventory()
    out = nvidia_smi(inv, f"{inv.gpus[2].uuid},{inv.gpus[5].uuid}")
    assert out.count("\nGPU ") == 2 and inv.gpus[2].uuid in out and inv.gpus[0].uuid not in out
    assert nvidia_smi(inv, "void") == "No devices were found"
