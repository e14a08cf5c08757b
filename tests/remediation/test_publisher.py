"""Node side: the fault tracker's rules and what the publisher writes on the Node."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable

import pytest
from fakes.releasable import ReleasableView

from gpuchain.exporter.podresources import Assignment, PodRef, PodResourcesError
from gpuchain.gpu.errors import GpuError
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.xid import HealthPolicy
from gpuchain.kube.kinds import EVENT, NODE
from gpuchain.kube.memory import MemoryCluster
from gpuchain.remediation.model import CONDITION_TYPE, FAULTS_ANNOTATION, PODS_ANNOTATION, decode_faults, find_condition
from gpuchain.remediation.publisher import FaultTracker, GpuHealthPublisher
from gpuchain.sim.remediation import node_object


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def xid(gpu: str, code: int, mig: str | None = None) -> HealthEvent:
    return HealthEvent(kind=EventKind.XID, gpu_uuid=gpu, xid=code, mig_uuid=mig)


def test_tracker_counts_fatal_ignores_application_and_recovers_after_quiet_period() -> None:
    t = FaultTracker.with_policy(HealthPolicy(), quiet_seconds=5)
    assert not t.apply(xid("GPU-a", 13), 0)
    assert t.apply(xid("GPU-a", 79), 0)
    assert not t.apply(xid("GPU-a", 79), 1)  # same fault again: nothing new to publish
    assert t.apply(xid("GPU-a", 48), 1)
    assert t.faults()["GPU-a"].xids == (48, 79)
    t.apply(HealthEvent(kind=EventKind.GPU_RECOVERED, gpu_uuid="GPU-a"), 2)
    assert not t.due(6) and "GPU-a" in t.faults()
    assert t.due(7) and t.faults() == {}
    assert t.apply(xid("GPU-a", 48), 8)
    assert t.faults()["GPU-a"].xids == (48,)  # old XIDs do not come back with a new fault


def test_tracker_lost_gpu_covers_its_known_mig_devices(mig_sim: SimBackend) -> None:
    t = FaultTracker.with_policy()
    t.observe(mig_sim.inventory().gpus)
    gpu = next(g for g in mig_sim.inventory().gpus if g.mig_devices)
    t.apply(HealthEvent(kind=EventKind.GPU_LOST, gpu_uuid=gpu.uuid), 0)
    fault = t.faults()[gpu.uuid]
    assert fault.lost and set(fault.covers) == {gpu.uuid, *(m.uuid for m in gpu.mig_devices)}


def test_tracker_mig_xid_marks_only_that_mig_device() -> None:
    t = FaultTracker.with_policy()
    t.apply(xid("GPU-a", 48, mig="MIG-1"), 0)
    assert t.faults() == {"MIG-1": t.faults()["MIG-1"]}
    assert t.faults()["MIG-1"].gpu == "GPU-a" and t.faults()["MIG-1"].covers == ("MIG-1",)


def test_tracker_honours_disabled_checks() -> None:
    t = FaultTracker.with_policy(HealthPolicy(checks=False))
    assert not t.apply(xid("GPU-a", 79), 0) and t.faults() == {}


def make(h100_sim: SimBackend, rows: list[Assignment] | None = None) -> tuple[MemoryCluster, GpuHealthPublisher, Clock]:
    cluster = MemoryCluster([node_object("n0")])
    clock = Clock()

    def source() -> list[Assignment]:
        if rows is None:
            raise PodResourcesError("pod-resources List failed")
        return rows

    publisher = GpuHealthPublisher(h100_sim, cluster=cluster, node_name="n0", pods=source, quiet_seconds=0, clock=clock)

    def feed(event: HealthEvent) -> None:
        publisher.handle(event)

    h100_sim.add_listener(feed)
    return cluster, publisher, clock


def test_publishes_condition_event_and_annotations_then_clears_on_recovery(h100_sim: SimBackend) -> None:
    gpu0 = h100_sim.inventory().gpu(0).uuid
    rows = [Assignment("nvidia.com/gpu", gpu0, PodRef("ml", "train", "main"))]
    cluster, publisher, _ = make(h100_sim, rows)

    first = publisher.publish()
    node = cluster.get(NODE, name="n0")
    assert find_condition(node) is not None and find_condition(node).healthy  # type: ignore[union-attr]
    assert first.event is None and cluster.count(EVENT) == 0
    assert json.loads(node["metadata"]["annotations"][PODS_ANNOTATION]) == {gpu0: ["ml/train/main"]}

    h100_sim.inject_xid(0, xid=79)
    result = publisher.publish()
    node = cluster.get(NODE, name="n0")
    cond = find_condition(node)
    assert cond is not None and cond.status == "False" and gpu0 in cond.message and "XID 79" in cond.message
    assert json.loads(node["metadata"]["annotations"][FAULTS_ANNOTATION]) == {
        gpu0: {"gpu": gpu0, "xids": [79], "resolution": "reboot-node"}  # XID 79: NVIDIA's RESTART_BM
    }
    assert [c["type"] for c in node["status"]["conditions"]] == ["Ready", CONDITION_TYPE]  # kubelet's kept
    events = cluster.events_for(node)
    assert [(e["reason"], e["type"]) for e in events] == [("GPUUnhealthy", "Warning")]
    assert result.event == "GPUUnhealthy"

    before = cluster.calls.writes
    assert not publisher.publish().condition_written
    assert cluster.calls.writes == before  # nothing new: no writes

    h100_sim.recover_gpu(0)
    publisher.publish()
    node = cluster.get(NODE, name="n0")
    cond = find_condition(node)
    assert cond is not None and cond.healthy
    assert FAULTS_ANNOTATION not in node["metadata"]["annotations"]
    assert sorted(e["reason"] for e in cluster.events_for(node)) == ["GPUHealthy", "GPUUnhealthy"]


def test_lost_gpu_keeps_its_pods_in_the_map(h100_sim: SimBackend) -> None:
    """A lost GPU drops out of the inventory; its pods must still be attributed to it."""
    gpu3 = h100_sim.inventory().gpu(3).uuid
    rows = [Assignment("nvidia.com/gpu", gpu3, PodRef("ml", "train", "main"))]
    cluster, publisher, _ = make(h100_sim, rows)
    publisher.publish()
    h100_sim.lose_gpu(3)
    result = publisher.publish()
    assert result.faults[gpu3].lost and result.pods == {gpu3: ("ml/train/main",)}
    cond = find_condition(cluster.get(NODE, name="n0"))
    assert cond is not None and cond.reason == "GPULost"


def test_kubelet_unreachable_still_publishes_health(h100_sim: SimBackend) -> None:
    cluster, publisher, _ = make(h100_sim, None)
    h100_sim.inject_xid(1, xid=48)
    result = publisher.publish()
    assert result.pods == {} and result.faults
    cond = find_condition(cluster.get(NODE, name="n0"))
    assert cond is not None and cond.status == "False"


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def condition_status(cluster: MemoryCluster) -> str | None:
    cond = find_condition(cluster.get(NODE, name="n0"))
    return cond.status if cond else None


async def test_run_loop_publishes_fault_then_recovery_after_the_quiet_period(h100_sim: SimBackend) -> None:
    cluster = MemoryCluster([node_object("n0")])
    quiet = 0.2
    publisher = GpuHealthPublisher(h100_sim, cluster=cluster, node_name="n0", quiet_seconds=quiet)
    stop = asyncio.Event()
    task = asyncio.create_task(publisher.run(stop, resync=30))
    try:
        await until(lambda: condition_status(cluster) == "True")
        h100_sim.inject_xid(2, xid=74)
        await until(lambda: condition_status(cluster) == "False")
        recovered = time.monotonic()
        h100_sim.recover_gpu(2)
        await until(lambda: condition_status(cluster) == "True")  # woken by the deadline, not the 30 s resync
        # Not before the quiet period: timed from the recovery on, since a look "a moment after
        # it" is no moment at all on a loaded machine (the whole period can pass before it).
        assert time.monotonic() - recovered >= quiet
    finally:
        stop.set()
        await task


class BrokenEvents(SimBackend):
    """A backend whose event stream dies, as NVML's can."""

    async def events(self) -> AsyncIterator[HealthEvent]:
        raise GpuError("event set wait failed")
        yield  # pragma: no cover - makes this an async generator


