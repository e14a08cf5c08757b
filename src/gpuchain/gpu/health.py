"""GPU health from backend events: which GPUs and MIG devices are unhealthy, and when they come back.

One implementation for every consumer (device plugin, DRA plugin, remediation publisher), so an
XID means the same thing to each of them. ``HealthState`` is plain state driven by events and a
clock the caller passes in, so every rule is testable without timers:

- an XID the policy counts marks the GPU or, when the event names a MIG device, only that MIG
  device; an XID with a threshold (``gpu.xid``) also counts once it repeats often enough on that
  device within its window, and is then remembered as repeated (it needs the threshold's
  resolution); ``xids`` keeps, per unhealthy device, the XIDs that counted;
- a lost GPU is marked;
- a GPU the backend reports recovered becomes healthy again, with its MIG devices, once
  ``quiet_seconds`` pass without a new counted event on it (NVIDIA's plugin never recovers;
  that is a known complaint);
- when the event stream itself breaks nothing can be vouched for: every GPU is marked
  (``fail_all``) until a new subscription has run for ``quiet_seconds`` (``stream_restored``).
  The marks lie over the real faults, which keep their own reasons and recoveries underneath.
- a GPU the repair loop has quarantined (``quarantine``) is withheld, with its MIG devices and
  replicas, whatever its events say, until the loop lets it go.

``follow_events`` and ``run_recoveries`` are the two loops every consumer runs around the state:
resubscribing with a bounded backoff, and finishing recoveries when their quiet period ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from gpuchain.common.supervise import wait_event
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.xid import HealthPolicy

log = logging.getLogger(__name__)

EVENT_STREAM_FAILED = "health event stream failed"
QUARANTINED = "quarantined by gpuchain's repair loop"
DEFAULT_QUIET_SECONDS = 10.0
"""How long a recovered GPU (or a restored event stream) must stay quiet before devices come back."""
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0


@dataclass(kw_only=True)
class HealthState:
    """Unhealthy GPUs and MIG devices with the reason, and recoveries waiting out the quiet period.

    ``bad_gpus`` holds every unhealthy GPU, stream-failure marks included; ``stream_failed``
    remembers, for each GPU the broken stream marked, the real fault it had underneath (None: none).
    """

    policy: HealthPolicy = field(default_factory=HealthPolicy)
    quiet_seconds: float = DEFAULT_QUIET_SECONDS
    bad_gpus: dict[str, str] = field(default_factory=dict)
    bad_migs: dict[str, tuple[str, str]] = field(default_factory=dict)
    recover_at: dict[str, float] = field(default_factory=dict)
    stream_failed: dict[str, str | None] = field(default_factory=dict)
    stream_clear_at: float | None = None
    quarantined: frozenset[str] = frozenset()
    xids: dict[str, dict[int, bool]] = field(default_factory=dict)
    """Unhealthy device -> the XIDs that counted on it -> whether that XID crossed its threshold."""
    seen: dict[tuple[str, int], tuple[float, ...]] = field(default_factory=dict)
    """(device, XID) -> recent occurrence times, for XIDs with a threshold only (bounded by its count)."""

    def quarantine(self, gpu_uuids: frozenset[str], now: float | None = None) -> bool:
        """Withhold exactly these GPUs for the repair loop; True when the set changed.

        With ``now``, a GPU the loop gives back is taken as recovered (its quiet period starts) as
        after the driver's recovery event: the loop gives a GPU back only once it was reset and
        burned in, and only the process that reset it (gpu-health) sees the driver's recovery, so
        an XID this process saw before the repair would otherwise withhold the GPU for good."""
        given_back = self.quarantined - gpu_uuids
        changed = gpu_uuids != self.quarantined
        self.quarantined = frozenset(gpu_uuids)
        if now is not None:
            for uuid in sorted(given_back):
                back = HealthEvent(kind=EventKind.GPU_RECOVERED, gpu_uuid=uuid, message="given back by the repair loop")
                changed = self.apply(back, now) or changed
        return changed

    def apply(self, event: HealthEvent, now: float) -> bool:
        """Take one event into account; True when any device's health may have changed."""
        if not self.policy.checks:
            return False
        if event.kind is EventKind.GPU_RECOVERED:
            if event.gpu_uuid in self.bad_gpus or any(p == event.gpu_uuid for p, _ in self.bad_migs.values()):
                self.recover_at[event.gpu_uuid] = now + self.quiet_seconds
                return self.quiet_seconds == 0 and bool(self.due(now))
            return False
        device = event.mig_uuid if event.mig_uuid and event.kind is EventKind.XID else event.gpu_uuid
        repeated = False
        if event.kind is EventKind.GPU_LOST:
            reason = "GPU lost (fell off the bus)"
        elif event.xid is not None:
            repeated = self._repeats(device, event.xid, now)
            if not self.policy.judge(event.xid, repeated).unhealthy:
                return False
            reason = f"XID {event.xid}: {self.policy.table.describe(event.xid).meaning}"
            if repeated:
                reason += f" (repeated: {self._threshold_text(event.xid)})"
            counted = self.xids.setdefault(device, {})
            before = counted.get(event.xid)
            counted[event.xid] = bool(before) or repeated
            changed_xids = before != counted[event.xid]
        else:
            return False
        self.recover_at.pop(event.gpu_uuid, None)
        if device != event.gpu_uuid:
            changed = device not in self.bad_migs or changed_xids
            self.bad_migs[device] = (event.gpu_uuid, reason)
            return changed
        changed = event.gpu_uuid not in self.bad_gpus or (event.kind is EventKind.XID and changed_xids)
        self.stream_failed.pop(event.gpu_uuid, None)  # a real fault outlives the stream mark
        self.bad_gpus[event.gpu_uuid] = reason
        return changed

    def _repeats(self, device: str, xid: int, now: float) -> bool:
        """Remember one occurrence of an XID with a threshold; whether the device has now reached it."""
        threshold = self.policy.threshold(xid)
        if threshold is None:
            return False
        times = threshold.remember(self.seen.get((device, xid), ()), now)
        self.seen[(device, xid)] = times
        return threshold.reached(times, now)

    def _threshold_text(self, xid: int) -> str:
        threshold = self.policy.threshold(xid)
        return threshold.describe() if threshold is not None else ""

    def repeated(self, device: str) -> tuple[int, ...]:
        """The XIDs on an unhealthy device that crossed their threshold (they need its resolution)."""
        return tuple(sorted(x for x, rep in self.xids.get(device, {}).items() if rep))

    def _forget(self, uuids: set[str]) -> None:
        """A device came back: its counted XIDs and occurrence history go (a reset starts afresh)."""
        for uuid in uuids:
            self.xids.pop(uuid, None)
        self.seen = {k: v for k, v in self.seen.items() if k[0] not in uuids}

    def fail_all(self, gpu_uuids: list[str]) -> bool:
        """The event stream itself broke: vouch for no GPU (as NVIDIA's plugin decides) until it is back.

        Returns True when a GPU was newly marked. Real faults are kept underneath the marks.
        """
        if not self.policy.checks:
            return False
        self.stream_clear_at = None
        changed = False
        for uuid in gpu_uuids:
            if uuid not in self.stream_failed:
                real = self.bad_gpus.get(uuid)
                self.stream_failed[uuid] = real
                changed = changed or real is None
            self.bad_gpus[uuid] = EVENT_STREAM_FAILED
        return changed

    def stream_restored(self, now: float) -> bool:
        """A new subscription is running: the stream marks go after ``quiet_seconds`` unless it breaks again.

        Returns True when marks are due now (a zero quiet period); the caller then calls ``due``.
        """
        if not self.stream_failed or self.stream_clear_at is not None:
            return False
        self.stream_clear_at = now + self.quiet_seconds
        return self.stream_clear_at <= now

    def due(self, now: float) -> list[str]:
        """Clear what has waited out its quiet period; returns the GPU UUIDs that came back."""
        done = [uuid for uuid, at in self.recover_at.items() if at <= now]
        back = []
        for uuid in done:
            del self.recover_at[uuid]
            migs = [m for m, (parent, _) in self.bad_migs.items() if parent == uuid]
            for mig in migs:
                del self.bad_migs[mig]
            self._forget({uuid, *migs})
            if uuid in self.stream_failed:
                self.stream_failed[uuid] = None  # recovered underneath; the stream mark stays for now
            else:
                self.bad_gpus.pop(uuid, None)
                back.append(uuid)
        if self.stream_clear_at is not None and self.stream_clear_at <= now:
            for uuid, real in self.stream_failed.items():
                if real is None:
                    self.bad_gpus.pop(uuid, None)
                    back.append(uuid)
                else:
                    self.bad_gpus[uuid] = real
            self.stream_failed.clear()
            self.stream_clear_at = None
        return back

    def next_deadline(self) -> float | None:
        """When ``due`` next has something to clear (None: nothing is waiting)."""
        deadlines = [*self.recover_at.values(), *([self.stream_clear_at] if self.stream_clear_at is not None else [])]
        return min(deadlines, default=None)

    def unhealthy(self) -> frozenset[str]:
        """Every unhealthy GPU and MIG UUID (a MIG device on a bad GPU is covered by its GPU's UUID)."""
        return frozenset(self.bad_gpus) | frozenset(self.bad_migs) | self.quarantined

    def reason(self, gpu_uuid: str, mig_uuid: str | None = None) -> str | None:
        """Why the GPU (or the MIG device on it) is unhealthy, or None when it is healthy."""
        if gpu_uuid in self.quarantined:
            return QUARANTINED
        if gpu_uuid in self.bad_gpus:
            return self.bad_gpus[gpu_uuid]
        if mig_uuid and mig_uuid in self.bad_migs:
            return self.bad_migs[mig_uuid][1]
        return None

    def healthy(self, gpu_uuid: str, mig_uuid: str | None = None) -> bool:
        return self.reason(gpu_uuid, mig_uuid) is None


