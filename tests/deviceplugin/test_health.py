"""Health state: XID policy, MIG scope, lost GPUs, recovery after the quiet period (pure, explicit clock)."""

from __future__ import annotations

from gpuchain.deviceplugin.config import parse_config
from gpuchain.deviceplugin.health import HealthState
from gpuchain.deviceplugin.resources import map_resources
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.xid import HealthPolicy


def test_fatal_xid_marks_the_gpu_and_application_xid_does_not(h100_sim: SimBackend) -> None:
    (res,) = map_resources(h100_sim.inventory(), parse_config(""))
    state = HealthState()
    gpu = res.devices[1].gpu_uuid
    assert not state.apply(HealthEvent(EventKind.XID, gpu, xid=13), 0)
    assert all(state.healthy(d) for d in res.devices)
    assert state.apply(HealthEvent(EventKind.XID, gpu, xid=48), 0)
    assert [state.healthy(d) for d in res.devices].count(False) == 1
    assert "XID 48" in (state.reason(res.devices[1]) or "")


def test_mig_event_marks_only_that_mig_device(mig_sim: SimBackend) -> None:
    resources = map_resources(mig_sim.inventory(), parse_config("flags: {migStrategy: mixed}"))
    devices = [d for r in resources for d in r.devices]
    target = next(d for d in devices if d.mig_uuid)
    state = HealthState()
    state.apply(HealthEvent(EventKind.XID, target.gpu_uuid, xid=48, mig_uuid=target.mig_uuid), 0)
    assert [d.id for d in devices if not state.healthy(d)] == [target.id]


def test_xid_on_a_mig_gpu_without_mig_uuid_marks_all_its_devices(mig_sim: SimBackend) -> None:
    resources = map_resources(mig_sim.inventory(), parse_config("flags: {migStrategy: mixed}"))
    devices = [d for r in resources for d in r.devices]
    parent = next(d for d in devices if d.mig_uuid).gpu_uuid
    state = HealthState()
    state.apply(HealthEvent(EventKind.XID, parent, xid=79), 0)
    unhealthy = {d.id for d in devices if not state.healthy(d)}
    assert unhealthy == {d.id for d in devices if d.gpu_uuid == parent} and len(unhealthy) == 4


def test_lost_gpu_marks_all_replicas(h100_sim: SimBackend) -> None:
    (res,) = map_resources(
        h100_sim.inventory(), parse_config("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 3}]}}")
    )
    gpu = res.devices[0].gpu_uuid
    state = HealthState()
    assert state.apply(HealthEvent(EventKind.GPU_LOST, gpu), 0)
    assert [d.replica for d in res.devices if not state.healthy(d)] == [0, 1, 2]


def test_recovery_waits_out_the_quiet_period(h100_sim: SimBackend) -> None:
    (res,) = map_resources(h100_sim.inventory(), parse_config(""))
    dev = res.devices[0]
    state = HealthState(quiet_seconds=5)
    state.apply(HealthEvent(EventKind.XID, dev.gpu_uuid, xid=79), 0)
    state.apply(HealthEvent(EventKind.GPU_RECOVERED, dev.gpu_uuid), 10)
    assert state.next_deadline() == 15
    assert state.due(14.9) == [] and not state.healthy(dev)
    assert state.due(15) == [dev.gpu_uuid] and state.healthy(dev)


def test_new_error_during_quiet_period_cancels_recovery(h100_sim: SimBackend) -> None:
    (res,) = map_resources(h100_sim.inventory(), parse_config(""))
    dev = res.devices[0]
    state = HealthState(quiet_seconds=5)
    state.apply(HealthEvent(EventKind.XID, dev.gpu_uuid, xid=79), 0)
    state.apply(HealthEvent(EventKind.GPU_RECOVERED, dev.gpu_uuid), 10)
    state.apply(HealthEvent(EventKind.XID, dev.gpu_uuid, xid=48), 12)
    assert state.due(100) == [] and not state.healthy(dev)


def test_recovery_of_a_healthy_gpu_is_a_no_op(h100_sim: SimBackend) -> None:
    state = HealthState()
    assert not state.apply(HealthEvent(EventKind.GPU_RECOVERED, h100_sim.inventory().gpus[0].uuid), 0)
    assert state.next_deadline() is None


def test_disabled_checks_ignore_everything(h100_sim: SimBackend) -> None:
    state = HealthState(HealthPolicy(checks=False))
    gpu = h100_sim.inventory().gpus[0].uuid
    assert not state.apply(HealthEvent(EventKind.GPU_LOST, gpu), 0)
    state.fail_all([gpu])
    assert not state.bad_gpus