async def test_broken_event_stream_marks_every_gpu_unhealthy() -> None:
    backend = BrokenEvents.from_preset("h100-80gb-x8")
    cluster = MemoryCluster([node_object("n0")])
    stop = asyncio.Event()
    task = asyncio.create_task(GpuHealthPublisher(backend, cluster=cluster, node_name="n0").run(stop, resync=30))
    try:
        await until(lambda: condition_status(cluster) == "False")
        faults = decode_faults(cluster.get(NODE, name="n0")["metadata"]["annotations"][FAULTS_ANNOTATION])
        assert len(faults) == 8
    finally:
        stop.set()
        await task


class FlakyEvents(SimBackend):
    """A backend whose first subscription fails (the NVML watcher could not start), then works."""

    failed = False

    async def events(self) -> AsyncIterator[HealthEvent]:
        if not self.failed:
            self.failed = True
            raise GpuError("cannot create the NVML event set")
        async for event in super().events():
            yield event


async def test_gpus_are_healthy_again_once_the_event_stream_is_back() -> None:
    backend = FlakyEvents.from_preset("h100-80gb-x8")
    cluster = MemoryCluster([node_object("n0")])
    stop = asyncio.Event()
    task = asyncio.create_task(
        GpuHealthPublisher(backend, cluster=cluster, node_name="n0", quiet_seconds=0.2).run(stop, resync=30)
    )
    try:
        await until(lambda: condition_status(cluster) == "False")
        await until(lambda: condition_status(cluster) == "True", timeout=5)  # resubscribed, quiet period passed
        backend.inject_xid(3, xid=48)  # and the new subscription still reports faults
        await until(lambda: condition_status(cluster) == "False")
    finally:
        stop.set()
        await task


