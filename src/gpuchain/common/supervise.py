"""Supervision of long-lived tasks: nothing a node agent runs forever may die silently.

A loop that watches the kubelet, follows a Node, samples GPUs or serves HTTP is the agent: when it
dies the pod still looks Running while the node quietly stops being served. So every such loop
runs under one of two rules:

- ``supervise`` / ``spawn`` (asyncio): an exception is logged at once, with its traceback, and
  the loop starts again after a jittered backoff (``Backoff``) that doubles from ``first_delay`` to
  ``max_delay`` (a run that lasted longer than ``max_delay`` starts the backoff over), so a
  persistent fault is neither hammered nor given up on, and agents that failed together (the API
  server went away) do not retry in lockstep. Loops on threads (the exporter's sampler) catch and log per
  cycle themselves; the health event stream has its own resubscribing loop, ``follow_events``;
- ``Critical``: for tasks whose state cannot be rebuilt in place, a crash is logged at once, the
  command cleans up and exits non-zero, so the kubelet restarts the container.

A loop that returns although it should run forever is treated as a failure too.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

log = logging.getLogger(__name__)

FIRST_DELAY = 0.5
MAX_DELAY = 30.0
EXIT_CODE = 1
"""The status a process exits with when a task it cannot restart in place has failed."""
T = TypeVar("T")


class Backoff:
    """The waits of one retry loop: ``first``, doubling up to ``cap``, each drawn at random from the
    upper half of its step, until ``reset()`` (a success) starts it over.

    The doubling spares a peer that stays down (an API server answering 503 or 410 for minutes);
    the cap bounds how long the loop takes to notice the peer is back; the jitter keeps the agents
    of a whole fleet, which all lost the API server at the same moment, from retrying in lockstep.
    """

    def __init__(self, first: float, *, cap: float, rng: Callable[[], float] = random.random) -> None:
        if not 0 < first <= cap:
            raise ValueError(f"backoff: need 0 < first ({first}) <= cap ({cap})")
        self.first = first
        self.cap = cap
        self._rng = rng
        self._step = first
        self.failures = 0
        """Waits handed out since the last reset: how many times in a row the loop failed."""

    def next(self) -> float:
        """The wait before the next try (between half of this step and the whole of it)."""
        wait = self._step * (0.5 + 0.5 * self._rng())
        self._step = min(self._step * 2, self.cap)
        self.failures += 1
        return wait

    def reset(self) -> None:
        """The loop succeeded: the next failure waits ``first`` again."""
        self._step = self.first
        self.failures = 0


async def supervise(
    name: str,
    *,
    run: Callable[[], Awaitable[None]],
    first_delay: float = FIRST_DELAY,
    max_delay: float = MAX_DELAY,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: Callable[[], float] = random.random,
) -> NoReturn:
    """Run ``run()`` forever: log any exception (or an unexpected return) at once and start it again
    after a bounded, doubling, jittered backoff. Only cancellation ends it."""
    backoff = Backoff(first_delay, cap=max_delay, rng=rng)
    while True:
        started = clock()
        try:
            await run()
        except asyncio.CancelledError:
            raise
        except Exception:
            wait = _next_wait(backoff, clock() - started)
            log.exception("%s failed; restarting it in %.1f s", name, wait)
        else:
            wait = _next_wait(backoff, clock() - started)
            log.error("%s ended although it should run until stopped; restarting it in %.1f s", name, wait)
        await sleep(wait)


def _next_wait(backoff: Backoff, ran_for: float) -> float:
    """The wait before this restart: a run longer than the backoff's cap was healthy, start over."""
    if ran_for > backoff.cap:
        backoff.reset()
    return backoff.next()


def spawn(
    name: str, *, run: Callable[[], Awaitable[None]], first_delay: float = FIRST_DELAY, max_delay: float = MAX_DELAY
) -> asyncio.Task[None]:
    """``supervise(name, run)`` as a task named ``name`` on the running loop."""
    return asyncio.create_task(supervise(name, run=run, first_delay=first_delay, max_delay=max_delay), name=name)


class Critical:
    """Tasks a command cannot restart in place: the first to end other than by cancellation is
    logged at once and sets ``stop``, so the command cleans up (sockets, taints) and then exits
    with ``exit_code`` (non-zero), and the kubelet restarts the container."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.failed: str | None = None
        """The name of the task that failed, or None."""

    def add(self, task: asyncio.Task[T]) -> asyncio.Task[T]:
        """Watch ``task``; returns it."""
        task.add_done_callback(self._done)
        return task

    @property
    def exit_code(self) -> int:
        return EXIT_CODE if self.failed else 0

    def _done(self, task: asyncio.Task[T]) -> None:
        if task.cancelled() or self.failed:
            return
        exc = task.exception()
        if exc is not None:
            log.critical("%s failed; stopping so the kubelet restarts this container", task.get_name(), exc_info=exc)
        else:
            log.critical("%s ended although it should run until stopped; stopping", task.get_name())
        self.failed = task.get_name()
        self.stop.set()


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass (None: no limit); whether it is set.

    Every loop that sleeps between passes but wakes on a stop or a poke waits here. Not
    ``asyncio.wait_for``: on Python 3.11 it can swallow a cancellation that arrives as the event is
    set (CPython gh-86296), and a loop that runs "until cancelled" then never stops.
    """
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass
    return event.is_set()


def reraise_cancel() -> None:
    """Raise CancelledError when this task was asked to stop but an await swallowed the request.

    Call it where a gRPC error is caught. grpc.aio's unary call catches the CancelledError of a
    cancel that arrives as its answer does and reports the call's status instead (``_invoke`` in
    ``grpc/aio/_call.py``), so the caller sees an ``AioRpcError`` (even one with status OK) where
    it should have stopped. A loop that logs RPC errors and tries again then runs on after
    ``cancel()``, and whatever awaits it (a plugin's ``stop``) waits forever. The request is still
    counted by ``Task.cancelling()``, which is what this reads.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def cancel_and_wait(*tasks: asyncio.Task[Any]) -> None:
    """Cancel ``tasks`` and wait until every one has ended; raise the first error one ended with.

    Not ``with suppress(CancelledError): await task``: that swallows a cancel of the caller as
    well (a stop being timed out by its own caller), which then goes on waiting as if nothing had
    asked it to stop. ``asyncio.wait`` lets the caller's cancel through and leaves the tasks' own
    ends to be read here.
    """
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    await asyncio.wait(tasks)
    for task in tasks:
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error
