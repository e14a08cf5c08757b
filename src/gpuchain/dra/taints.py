"""Health as device taints (KEP-5055): an unhealthy device stays in the slice, tainted, instead of vanishing.

A withdrawn device tells the scheduler nothing and leaves the pods on it alone. A taint says why,
keeps the device visible (``kubectl get resourceslice``), and its effect decides what happens:

- ``NoSchedule``: no new claim gets the device; claims already on it stay. For faults whose
  resolution in NVIDIA's XID catalog (``gpu/xids.yaml``) is ``none`` (the XID counted as
  unhealthy, nothing to clear), and while the GPU's health events cannot be read at all (the
  device may be fine).
- ``NoExecute``: also evicts the pods whose claims use it (kube-controller-manager's device taint
  eviction). For faults whose resolution needs the work off the GPU (restart the application,
  reset the GPU, reboot the node), a GPU fallen off the bus, and a GPU the repair loop has taken
  (it drains, resets and burns in the GPU before giving it back).

One taint per device, key ``gpu.gpuchain.io/unhealthy``, the value saying which fault
(``xid-48``, ``xid-13-31``, ``gpu-lost``, ``no-health-events``, ``quarantined``, and
``mps-daemon-down`` for a shared GPU whose MPS control daemon does not answer: ``NoSchedule``, as
the plugin starts it again and the pods on it keep their GPU), so a claim can
tolerate one kind (a diagnostic job tolerating ``quarantined``). When the device is healthy again
(the quiet period after a recovery, or the repair loop giving the GPU back) the taint goes.

Kubernetes 1.34 and 1.35 serve ``Device.taints`` only with the ``DRADeviceTaints`` feature gate
(alpha); without it the API server drops the field, so the driver reads its slice back and falls
back to withdrawing the devices (``DraDriver``).
"""

from __future__ import annotations

from gpuchain.dra.kinds import DRIVER
from gpuchain.gpu.health import HealthState
from gpuchain.gpu.xid import Resolution, worst
from gpuchain.kube.objects import Obj

TAINT_KEY = f"{DRIVER}/unhealthy"
NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"


def _taint(value: str, effect: str) -> Obj:
    return {"key": TAINT_KEY, "value": value, "effect": effect}


def health_taint(health: HealthState, *, gpu_uuid: str, mig_uuid: str | None = None) -> Obj | None:
    """The taint of one device (a whole GPU, or a MIG device on it) as its health stands, None when healthy."""
    if gpu_uuid in health.quarantined:
        return _taint("quarantined", NO_EXECUTE)
    if gpu_uuid in health.bad_gpus:
        device = gpu_uuid
        only_stream_mark = gpu_uuid in health.stream_failed and health.stream_failed[gpu_uuid] is None
        if only_stream_mark:
            return _taint("no-health-events", NO_SCHEDULE)
    elif mig_uuid is not None and mig_uuid in health.bad_migs:
        device = mig_uuid
    else:
        return None
    xids = health.xids.get(device)
    if not xids:
        return _taint("gpu-lost", NO_EXECUTE)
    needs = worst(health.policy.table.needs(code, repeated) for code, repeated in xids.items())
    value = "xid-" + "-".join(str(code) for code in sorted(xids))
    return _taint(value[:63].rstrip("-"), NO_SCHEDULE if needs is Resolution.NONE else NO_EXECUTE)


def mps_taint() -> Obj:
    """The taint of a shared GPU whose MPS control daemon does not answer (``dra.mps``)."""
    return _taint("mps-daemon-down", NO_SCHEDULE)


def taints_of(device: Obj) -> list[Obj]:
    """The taints this driver put on a published device (server-added fields such as timeAdded kept)."""
    return [t for t in device.get("taints") or [] if t.get("key") == TAINT_KEY]
