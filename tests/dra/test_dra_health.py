"""Which devices a health event withdraws from the slice: the GPU layer's HealthState, as DRA reads it
(``unhealthy()``: GPU and MIG UUIDs), under the device plugin's XID policy."""

from __future__ import annotations

from gpuchain.gpu.health import HealthState
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.xid import HealthPolicy


def test_fatal_xid_withdraws_the_gpu_and_application_xid_does_not(h100_sim: SimBackend) -> None:
    gpu = h100_sim.inventory().gpu(2).uuid
    state = HealthState()
    for xid in (13, 31, 43, 45, 68, 109):
        state.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=gpu, xid=xid), 0)
        assert state.unhealthy() == frozenset()
    state.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=gpu, xid=48), 0)
    assert state.unhealthy() == {gpu}


def test_xid_on_a_mig_device_withdraws_only_it_and_recovery_restores_all(mig_sim: SimBackend) -> None:
    parent = mig_sim.inventory().gpu(0)
    mig = parent.mig_devices[1].uuid
    state = HealthState(quiet_seconds=5)
    state.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=parent.uuid, xid=94, mig_uuid=mig), 0)
    assert state.unhealthy() == {mig}
    state.apply(HealthEvent(kind=EventKind.GPU_LOST, gpu_uuid=parent.uuid), 1)
    assert state.unhealthy() == {mig, parent.uuid}
    state.apply(HealthEvent(kind=EventKind.GPU_RECOVERED, gpu_uuid=parent.uuid), 2)
    assert state.unhealthy() == {mig, parent.uuid}  # not before the quiet period
    state.due(7)
    assert state.unhealthy() == frozenset()


def test_recovery_of_a_gpu_that_was_never_bad_changes_nothing(mig_sim: SimBackend) -> None:
    inv = mig_sim.inventory()
    state = HealthState(quiet_seconds=0)
    state.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=inv.gpu(1).uuid, xid=48), 0)
    assert not state.apply(HealthEvent(kind=EventKind.GPU_RECOVERED, gpu_uuid=inv.gpu(0).uuid), 1)
    assert state.unhealthy() == {inv.gpu(1).uuid}


def test_disabled_checks_never_withdraw(h100_sim: SimBackend) -> None:
    gpu = h100_sim.inventory().gpu(0).uuid
    state = HealthState(policy=HealthPolicy(checks=False))
    state.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=gpu, xid=79), 0)
    state.apply(HealthEvent(kind=EventKind.GPU_LOST, gpu_uuid=gpu), 0)
    assert state.unhealthy() == frozenset()