async def follow_events(
    events: Callable[[], AsyncIterator[HealthEvent]],
    *,
    on_event: Callable[[HealthEvent], Awaitable[None]],
    on_failure: Callable[[Exception], Awaitable[None]],
    on_subscribe: Callable[[], Awaitable[None]],
    first_delay: float = BACKOFF_FIRST,
    max_delay: float = BACKOFF_MAX,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Consume ``events()`` forever, subscribing again after a failure or an end.

    ``on_subscribe`` runs before every subscription (the consumer calls ``stream_restored``),
    ``on_failure`` when the stream raised (the consumer calls ``fail_all``). Between
    subscriptions it waits ``first_delay`` seconds, doubling up to ``max_delay``, so a backend
    whose watcher cannot start is not hammered; a subscription that delivered events starts the
    backoff over.
    """
    delay = first_delay
    while True:
        await on_subscribe()
        delivered = False
        try:
            async for event in events():
                delivered = True
                await on_event(event)
            log.warning("health event stream ended; subscribing again in %.1f s", delay)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("health event stream failed (%s): no device is vouched for; retrying in %.1f s", exc, delay)
            await on_failure(exc)
        if delivered:
            delay = first_delay
        await sleep(delay)
        delay = min(delay * 2, max_delay)


async def run_recoveries(
    next_deadline: Callable[[], float | None],
    *,
    kick: asyncio.Event,
    finish: Callable[[], Awaitable[None]],
    clock: Callable[[], float],
) -> None:
    """Call ``finish`` (``due`` and publish) at every recovery deadline, forever.

    ``kick`` wakes the loop when the deadlines may have changed (a new event, a resubscription).
    """
    while True:
        deadline = next_deadline()
        timeout = None if deadline is None else max(0.0, deadline - clock())
        await wait_event(kick, timeout)
        kick.clear()
        await finish()
