"""Which devices a health event withdraws, under the device plugin's XID policy."""

from __future__ import annotations

from gpuchain.dra.health import apply_event
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.xid import HealthPolicy

POLICY = HealthPolicy()


def test_fatal_xid_withdraws_the_gpu_and_application_xid_does_not(h100_sim: SimBackend) -> None:
    inv = h100_sim.inventory()
    gpu = inv.gpu(2).uuid
    assert apply_event(frozenset(), HealthEvent(EventKind.XID, gpu, xid=48), inv, POLICY) == {gpu}
    for xid in (13, 31, 43, 45, 68, 109):
        assert apply_event(frozenset(), HealthEvent(EventKind.XID, gpu, xid=xid), inv, POLICY) == frozenset()


def test_xid_on_a_mig_device_withdraws_only_it_and_recovery_restores_all(mig_sim: SimBackend) -> None:
    inv = mig_sim.inventory()
    parent = inv.gpu(0)
    mig = parent.mig_devices[1].uuid
    after = apply_event(frozenset(), HealthEvent(EventKind.XID, parent.uuid, xid=94, mig_uuid=mig), inv, POLICY)
    assert after == {mig}
    both = apply_event(after, HealthEvent(EventKind.GPU_LOST, parent.uuid), inv, POLICY)
    assert both == {mig, parent.uuid}
    assert apply_event(both, HealthEvent(EventKind.GPU_RECOVERED, parent.uuid), inv, POLICY) == frozenset()


def test_disabled_checks_never_withdraw(h100_sim: SimBackend) -> None:
    inv = h100_sim.inventory()
    off = HealthPolicy(checks=False)
    gpu = inv.gpu(0).uuid
    assert apply_event(frozenset(), HealthEvent(EventKind.XID, gpu, xid=79), inv, off) == frozenset()
    assert apply_event(frozenset(), HealthEvent(EventKind.GPU_LOST, gpu), inv, off) == frozenset()
