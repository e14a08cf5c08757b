"""Supervision: a long-lived task that fails is logged at once and restarted, or stops the process."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gpuchain.common.supervise import EXIT_CODE, Backoff, Critical, supervise, wait_event


async def test_a_failing_task_is_logged_at_once_and_restarted_with_a_doubling_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs = 0
    waits: list[float] = []

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs < 4:
            raise RuntimeError(f"boom {runs}")
        await asyncio.Event().wait()

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    with caplog.at_level(logging.ERROR):
        task = asyncio.create_task(
            supervise("watcher", run=flaky, first_delay=0.5, max_delay=4, sleep=sleep, rng=lambda: 1.0)
        )
        while runs < 4:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert waits == [0.5, 1.0, 2.0]
    failures = [r for r in caplog.records if "watcher failed" in r.getMessage()]
    assert len(failures) == 3 and failures[0].exc_info is not None and "boom 1" in str(failures[0].exc_info[1])


async def test_a_task_that_returns_is_restarted_too(caplog: pytest.LogCaptureFixture) -> None:
    runs = 0

    async def quits() -> None:
        nonlocal runs
        runs += 1

    async def sleep(seconds: float) -> None:
        await asyncio.sleep(0)

    task = asyncio.create_task(supervise("loop", run=quits, sleep=sleep))
    while runs < 3:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert any("loop ended although it should run" in r.getMessage() for r in caplog.records)


async def test_critical_task_failure_sets_stop_and_a_non_zero_exit_code() -> None:
    stop = asyncio.Event()
    critical = Critical(stop)

    async def dies() -> None:
        raise OSError("socket gone")

    critical.add(asyncio.create_task(dies(), name="dra: health"))
    await asyncio.wait_for(stop.wait(), 1)
    assert critical.failed == "dra: health" and critical.exit_code == EXIT_CODE


async def test_a_cancelled_critical_task_is_not_a_failure() -> None:
    stop = asyncio.Event()
    critical = Critical(stop)
    task = critical.add(asyncio.create_task(asyncio.sleep(10)))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not stop.is_set() and critical.exit_code == 0


async def test_wait_event_is_cancelled_even_when_the_event_is_set_in_the_same_step() -> None:
    """A loop asked to stop by cancellation at the moment it is poked must stop: on Python 3.11
    ``asyncio.wait_for`` returns the event's result here instead (CPython gh-86296)."""
    poked = asyncio.Event()
    task = asyncio.create_task(wait_event(poked, 10.0))
    for _ in range(2):
        await asyncio.sleep(0)
    poked.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_wait_event_says_whether_the_event_was_set() -> None:
    stop = asyncio.Event()
    assert await wait_event(stop, 0.01) is False
    stop.set()
    assert await wait_event(stop, None) is True


def test_a_backoff_doubles_to_its_cap_with_jitter_in_the_upper_half_and_starts_over_on_reset() -> None:
    draws = iter([0.0, 1.0, 0.5, 0.0, 1.0, 0.0])
    backoff = Backoff(1.0, cap=4.0, rng=lambda: next(draws))
    assert [backoff.next() for _ in range(5)] == [0.5, 2.0, 3.0, 2.0, 4.0]
    assert backoff.failures == 5
    backoff.reset()
    assert (backoff.next(), backoff.failures) == (0.5, 1)
    with pytest.raises(ValueError, match="first"):
        Backoff(0.0, cap=1.0)


async def test_supervised_restarts_are_jittered_and_a_long_healthy_run_starts_the_backoff_over() -> None:
    now = [0.0]
    ran_for = iter([0.0, 0.0, 10.0, 0.0])  # the third run lasts longer than max_delay
    waits: list[float] = []

    async def fails() -> None:
        now[0] += next(ran_for)
        raise RuntimeError("boom")

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 4:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await supervise(
            "loop", run=fails, first_delay=1, max_delay=4, sleep=sleep, clock=lambda: now[0], rng=lambda: 0.0
        )
    assert waits == [0.5, 1.0, 0.5, 1.0]