def test_a_release_for_a_gpu_reset_is_no_fault(h100_sim: SimBackend, caplog: pytest.LogCaptureFixture) -> None:
    """While NVML is let go (``gpu.nvmlrelease``) the inventory and probes raise ReleasedError: the
    publisher keeps the GPUs it knew, trips no probe, reports nothing lost and warns of nothing."""
    view = ReleasableView(h100_sim)
    cluster = MemoryCluster([node_object("n0")])
    publisher = GpuHealthPublisher(view, cluster=cluster, node_name="n0", pods=None, quiet_seconds=0, clock=Clock())
    publisher.publish()
    view.release()
    with caplog.at_level(logging.WARNING):
        result = publisher.publish()
    assert view.reads_while_released >= 1
    assert result.faults == {}
    cond = find_condition(cluster.get(NODE, name="n0"))
    assert cond is not None and cond.healthy
    assert not [r for r in caplog.records if r.name.startswith("gpuchain")]


def test_a_probed_fault_on_another_gpu_stays_published_through_a_release(h100_sim: SimBackend) -> None:
    """GPU 2 has a row remap pending (a probe's fault) while NVML is let go for GPU 0's reset: no
    reading is no evidence, so the fault stays, the node stays GPUHealthy=False and no
    GPUHealthy/GPUUnhealthy flap is recorded (the remediator would lift its taint on the flap)."""
    view = ReleasableView(h100_sim)
    h100_sim.set_telemetry(2, row_remap_pending=1)
    cluster = MemoryCluster([node_object("n0")])
    publisher = GpuHealthPublisher(view, cluster=cluster, node_name="n0", pods=None, quiet_seconds=0, clock=Clock())
    gpu2 = h100_sim.inventory().gpu(2).uuid
    assert set(publisher.publish().faults) == {gpu2}
    view.release()
    during = publisher.publish()
    assert view.reads_while_released >= 1
    assert set(during.faults) == {gpu2} and during.event is None
    cond = find_condition(cluster.get(NODE, name="n0"))
    assert cond is not None and not cond.healthy
    view.reacquire()
    assert set(publisher.publish().faults) == {gpu2}
    assert [e["reason"] for e in cluster.snapshot(EVENT)].count("GPUHealthy") == 0
