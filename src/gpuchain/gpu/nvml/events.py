"""Health events: XIDs from an NVML event set, lost and recovered GPUs from a probe, on a thread per subscriber."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from gpuchain.gpu.errors import GpuError, NotSupportedError, ReleasedError
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.nvml.queries import Queries
from gpuchain.gpu.nvml.session import WAIT_MS, Watcher, as_text, nvml_operation

log = logging.getLogger(__name__)

_NO_INSTANCE = 0xFFFFFFFF


@dataclass(frozen=True, kw_only=True)
class _Armed:
    """What a watcher holds while it listens: the event set and what its answers mean."""

    event_set: Any
    uuid_of: dict[Any, str]
    mig_by_ids: dict[tuple[str, int, int], str]
    uuids: tuple[str, ...]
    epoch: int
    """The release epoch the event set was made in: once the backend's epoch has moved past it, the
    set is stale (freed, or about to be, by the release's nvmlShutdown) and the watcher stops using it."""


def _handle_key(handle: Any) -> Any:
    """A hashable identity for an NVML device handle (a ctypes pointer in pynvml)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


class EventWatch(Queries):
    """``events()`` and ``xid_event_support``: one watcher thread per subscription, paused while released."""

    _probe_interval: float
    """Seconds between two lost/recovered probes of every GPU."""

    async def events(self) -> AsyncIterator[HealthEvent]:
        """XID events from an NVML event set, plus lost/recovered from periodic probes.

        NVML waits block, so a thread does them and hands events to the loop; closing the
        generator stops the thread within one wait (0.5 s). If the watcher cannot start or dies
        (no GPU could be registered, the event set cannot be made), the error is raised here, so
        the consumer can mark its devices unhealthy instead of waiting forever.

        While the backend is released the stream stays open and delivers nothing: the watcher has
        freed its event set, so an XID raised then is never delivered (NVML queues events only on
        a live event set), and no GPU is probed, so none is reported lost for the release. After
        ``reacquire`` it registers every GPU again and carries on, its lost/recovered state intact.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[HealthEvent | GpuError] = asyncio.Queue()
        stop = threading.Event()
        watcher = Watcher()
        with self._cond:
            self._watchers.append(watcher)

        def report(exc: GpuError) -> None:
            if not stop.is_set():
                with contextlib.suppress(RuntimeError):  # the subscriber's loop has closed: nobody listens
                    loop.call_soon_threadsafe(queue.put_nowait, exc)

        def watch() -> None:
            try:
                self._watch(loop, queue, stop, watcher)
            except GpuError as exc:
                report(exc)
            except Exception as exc:  # a defect: say so now and end the stream, never die silently
                log.exception("the NVML event watcher failed")
                report(GpuError(f"the NVML event watcher failed: {exc!r}"))
            finally:
                with self._cond:
                    watcher.done, watcher.holding, watcher.armed = True, False, None
                    self._watchers.remove(watcher)
                    self._cond.notify_all()

        thread = threading.Thread(target=watch, name="nvml-events", daemon=True)
        thread.start()
        try:
            while True:
                item = await queue.get()
                if isinstance(item, GpuError):
                    raise item
                yield item
        finally:
            stop.set()
            with self._cond:
                self._cond.notify_all()

    def _watch(
        self,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[HealthEvent | GpuError],
        stop: threading.Event,
        watcher: Watcher,
    ) -> None:
        """The watcher thread: arm (an event set with every GPU registered), listen until stopped or
        released, let go; while released, wait for ``reacquire`` and arm again with fresh handles."""
        n = self._nvml

        def emit(event: HealthEvent) -> None:
            if stop.is_set():
                return
            try:
                loop.call_soon_threadsafe(queue.put_nowait, event)
            except RuntimeError:  # the subscriber's loop has closed: nobody is listening any more
                stop.set()

        lost: set[str] = set()
        uuids: tuple[str, ...] = ()
        next_probe = time.monotonic() + self._probe_interval
        with self._reset_lock:
            resets_seen = len(self._reset_log)
        while self._hold(watcher, stop):
            armed: _Armed | None = None
            try:
                armed = self._arm(watcher)
                uuids = tuple(dict.fromkeys(armed.uuids + uuids))  # a GPU lost meanwhile is still probed
                while not stop.is_set() and not self._released and self._epoch == armed.epoch:
                    with self._reset_lock:
                        reset = self._reset_log[resets_seen:]
                        resets_seen = len(self._reset_log)
                    for gpu_uuid in reset:
                        lost.discard(gpu_uuid)
                        emit(
                            HealthEvent(
                                kind=EventKind.GPU_RECOVERED,
                                gpu_uuid=gpu_uuid,
                                message="GPU reset",
                                timestamp=time.time(),
                            )
                        )
                    try:
                        data = n.nvmlEventSetWait(armed.event_set, WAIT_MS)
                    except n.NVMLError as exc:
                        if self._released or self._epoch != armed.epoch:
                            break
                        if getattr(exc, "value", None) != n.NVML_ERROR_TIMEOUT:
                            log.warning("NVML event wait failed (%s); probing every GPU", exc)
                            next_probe = 0.0
                            stop.wait(0.5)
                    else:
                        if self._torn_down > armed.epoch:
                            break  # the answer of a wait stuck across a shutdown: its set is freed
                        emit(self._xid_event(armed, data))
                    if time.monotonic() >= next_probe:
                        if not self._probe(uuids, lost, emit):
                            break
                        next_probe = time.monotonic() + self._probe_interval
            except ReleasedError:
                pass  # released while arming or probing: let go, then wait for reacquire
            finally:
                self._let_go(watcher, armed)

    def _hold(self, watcher: Watcher, stop: threading.Event) -> bool:
        """Wait while the backend is released; then mark the watcher as holding NVML (so a release
        waits for it) and say True, or False once the subscriber has gone."""
        with self._cond:
            while self._released and not stop.is_set():
                self._cond.wait(WAIT_MS / 1000)
            if stop.is_set():
                return False
            watcher.holding = True
            return True

    @nvml_operation
    def _arm(self, watcher: Watcher) -> _Armed:
        """A new event set with every GPU registered for XID events, GPU by GPU with fresh handles.

        A GPU that answers with an error (one a failed reset left needing another, RESET_REQUIRED)
        is logged and armed as far as it answers; its UUID, when it has one, stays among those the
        watcher probes, so the probe reports it lost, as it would a GPU fallen off the bus. One bad
        GPU must not end the stream: consumers would then fail every GPU on the node."""
        n = self._nvml
        epoch = self._local.epoch
        assert epoch is not None  # an operation always runs in a session
        event_set = self._call(n.nvmlEventSetCreate)
        uuid_of: dict[Any, str] = {}
        mig_by_ids: dict[tuple[str, int, int], str] = {}
        uuids: list[str] = []
        try:
            for index in range(self._call(n.nvmlDeviceGetCount)):
                self._arm_gpu(index, event_set, uuid_of, mig_by_ids, uuids)
        except BaseException:
            self._drop(event_set, epoch)
            raise
        armed = _Armed(event_set=event_set, uuid_of=uuid_of, mig_by_ids=mig_by_ids, uuids=tuple(uuids), epoch=epoch)
        with self._cond:
            if self._released or self._epoch != epoch:  # released after the last call: not armed
                stale = True
            else:
                stale = False
                watcher.armed = epoch
                self._cond.notify_all()
        if stale:
            self._drop(event_set, epoch)
            raise self._released_error("nvmlDeviceRegisterEvents")
        return armed

    def _arm_gpu(
        self,
        index: int,
        event_set: Any,
        uuid_of: dict[Any, str],
        mig_by_ids: dict[tuple[str, int, int], str],
        uuids: list[str],
    ) -> None:
        """Register one GPU for XID events and note its MIG devices; log what it does not answer."""
        n = self._nvml
        uuid: str | None = None
        try:
            h = self._call(n.nvmlDeviceGetHandleByIndex, index)
            uuid = as_text(self._call(n.nvmlDeviceGetUUID, h))
            uuids.append(uuid)
            uuid_of[_handle_key(h)] = uuid
            try:
                self._call(n.nvmlDeviceRegisterEvents, h, n.nvmlEventTypeXidCriticalError, event_set)
            except NotSupportedError:
                log.warning("GPU %s does not support XID events; its health is probed only", uuid)
            gpu = self._gpu(index, h)
        except ReleasedError:
            raise
        except GpuError as exc:
            log.warning(
                "GPU %d (%s) is watched only in part: %s; the probe reports it lost until it answers",
                index,
                uuid or "UUID unknown",
                exc,
            )
            return
        mig_by_ids.update({(m.parent_uuid, m.gi_id, m.ci_id): m.uuid for m in gpu.mig_devices})

    def _let_go(self, watcher: Watcher, armed: _Armed | None) -> None:
        """Free the watcher's event set (directly: ``release`` is waiting for exactly this, and has
        not shut NVML down yet) and tell ``release`` it holds nothing now."""
        if armed is not None:
            self._drop(armed.event_set, armed.epoch)
        with self._cond:
            watcher.holding = False
            watcher.armed = None
            self._cond.notify_all()

    def _drop(self, event_set: Any, epoch: int) -> None:
        """Free an event set made in ``epoch``, unless an nvmlShutdown has freed it already. Counted
        as a call under way, so a release waits for the free before it shuts NVML down. A set whose
        shutdown did not tear the library down (another backend in this process still holds NVML)
        is left allocated: one leaked event set, never one freed twice."""
        with self._lock:
            if self._torn_down > epoch:
                return
            self._inflight += 1
        try:
            self._free_event_set(event_set)
        finally:
            with self._lock:
                self._inflight -= 1
                if not self._inflight and self._released:
                    self._cond.notify_all()

    def _free_event_set(self, event_set: Any) -> None:
        try:
            self._nvml.nvmlEventSetFree(event_set)
        except self._nvml.NVMLError as exc:
            log.debug("nvmlEventSetFree: %s", exc)

    def _xid_event(self, armed: _Armed, data: Any) -> HealthEvent:
        # Map the handle, not ask it: the GPU may already be gone (XID 79).
        gpu_uuid = armed.uuid_of.get(_handle_key(data.device), "unknown")
        mig_uuid = None
        if data.gpuInstanceId != _NO_INSTANCE:
            mig_uuid = armed.mig_by_ids.get((gpu_uuid, int(data.gpuInstanceId), int(data.computeInstanceId)))
        xid = int(data.eventData)
        return HealthEvent(
            kind=EventKind.XID,
            gpu_uuid=gpu_uuid,
            xid=xid,
            mig_uuid=mig_uuid,
            message=f"XID {xid}",
            timestamp=time.time(),
        )

    def _probe(self, uuids: tuple[str, ...], lost: set[str], emit: Callable[[HealthEvent], None]) -> bool:
        """One round of the lost/recovered probe; False, with nothing changed for the GPU being
        probed, when the backend was released during it (a release is not a lost GPU)."""
        for gpu_uuid in uuids:
            alive = self._answers(gpu_uuid)
            if alive is None:
                return False
            if not alive and gpu_uuid not in lost:
                lost.add(gpu_uuid)
                emit(
                    HealthEvent(
                        kind=EventKind.GPU_LOST, gpu_uuid=gpu_uuid, message="GPU is lost", timestamp=time.time()
                    )
                )
            elif alive and gpu_uuid in lost:
                lost.discard(gpu_uuid)
                emit(
                    HealthEvent(
                        kind=EventKind.GPU_RECOVERED,
                        gpu_uuid=gpu_uuid,
                        message="GPU answers again",
                        timestamp=time.time(),
                    )
                )
        return True

    @nvml_operation
    def xid_event_support(self) -> dict[str, bool]:
        """Per GPU UUID: can an NVML event set register it for XID events? Read-only (the set is freed)."""
        n = self._nvml
        event_set = self._call(n.nvmlEventSetCreate)
        support: dict[str, bool] = {}
        try:
            for gpu in self.inventory().gpus:
                h = self._call(n.nvmlDeviceGetHandleByUUID, gpu.uuid)
                try:
                    self._call(n.nvmlDeviceRegisterEvents, h, n.nvmlEventTypeXidCriticalError, event_set)
                    support[gpu.uuid] = True
                except NotSupportedError:
                    support[gpu.uuid] = False
        finally:
            self._call(n.nvmlEventSetFree, event_set)
        return support

    def _answers(self, gpu_uuid: str) -> bool | None:
        """Whether the GPU answers NVML; None when the backend is released (no answer either way)."""
        try:
            h = self._call(self._nvml.nvmlDeviceGetHandleByUUID, gpu_uuid)
            self._call(self._nvml.nvmlDeviceGetMemoryInfo, h)
        except ReleasedError:
            return None
        except GpuError:
            return False
        return True
