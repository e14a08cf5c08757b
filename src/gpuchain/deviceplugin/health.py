"""Device health from backend events: which ids are unhealthy, and when they may come back.

``HealthState`` is plain state driven by events and a clock the caller passes in, so every rule is
testable without timers:

- an XID the policy counts marks the GPU (every device on it) or, when the event names a MIG
  device, only that MIG device;
- a lost GPU marks all its devices;
- a GPU the backend reports recovered becomes healthy again once ``quiet_seconds`` pass without
  a new counted event on it (NVIDIA's plugin never recovers; that is a known complaint).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuchain.deviceplugin.resources import AnnouncedDevice
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.xid import HealthPolicy, describe

EVENT_STREAM_FAILED = "health event stream failed"


@dataclass
class HealthState:
    """Unhealthy GPUs and MIG devices with the reason, and recoveries waiting out the quiet period."""

    policy: HealthPolicy = field(default_factory=HealthPolicy)
    quiet_seconds: float = 10.0
    bad_gpus: dict[str, str] = field(default_factory=dict)
    bad_migs: dict[str, tuple[str, str]] = field(default_factory=dict)
    recover_at: dict[str, float] = field(default_factory=dict)

    def apply(self, event: HealthEvent, now: float) -> bool:
        """Take one event into account; True when any device's health may have changed."""
        if not self.policy.checks:
            return False
        if event.kind is EventKind.GPU_RECOVERED:
            if event.gpu_uuid in self.bad_gpus or any(p == event.gpu_uuid for p, _ in self.bad_migs.values()):
                self.recover_at[event.gpu_uuid] = now + self.quiet_seconds
                return self.quiet_seconds == 0 and bool(self.due(now))
            return False
        if event.kind is EventKind.GPU_LOST:
            reason = "GPU lost (fell off the bus)"
        elif event.xid is not None and self.policy.marks_unhealthy(event.xid):
            reason = f"XID {event.xid}: {describe(event.xid).meaning}"
        else:
            return False
        self.recover_at.pop(event.gpu_uuid, None)
        if event.mig_uuid and event.kind is EventKind.XID:
            changed = event.mig_uuid not in self.bad_migs
            self.bad_migs[event.mig_uuid] = (event.gpu_uuid, reason)
            return changed
        changed = event.gpu_uuid not in self.bad_gpus
        self.bad_gpus[event.gpu_uuid] = reason
        return changed

    def fail_all(self, gpu_uuids: list[str]) -> None:
        """The event stream itself broke: nothing can be vouched for, as NVIDIA's plugin decides."""
        if self.policy.checks:
            for uuid in gpu_uuids:
                self.bad_gpus[uuid] = EVENT_STREAM_FAILED

    def due(self, now: float) -> list[str]:
        """Clear GPUs whose quiet period has passed; returns their UUIDs."""
        done = [uuid for uuid, at in self.recover_at.items() if at <= now]
        for uuid in done:
            del self.recover_at[uuid]
            self.bad_gpus.pop(uuid, None)
            for mig in [m for m, (parent, _) in self.bad_migs.items() if parent == uuid]:
                del self.bad_migs[mig]
        return done

    def next_deadline(self) -> float | None:
        return min(self.recover_at.values(), default=None)

    def reason(self, device: AnnouncedDevice) -> str | None:
        """Why ``device`` is unhealthy, or None when it is healthy."""
        if device.gpu_uuid in self.bad_gpus:
            return self.bad_gpus[device.gpu_uuid]
        if device.mig_uuid and device.mig_uuid in self.bad_migs:
            return self.bad_migs[device.mig_uuid][1]
        return None

    def healthy(self, device: AnnouncedDevice) -> bool:
        return self.reason(device) is None
