"""NvmlBackend letting go of NVML around a GPU reset (``release``/``reacquire``), against the fake
pynvml (tests/fakes/fake_pynvml.py), whose nvmlInit/nvmlShutdown are counted per process as in
libnvidia-ml and whose last nvmlShutdown frees every event set.

What NVML itself would do decides the expectations: an XID raised while the backend is released
happens when no event set of this process exists (the watchers freed theirs, and the library is
shut down), so NVML has nowhere to queue it and it is never delivered; an XID raised after
``reacquire`` reaches the new event set. Every test is bounded in time.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pynvml
import pytest
from fakes.fake_pynvml import FakeNvml

from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import GpuError, LibraryNotFoundError, ReleasedError
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.nvml.session import REARM_WAIT_S, RELEASE_MARGIN_S
from gpuchain.gpu.sim import SimBackend

pytestmark = pytest.mark.timeout(30)


def backend(fake: FakeNvml, **kwargs: Any) -> NvmlBackend:
    return NvmlBackend(nvml=fake, probe_interval=0.1, **kwargs)


async def until(check: Any, what: str, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.01)


async def armed(fake: FakeNvml, gpus: int, sets: int = 1) -> None:
    """Until ``sets`` event sets exist with ``gpus`` GPUs registered on each."""
    await until(lambda: [len(r) for r in fake.registered()] == [gpus] * sets, f"{sets} event set(s) listen")


class Collector:
    """Reads one ``events()`` subscription into ``events`` until closed; ``error`` is what ended it."""

    def __init__(self, agent: GpuBackend) -> None:
        self.stream: AsyncIterator[HealthEvent] = agent.events()
        self.events: list[HealthEvent] = []
        self.error: BaseException | None = None
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for event in self.stream:
                self.events.append(event)
        except GpuError as exc:
            self.error = exc

    async def first(self, within: float = 5.0) -> HealthEvent:
        await until(lambda: self.events or self.error, "an event arrives", within)
        assert self.error is None, self.error
        return self.events[0]

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.stream.aclose()  # type: ignore[attr-defined]


# ---- the library's reference count -------------------------------------------------------------


def test_release_shuts_nvml_down_once_per_init_and_reacquire_initialises_it_again(h100_sim: SimBackend) -> None:
    fake = FakeNvml(h100_sim)
    nvml = backend(fake)
    assert (fake.initialized, nvml.released) == (1, False)
    nvml.release()
    nvml.release()  # idempotent: no second nvmlShutdown (NVML would answer UNINITIALIZED)
    assert (fake.initialized, nvml.released, fake.calls.count("nvmlShutdown")) == (0, True, 1)
    nvml.reacquire()
    nvml.reacquire()
    assert (fake.initialized, nvml.released, fake.inits) == (1, False, 2)
    nvml.release()
    nvml.close()  # after a release there is nothing left to shut down
    assert fake.initialized == 0 and fake.calls.count("nvmlShutdown") == 2


def test_two_backends_in_one_process_share_the_librarys_count(h100_sim: SimBackend) -> None:
    """NVML counts per process: one backend letting go leaves the library up for the other."""
    fake = FakeNvml(h100_sim)
    first, second = backend(fake), backend(fake)
    first.release()
    assert fake.initialized == 1
    uuid = h100_sim.inventory().gpu(0).uuid
    assert second.telemetry(uuid).uuid == uuid
    second.release()
    assert fake.initialized == 0
    first.reacquire()
    second.reacquire()
    assert fake.initialized == 2


def test_a_failed_reacquire_raises_the_drivers_error_and_stays_released(h100_sim: SimBackend) -> None:
    fake = FakeNvml(h100_sim)
    nvml = backend(fake)
    nvml.release()
    fake.library_missing = True
    with pytest.raises(LibraryNotFoundError):
        nvml.reacquire()
    assert nvml.released and fake.initialized == 0
    fake.library_missing = False
    nvml.reacquire()
    assert not nvml.released and fake.initialized == 1


# ---- reads while released ----------------------------------------------------------------------


def test_every_read_is_refused_while_released_without_touching_nvml(mig_sim: SimBackend) -> None:
    fake = FakeNvml(mig_sim)
    nvml = backend(fake)
    gpu = mig_sim.inventory().gpu(0)
    mig = gpu.mig_devices[0].uuid
    nvml.release()
    before = len(fake.calls)
    reads = {
        "inventory": nvml.inventory,
        "telemetry": lambda: nvml.telemetry(gpu.uuid),
        "health_readings": lambda: nvml.health_readings(gpu.uuid),
        "mig_memory": lambda: nvml.mig_memory(mig),
        "mig_mode": lambda: nvml.mig_mode(0),
        "gpu_instances": lambda: nvml.gpu_instances(0),
        "burn_in": lambda: nvml.burn_in(1),
        "reset_plan": lambda: nvml.reset_plan(1),
        "xid_event_support": nvml.xid_event_support,
    }
    for name, read in reads.items():
        with pytest.raises(ReleasedError, match="NVML is released"):
            read()
        assert len(fake.calls) == before, f"{name} touched NVML while released"
    nvml.reacquire()
    assert nvml.telemetry(gpu.uuid).uuid == gpu.uuid
    assert nvml.mig_memory(mig).uuid == mig


class _SlowMemoryInfo(FakeNvml):
    """nvmlDeviceGetMemoryInfo that blocks until ``gate`` opens, then answers as the library does
    at that moment: NVML_ERROR_UNINITIALIZED once the library has been shut down meanwhile."""

    def __init__(self, sim: SimBackend) -> None:
        super().__init__(sim)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        self.entered.set()
        self.gate.wait(10)
        return super().nvmlDeviceGetMemoryInfo(handle)


def test_release_waits_for_a_call_under_way_and_a_call_that_outlasts_it_is_a_released_error(
    h100_sim: SimBackend, caplog: pytest.LogCaptureFixture
) -> None:
    fake = _SlowMemoryInfo(h100_sim)
    nvml = backend(fake)
    uuid = h100_sim.inventory().gpu(3).uuid
    outcome: list[BaseException | object] = []

    def read() -> None:
        try:
            outcome.append(nvml.telemetry(uuid))
        except BaseException as exc:  # the test looks at what it was
            outcome.append(exc)

    # A call that returns within the margin: the shutdown comes after it; the reading's next call
    # is refused (the reading began before the release).
    reader = threading.Thread(target=read)
    reader.start()
    assert fake.entered.wait(5)
    threading.Timer(0.2, fake.gate.set).start()
    nvml.release()
    reader.join(5)
    assert len(outcome) == 1 and isinstance(outcome[0], ReleasedError), outcome
    assert "nvmlDeviceGetMemoryInfo" not in str(outcome[0])
    assert fake.calls.index("nvmlShutdown") > fake.calls.index("nvmlDeviceGetMemoryInfo")

    # A call stuck longer than the margin: NVML is shut down under it, and it says released.
    nvml.reacquire()
    fake.gate.clear()
    fake.entered.clear()
    outcome.clear()
    reader = threading.Thread(target=read)
    reader.start()
    assert fake.entered.wait(5)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="gpuchain.gpu.nvml"):
        nvml.release()
    took = time.monotonic() - started
    assert RELEASE_MARGIN_S <= took < RELEASE_MARGIN_S + 3
    assert "did not let go" in caplog.text and fake.initialized == 0
    fake.gate.set()
    reader.join(5)
    assert len(outcome) == 1 and isinstance(outcome[0], ReleasedError), outcome


def test_reads_racing_release_and_reacquire_raise_nothing_but_released_error(h100_sim: SimBackend) -> None:
    fake = FakeNvml(h100_sim)
    nvml = backend(fake)
    uuids = [g.uuid for g in h100_sim.inventory().gpus]
    stop = threading.Event()
    unexpected: list[BaseException] = []
    counts = {"read": 0, "released": 0}

    def hammer() -> None:
        while not stop.is_set():
            for uuid in uuids:
                try:
                    nvml.telemetry(uuid)
                    nvml.health_readings(uuid)
                    counts["read"] += 1
                except ReleasedError:
                    counts["released"] += 1
                except BaseException as exc:  # anything else fails the test
                    unexpected.append(exc)

    readers = [threading.Thread(target=hammer) for _ in range(2)]
    for r in readers:
        r.start()
    try:
        for _ in range(25):
            nvml.release()
            time.sleep(0.005)
            nvml.reacquire()
            time.sleep(0.005)
    finally:
        stop.set()
        for r in readers:
            r.join(10)
    assert unexpected == []
    assert counts["read"] > 0 and counts["released"] > 0, counts
    assert fake.initialized == 1


# ---- event subscriptions -----------------------------------------------------------------------


async def test_a_release_pauses_events_without_an_error_or_a_lost_gpu_and_reacquire_resumes_them(
    h100_sim: SimBackend,
) -> None:
    fake = FakeNvml(h100_sim)
    nvml = backend(fake)
    sub = Collector(nvml)
    await armed(fake, 8)
    await asyncio.to_thread(nvml.release)
    assert fake.event_sets == 0 and fake.initialized == 0  # the watcher let go before the shutdown
    h100_sim.inject_xid(2, xid=48)  # no event set exists now: NVML has nowhere to queue it
    await asyncio.sleep(0.5)  # several probe intervals: a release must not look like a lost GPU
    assert (sub.events, sub.error) == ([], None)
    await asyncio.to_thread(nvml.reacquire)
    assert [len(r) for r in fake.registered()] == [8]  # reacquire returns once the watcher listens
    h100_sim.inject_xid(5, xid=94)
    event = await sub.first()
    assert (event.kind, event.xid, event.gpu_uuid) == (EventKind.XID, 94, h100_sim.inventory().gpu(5).uuid)
    await asyncio.sleep(0.4)
    assert len(sub.events) == 1 and sub.error is None
    await sub.close()
    await until(lambda: fake.event_sets == 0, "the closed stream frees its event set")
    assert fake.stale == []  # no call ever used an event set after it was freed


async def test_every_subscription_pauses_and_resumes(h100_sim: SimBackend) -> None:
    fake = FakeNvml(h100_sim)
    nvml = backend(fake)
    subs = [Collector(nvml), Collector(nvml)]
    await armed(fake, 8, sets=2)
    await asyncio.to_thread(nvml.release)
    assert fake.event_sets == 0
    await asyncio.to_thread(nvml.reacquire)
    assert [len(r) for r in fake.registered()] == [8, 8]
    h100_sim.inject_xid(1, xid=31)
    assert [(await s.first()).xid for s in subs] == [31, 31]
    for s in subs:
        await s.close()
    await until(lambda: fake.event_sets == 0, "closed streams free their event sets")


async def test_the_lost_state_survives_a_release(h100_sim: SimBackend) -> None:
    """A GPU lost before the release is not reported again after it; one that came back during
    it is reported recovered; one lost during it is reported lost, by the probe after reacquire."""
    fake = FakeNvml(h100_sim)
    nvml = backend(fake)
    uuid = {i: h100_sim.inventory().gpu(i).uuid for i in (1, 6, 7)}
    sub = Collector(nvml)
    await armed(fake, 8)
    h100_sim.lose_gpu(6)
    h100_sim.lose_gpu(7)
    await until(lambda: len(sub.events) == 4, "two XIDs and two lost GPUs")
    assert {(e.kind, e.gpu_uuid) for e in sub.events} == {
        (EventKind.XID, uuid[6]),
        (EventKind.XID, uuid[7]),
        (EventKind.GPU_LOST, uuid[6]),
        (EventKind.GPU_LOST, uuid[7]),
    }
    await asyncio.to_thread(nvml.release)
    h100_sim.recover_gpu(7)
    h100_sim.lose_gpu(1)
    await asyncio.sleep(0.3)
    assert len(sub.events) == 4
    await asyncio.to_thread(nvml.reacquire)
    await until(lambda: len(sub.events) == 6, "the probe's answers after the reacquire")
    await asyncio.sleep(0.4)
    after = sub.events[4:]
    assert sorted((e.kind.value, e.gpu_uuid) for e in after) == sorted(
        [(EventKind.GPU_RECOVERED.value, uuid[7]), (EventKind.GPU_LOST.value, uuid[1])]
    )  # and no XID: GPU 1's XID 79 fell in the release; GPU 6, still lost, is not reported again
    await sub.close()


async def test_after_reacquire_the_watcher_knows_the_new_mig_devices(mig_sim: SimBackend) -> None:
    """MIG devices may be gone (and new ones made) across a reset: the watcher reads them again."""
    fake = FakeNvml(mig_sim)
    nvml = backend(fake)
    sub = Collector(nvml)
    await armed(fake, len(mig_sim.inventory().gpus))
    before = {m.uuid for m in mig_sim.inventory().gpu(0).mig_devices}
    await asyncio.to_thread(nvml.release)
    mig_sim.set_mig_layout(0, {"3g.40gb": 2})
    await asyncio.to_thread(nvml.reacquire)
    new = mig_sim.inventory().gpu(0).mig_devices[1].uuid
    assert new not in before
    mig_sim.inject_xid(new, xid=43)
    event = await sub.first()
    assert (event.xid, event.mig_uuid) == (43, new)
    await sub.close()


async def test_a_subscription_made_while_released_starts_listening_at_reacquire(h100_sim: SimBackend) -> None:
    fake = FakeNvml(h100_sim)
    nvml = backend(fake)
    nvml.release()
    sub = Collector(nvml)
    await asyncio.sleep(0.3)
    assert (sub.events, sub.error) == ([], None) and "nvmlEventSetCreate" not in fake.calls
    await asyncio.to_thread(nvml.reacquire)
    h100_sim.inject_xid(0, xid=13)
    assert (await sub.first()).xid == 13
    await sub.close()


class _StuckWait(FakeNvml):
    """nvmlEventSetWait that, once ``stuck`` is set, ignores its timeout until ``gate`` opens (a
    watcher stuck in the driver)."""

    def __init__(self, sim: SimBackend) -> None:
        super().__init__(sim)
        self.stuck = threading.Event()
        self.gate = threading.Event()

    def nvmlEventSetWait(self, es: Any, timeout_ms: int) -> Any:
        if self.stuck.is_set():
            self.gate.wait(10)
        return super().nvmlEventSetWait(es, timeout_ms)


async def test_a_watcher_that_does_not_let_go_is_logged_and_the_release_goes_on(
    h100_sim: SimBackend, caplog: pytest.LogCaptureFixture
) -> None:
    fake = _StuckWait(h100_sim)
    nvml = backend(fake)
    sub = Collector(nvml)
    await armed(fake, 8)
    fake.stuck.set()
    await asyncio.sleep(0.6)  # the watcher is inside a wait that will not return by itself
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="gpuchain.gpu.nvml"):
        await asyncio.to_thread(nvml.release)
    assert time.monotonic() - started < 0.5 + RELEASE_MARGIN_S + 2
    assert "1 event watcher(s)" in caplog.text and fake.initialized == 0
    fake.stuck.clear()
    fake.gate.set()  # its wait now meets a shut-down library; it lets go and pauses, without an error
    await asyncio.sleep(0.3)
    assert (sub.events, sub.error) == ([], None)
    await asyncio.to_thread(nvml.reacquire)
    h100_sim.inject_xid(4, xid=63)
    assert (await sub.first()).xid == 63
    await sub.close()


async def test_a_watcher_stuck_across_a_release_arms_a_new_event_set_when_its_call_returns(
    h100_sim: SimBackend, caplog: pytest.LogCaptureFixture
) -> None:
    """A watcher stuck in one NVML call longer than the release waits: the shutdown frees its event
    set under it. Its call returns while ``reacquire`` waits: it must leave the freed set alone (no
    more waits on it, no second free: in libnvidia-ml a use after free, then a double free) and arm
    a new one, and ``reacquire`` must wait for that rather than trust its state from before the
    release. (The review of the release code, repro /tmp/review-18/test_stale_watcher.py.)"""
    fake = _StuckWait(h100_sim)
    nvml = backend(fake)
    sub = Collector(nvml)
    await armed(fake, 8)
    fake.stuck.set()
    await asyncio.sleep(0.6)  # the watcher is inside a wait that will not return by itself
    with caplog.at_level(logging.WARNING, logger="gpuchain.gpu.nvml"):
        await asyncio.to_thread(nvml.release)
        assert "1 event watcher(s)" in caplog.text and fake.event_sets == 0
        fake.stuck.clear()
        threading.Timer(0.5, fake.gate.set).start()  # its call returns while reacquire waits
        started = time.monotonic()
        await asyncio.to_thread(nvml.reacquire)
        assert time.monotonic() - started >= 0.4  # it waited for the stuck watcher to arm again
        assert [len(r) for r in fake.registered()] == [8]  # on a new event set
        h100_sim.inject_xid(4, xid=63)
        event = await sub.first()
        assert (event.kind, event.xid) == (EventKind.XID, 63)
        await asyncio.sleep(1.2)  # more than two event waits
    assert "event wait failed" not in caplog.text and "has not registered" not in caplog.text
    assert fake.stale == ["nvmlEventSetWait"]  # only the call stuck across the shutdown touched the freed set
    assert sub.error is None
    await sub.close()
    await until(lambda: fake.event_sets == 0, "the closed stream frees its new event set")


async def test_a_watcher_still_stuck_when_reacquire_gives_up_waiting_delivers_once_it_returns(
    h100_sim: SimBackend, caplog: pytest.LogCaptureFixture
) -> None:
    """The review's repro as it ran: ``reacquire`` while the watcher is still stuck. It waits
    REARM_WAIT_S for it, says so, and returns; once the stuck call returns the watcher arms again."""
    fake = _StuckWait(h100_sim)
    nvml = backend(fake)
    sub = Collector(nvml)
    await armed(fake, 8)
    fake.stuck.set()
    await asyncio.sleep(0.6)
    with caplog.at_level(logging.WARNING, logger="gpuchain.gpu.nvml"):
        await asyncio.to_thread(nvml.release)
        started = time.monotonic()
        await asyncio.to_thread(nvml.reacquire)
        assert time.monotonic() - started >= REARM_WAIT_S - 0.5
        assert "an event watcher has not registered its GPUs yet" in caplog.text
        fake.stuck.clear()
        fake.gate.set()
        await armed(fake, 8)
        h100_sim.inject_xid(4, xid=63)
        assert (await sub.first()).xid == 63
    assert "event wait failed" not in caplog.text
    assert fake.stale == ["nvmlEventSetWait"]
    await sub.close()


class _ResetRequired(FakeNvml):
    """A GPU a failed reset left behind: nvmlDeviceGetMemoryInfo answers NVML_ERROR_RESET_REQUIRED
    (nvml.h: "The GPU requires a reset before it can be used again") for the UUID in ``broken``."""

    broken: str | None = None

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        if self.broken is not None and getattr(handle, "uuid", None) == self.broken:
            self._enter("nvmlDeviceGetMemoryInfo")
            raise self._err(pynvml.NVML_ERROR_RESET_REQUIRED)
        return super().nvmlDeviceGetMemoryInfo(handle)


async def test_one_gpu_answering_an_error_after_reacquire_is_reported_lost_and_ends_no_stream(
    h100_sim: SimBackend, caplog: pytest.LogCaptureFixture
) -> None:
    """After a reset one GPU may answer an error that is not GPU_IS_LOST. Arming must not fail the
    whole stream for it (consumers would then fail all 8 GPUs): the GPU is reported lost by the
    probe, as a lost GPU would be, the other GPUs' events flow, and it is logged. (Review repro
    /tmp/review-18/test_rearm.py.)"""
    fake = _ResetRequired(h100_sim)
    nvml = backend(fake)
    uuid = {i: h100_sim.inventory().gpu(i).uuid for i in (3, 5)}
    sub = Collector(nvml)
    await armed(fake, 8)
    await asyncio.to_thread(nvml.release)
    fake.broken = uuid[3]
    with caplog.at_level(logging.WARNING, logger="gpuchain.gpu.nvml"):
        await asyncio.to_thread(nvml.reacquire)
    assert f"GPU 3 ({uuid[3]}) is watched only in part" in caplog.text and "GPU requires restart" in caplog.text
    await until(lambda: sub.events or sub.error, "the probe reports GPU 3")
    assert sub.error is None
    assert [(e.kind, e.gpu_uuid) for e in sub.events] == [(EventKind.GPU_LOST, uuid[3])]
    h100_sim.inject_xid(5, xid=94)
    await until(lambda: len(sub.events) == 2, "an XID of a sound GPU")
    assert (sub.events[1].kind, sub.events[1].xid, sub.events[1].gpu_uuid) == (EventKind.XID, 94, uuid[5])
    fake.broken = None
    await until(lambda: len(sub.events) == 3, "GPU 3 answers again")
    assert (sub.events[2].kind, sub.events[2].gpu_uuid, sub.error) == (EventKind.GPU_RECOVERED, uuid[3], None)
    await sub.close()


def test_release_is_thread_safe(h100_sim: SimBackend) -> None:
    fake = FakeNvml(h100_sim)
    nvml = backend(fake)
    errors: list[BaseException] = []

    def flip(op: str) -> None:
        try:
            for _ in range(20):
                getattr(nvml, op)()
        except BaseException as exc:  # any error fails the test
            errors.append(exc)

    threads = [threading.Thread(target=flip, args=(op,)) for op in ("release", "reacquire") * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert errors == []
    nvml.reacquire()
    assert fake.initialized == 1  # never more than one init held, never a shutdown too many
    assert fake.calls.count("nvmlShutdown") == fake.inits - 1


def test_a_released_error_is_a_gpu_error_consumers_can_tell_apart(h100_sim: SimBackend) -> None:
    nvml = backend(FakeNvml(h100_sim))
    nvml.release()
    with pytest.raises(GpuError) as caught:
        nvml.inventory()
    assert type(caught.value) is ReleasedError


# ---- the same contract on the simulator ----------------------------------------------------------


def _nvml_view(sim: SimBackend) -> tuple[Any, Any]:
    fake = FakeNvml(sim)
    return backend(fake), lambda: [len(r) for r in fake.registered()] == [len(sim.inventory().gpus)]


def _sim_view(sim: SimBackend) -> tuple[Any, Any]:
    return sim, lambda: bool(sim._subscriptions)


@pytest.mark.parametrize("view", [_nvml_view, _sim_view], ids=["nvml", "sim"])
async def test_both_backends_show_the_same_release(view: Any) -> None:
    """What an agent sees across a release, the same from NvmlBackend and from the simulator: reads
    refused, nothing delivered meanwhile (not even the XID of a GPU that fell off the bus), then the
    lost GPU reported and one that came back reported recovered, and events flowing again."""
    sim = SimBackend.from_preset("h100-80gb-x8")
    agent, listening = view(sim)
    uuid = {i: sim.inventory().gpu(i).uuid for i in range(8)}
    sub = Collector(agent)
    await until(listening, "the stream listens")
    sim.lose_gpu(2)
    await until(lambda: len(sub.events) == 2, "XID 79 and the lost GPU")
    await asyncio.to_thread(agent.release)
    assert agent.released
    with pytest.raises(ReleasedError):
        agent.telemetry(uuid[0])
    with pytest.raises(ReleasedError):
        agent.inventory()
    sim.inject_xid(3, xid=48)
    sim.lose_gpu(6)
    sim.recover_gpu(2)
    await asyncio.sleep(0.4)
    assert len(sub.events) == 2 and sub.error is None
    await asyncio.to_thread(agent.reacquire)
    await until(lambda: len(sub.events) >= 4, "what the agent finds after the reacquire")
    await asyncio.sleep(0.3)
    assert sorted((e.kind.value, e.gpu_uuid) for e in sub.events[2:]) == sorted(
        [(EventKind.GPU_RECOVERED.value, uuid[2]), (EventKind.GPU_LOST.value, uuid[6])]
    )
    assert agent.telemetry(uuid[0]).uuid == uuid[0]
    sim.inject_xid(4, xid=31)
    await until(lambda: len(sub.events) == 5, "an XID after the reacquire")
    assert (sub.events[-1].kind, sub.events[-1].xid, sub.error) == (EventKind.XID, 31, None)
    await sub.close()


def test_the_simulator_refuses_mig_writes_and_burn_in_while_released(mig_sim: SimBackend) -> None:
    mig_sim.release()
    mig_sim.release()
    for call in (
        lambda: mig_sim.mig_mode(0),
        lambda: mig_sim.set_mig_mode(0, True),
        lambda: mig_sim.gpu_instances(0),
        lambda: mig_sim.create_gpu_instance(0, profile="1g.10gb", start=0),
        lambda: mig_sim.destroy_gpu_instance(0, 1),
        lambda: mig_sim.burn_in(1),
        lambda: mig_sim.health_readings(mig_sim.snapshot_gpu(1).uuid),
    ):
        with pytest.raises(ReleasedError):
            call()
    mig_sim.reacquire()
    mig_sim.reacquire()
    assert not mig_sim.released and mig_sim.gpu_instances(0)


async def test_a_simulated_reset_while_released_is_heard_at_reacquire(h100_sim: SimBackend) -> None:
    """The simulator's agents share one sim, so its reset is heard by every stream (as NvmlBackend's
    own streams hear its reset): while they are paused, at the reacquire, once."""
    sub = Collector(h100_sim)
    await until(lambda: bool(h100_sim._subscriptions), "the stream listens")
    h100_sim.release()
    h100_sim.reset_gpu(2)
    h100_sim.reset_gpu(2)
    await asyncio.sleep(0.1)
    assert sub.events == []
    h100_sim.reacquire()
    await until(lambda: bool(sub.events), "the reset is heard")
    await asyncio.sleep(0.1)
    assert [(e.kind, e.gpu_uuid, e.message) for e in sub.events] == [
        (EventKind.GPU_RECOVERED, h100_sim.inventory().gpu(2).uuid, "GPU reset")
    ]
    await sub.close()
