"""Health state: XID policy, MIG scope, lost GPUs, recovery after the quiet period, a broken event stream
(pure, explicit clock). The announced devices come from the device plugin's mapping, its main consumer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gpuchain.api.config.v1.config import parse_config
from gpuchain.deviceplugin.resources import map_resources
from gpuchain.gpu.errors import GpuError
from gpuchain.gpu.health import EVENT_STREAM_FAILED, HealthState, follow_events, run_recoveries
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.xid import HealthPolicy


def test_fatal_xid_marks_the_gpu_and_application_xid_does_not(h100_sim: SimBackend) -> None:
    (res,) = map_resources(h100_sim.inventory(), parse_config(""))
    state = HealthState()
    gpu = res.devices[1].gpu_uuid
    assert not state.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=gpu, xid=13), 0)
    assert all(state.healthy(d.gpu_uuid, d.mig_uuid) for d in res.devices)
    assert state.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=gpu, xid=48), 0)
    assert [state.healthy(d.gpu_uuid, d.mig_uuid) for d in res.devices].count(False) == 1
    assert "XID 48" in (state.reason(res.devices[1].gpu_uuid) or "")


def test_mig_event_marks_only_that_mig_device(mig_sim: SimBackend) -> None:
    resources = map_resources(mig_sim.inventory(), parse_config("flags: {migStrategy: mixed}"))
    devices = [d for r in resources for d in r.devices]
    target = next(d for d in devices if d.mig_uuid)
    state = HealthState()
    state.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=target.gpu_uuid, xid=48, mig_uuid=target.mig_uuid), 0)
    assert [d.id for d in devices if not state.healthy(d.gpu_uuid, d.mig_uuid)] == [target.id]


def test_xid_on_a_mig_gpu_without_mig_uuid_marks_all_its_devices(mig_sim: SimBackend) -> None:
    resources = map_resources(mig_sim.inventory(), parse_config("flags: {migStrategy: mixed}"))
    devices = [d for r in resources for d in r.devices]
    parent = next(d for d in devices if d.mig_uuid).gpu_uuid
    state = HealthState()
    state.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=parent, xid=79), 0)
    unhealthy = {d.id for d in devices if not state.healthy(d.gpu_uuid, d.mig_uuid)}
    assert unhealthy == {d.id for d in devices if d.gpu_uuid == parent} and len(unhealthy) == 4


def test_lost_gpu_marks_all_replicas(h100_sim: SimBackend) -> None:
    (res,) = map_resources(
        h100_sim.inventory(), parse_config("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 3}]}}")
    )
    gpu = res.devices[0].gpu_uuid
    state = HealthState()
    assert state.apply(HealthEvent(kind=EventKind.GPU_LOST, gpu_uuid=gpu), 0)
    assert [d.replica for d in res.devices if not state.healthy(d.gpu_uuid, d.mig_uuid)] == [0, 1, 2]


def _recovering(sim: SimBackend) -> tuple[HealthState, str]:
    """A GPU that had XID 79 at t=0 and was reported recovered at t=10, with a 5 s quiet period."""
    gpu = sim.inventory().gpus[0].uuid
    state = HealthState(quiet_seconds=5)
    state.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=gpu, xid=79), 0)
    state.apply(HealthEvent(kind=EventKind.GPU_RECOVERED, gpu_uuid=gpu), 10)
    return state, gpu


def test_recovery_waits_out_the_quiet_period(h100_sim: SimBackend) -> None:
    state, gpu = _recovering(h100_sim)
    assert state.next_deadline() == 15
    assert state.due(14.9) == [] and not state.healthy(gpu)
    assert state.due(15) == [gpu] and state.healthy(gpu)


def test_new_error_during_quiet_period_cancels_recovery(h100_sim: SimBackend) -> None:
    state, gpu = _recovering(h100_sim)
    state.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=gpu, xid=48), 12)
    assert state.due(100) == [] and not state.healthy(gpu)


def test_recovery_of_a_healthy_gpu_is_a_no_op(h100_sim: SimBackend) -> None:
    state = HealthState()
    assert not state.apply(HealthEvent(kind=EventKind.GPU_RECOVERED, gpu_uuid=h100_sim.inventory().gpus[0].uuid), 0)
    assert state.next_deadline() is None


def test_disabled_checks_ignore_everything(h100_sim: SimBackend) -> None:
    state = HealthState(policy=HealthPolicy(checks=False))
    gpu = h100_sim.inventory().gpus[0].uuid
    assert not state.apply(HealthEvent(kind=EventKind.GPU_LOST, gpu_uuid=gpu), 0)
    state.fail_all([gpu])
    assert not state.bad_gpus


def test_broken_stream_marks_every_gpu_until_a_new_subscription_stays_up(h100_sim: SimBackend) -> None:
    gpus = [g.uuid for g in h100_sim.inventory().gpus]
    state = HealthState(quiet_seconds=5)
    assert state.fail_all(gpus)
    assert not any(state.healthy(g) for g in gpus) and state.reason(gpus[0]) == EVENT_STREAM_FAILED
    assert state.next_deadline() is None  # nothing comes back while the stream is down
    assert not state.stream_restored(10)
    assert state.next_deadline() == 15
    assert state.due(14.9) == [] and not state.healthy(gpus[0])
    assert sorted(state.due(15)) == sorted(gpus) and all(state.healthy(g) for g in gpus)
    assert state.next_deadline() is None and not state.stream_failed


def test_stream_breaking_again_during_the_quiet_period_keeps_the_marks(h100_sim: SimBackend) -> None:
    gpus = [g.uuid for g in h100_sim.inventory().gpus]
    state = HealthState(quiet_seconds=5)
    state.fail_all(gpus)
    state.stream_restored(10)
    assert not state.fail_all(gpus)  # already marked: nothing new
    assert state.next_deadline() is None and state.due(100) == []
    state.stream_restored(100)
    assert sorted(state.due(105)) == sorted(gpus)


def test_real_faults_survive_the_stream_marks(h100_sim: SimBackend) -> None:
    bad, pending, fine = (g.uuid for g in h100_sim.inventory().gpus[:3])
    state = HealthState(quiet_seconds=5)
    state.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=bad, xid=48), 0)
    state.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=pending, xid=79), 0)
    state.apply(HealthEvent(kind=EventKind.GPU_RECOVERED, gpu_uuid=pending), 1)
    state.fail_all([bad, pending, fine])
    assert state.due(6) == [] and not state.healthy(pending)  # recovered underneath, still not vouched for
    state.stream_restored(10)
    assert sorted(state.due(15)) == sorted([pending, fine])
    assert "XID 48" in (state.reason(bad) or "") and state.healthy(pending) and state.healthy(fine)


def test_a_fault_after_resubscription_outlives_the_stream_marks(h100_sim: SimBackend) -> None:
    gpu = h100_sim.inventory().gpus[0].uuid
    state = HealthState(quiet_seconds=5)
    state.fail_all([gpu])
    state.stream_restored(10)
    state.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=gpu, xid=79), 12)
    assert state.due(15) == [] and "XID 79" in (state.reason(gpu) or "")


def test_zero_quiet_period_clears_stream_marks_at_once(h100_sim: SimBackend) -> None:
    gpu = h100_sim.inventory().gpus[0].uuid
    state = HealthState(quiet_seconds=0)
    state.fail_all([gpu])
    assert state.stream_restored(3) and state.due(3) == [gpu] and state.healthy(gpu)


class _Stop(Exception):
    """Ends a follow_events loop after a set number of pauses."""


async def _follow(streams: list[str], pauses: int) -> tuple[list[str], list[float]]:
    """Run follow_events over scripted subscriptions ("fail", "end", "event"); the calls and the pauses."""
    calls: list[str] = []
    delays: list[float] = []
    script = iter(streams)

    async def events() -> AsyncIterator[HealthEvent]:
        kind = next(script, "end")
        if kind == "fail":
            raise GpuError("cannot create the NVML event set")
        if kind == "event":
            yield HealthEvent(kind=EventKind.XID, gpu_uuid="GPU-x", xid=13)

    async def on_event(event: HealthEvent) -> None:
        calls.append("event")

    async def on_failure(exc: Exception) -> None:
        calls.append(f"failed: {exc}")

    async def on_subscribe() -> None:
        calls.append("subscribe")

    async def sleep(delay: float) -> None:
        delays.append(delay)
        if len(delays) == pauses:
            raise _Stop

    with pytest.raises(_Stop):
        await follow_events(events, on_event=on_event, on_failure=on_failure, on_subscribe=on_subscribe, sleep=sleep)
    return calls, delays


async def test_a_failing_stream_is_retried_with_a_bounded_doubling_backoff() -> None:
    calls, delays = await _follow(["fail"] * 9, pauses=9)
    assert delays == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert calls[:3] == ["subscribe", "failed: cannot create the NVML event set", "subscribe"]


async def test_a_stream_that_ends_is_not_resubscribed_in_a_busy_loop() -> None:
    calls, delays = await _follow(["end", "end", "end"], pauses=3)
    assert delays == [0.5, 1, 2] and calls == ["subscribe"] * 3


async def test_a_stream_that_delivered_starts_the_backoff_over() -> None:
    calls, delays = await _follow(["fail", "fail", "event", "fail"], pauses=4)
    assert delays == [0.5, 1, 0.5, 1] and "event" in calls


async def test_recoveries_finish_at_their_deadline() -> None:
    loop = asyncio.get_running_loop()
    state = HealthState(quiet_seconds=0.02)
    state.apply(HealthEvent(kind=EventKind.XID, gpu_uuid="GPU-a", xid=79), loop.time())
    state.apply(HealthEvent(kind=EventKind.GPU_RECOVERED, gpu_uuid="GPU-a"), loop.time())
    back = asyncio.Event()

    async def finish() -> None:
        if state.due(loop.time()):
            back.set()

    task = asyncio.create_task(
        run_recoveries(state.next_deadline, kick=asyncio.Event(), finish=finish, clock=loop.time)
    )
    try:
        await asyncio.wait_for(back.wait(), 2)
        assert state.healthy("GPU-a")
    finally:
        task.cancel()
