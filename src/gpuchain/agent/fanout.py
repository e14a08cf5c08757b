"""One upstream stream, many readers: how the roles of one node agent share a subscription.

The node agent's roles each follow the GPUs' health events and their Node, as the separate agents
do, but one process needs only one of each: one NVML event set (with its watcher thread and its
probes), one watch on the Node. ``Fanout`` opens the upstream once, on the agent's own event loop,
and hands every item to each reader, whatever event loop the reader runs on (the exporter and
feature discovery read on threads of their own).

What a reader sees is what a subscription of its own would show:
- every item from the moment it subscribed (``replay`` may give it the latest state first, as a
  fresh watch's opening ADDED event does);
- an upstream failure raises the same exception in every reader, and an upstream that ends ends
  every reader's stream; the reader then subscribes again (``gpu.health.follow_events``,
  ``kube.follow``), counting its devices unhealthy or resyncing exactly as after a failure or an
  end of a subscription of its own;
- the upstream is opened again after a failure with a jittered backoff (``common.supervise``),
  while readers are subscribed; with none, it is closed, so an unused fan-out holds nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from gpuchain.common.supervise import Backoff, reraise_cancel

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_DELAY = 0.5
MAX_DELAY = 30.0


_END = object()
"""Handed to the readers when the upstream ended: each reader's stream ends too."""


@dataclass(eq=False)
class _Reader(Generic[T]):
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[tuple[object, BaseException | None]] = field(default_factory=asyncio.Queue)

    def put(self, item: object, error: BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):  # the reader's loop has closed: nobody listens
            self.loop.call_soon_threadsafe(self.queue.put_nowait, (item, error))


class Fanout(Generic[T]):
    """``subscribe()`` readers of one ``open()`` stream, pumped on ``loop`` (see the module docstring).

    ``replay`` gives a new reader what it should see first (the last Node seen), or None."""

    def __init__(
        self,
        name: str,
        *,
        open: Callable[[], AsyncIterator[T]],
        loop: asyncio.AbstractEventLoop,
        replay: Callable[[T], T | None] | None = None,
        first_delay: float = FIRST_DELAY,
        max_delay: float = MAX_DELAY,
    ) -> None:
        self.name = name
        self._open = open
        self._loop = loop
        self._replay = replay
        self._backoff = Backoff(first_delay, cap=max_delay)
        self._lock = threading.Lock()
        self._readers: list[_Reader[T]] = []
        self._pump: concurrent.futures.Future[None] | None = None
        self._last: T | None = None
        self.opened = 0
        """How many times the upstream was opened: one per failure, however many readers."""

    @property
    def readers(self) -> int:
        with self._lock:
            return len(self._readers)

    async def subscribe(self) -> AsyncIterator[T]:
        """Every upstream item from now on; raises what the upstream raised (then subscribe again)."""
        reader: _Reader[T] = _Reader(asyncio.get_running_loop())
        with self._lock:
            self._readers.append(reader)
            last = self._last
            if self._pump is None:
                self._pump = asyncio.run_coroutine_threadsafe(self._run(), self._loop)
        if last is not None and self._replay is not None and (first := self._replay(last)) is not None:
            yield first
        try:
            while True:
                item, error = await reader.queue.get()
                if error is not None:
                    raise error
                if item is _END:
                    return
                yield item  # type: ignore[misc]
        finally:
            with self._lock:
                self._readers.remove(reader)

    def _deliver(self, item: object, error: BaseException | None) -> None:
        with self._lock:
            readers = list(self._readers)
            if error is None and item is not _END:
                self._last = item  # type: ignore[assignment]
        for reader in readers:
            reader.put(item, error)

    def _idle(self) -> bool:
        """Nobody reads: the pump ends (under the lock, so a reader arriving now starts a new one)."""
        with self._lock:
            if self._readers:
                return False
            self._pump = None
            return True

    async def _run(self) -> None:
        """The pump: open the upstream while anyone reads, hand each item out, reopen after a failure."""
        try:
            while not self._idle():
                self.opened += 1
                stream = self._open()
                try:
                    async for item in stream:
                        self._backoff.reset()
                        self._deliver(item, None)
                        if not self.readers:
                            break
                    else:
                        log.info("%s ended; every role following it subscribes again", self.name)
                        self._deliver(_END, None)
                except Exception as exc:
                    log.warning("%s failed (%s); every role following it subscribes again", self.name, exc)
                    self._deliver(None, exc)
                finally:
                    closing = getattr(stream, "aclose", None)
                    if closing is not None:
                        with contextlib.suppress(Exception):
                            await closing()
                if self.readers:
                    await asyncio.sleep(self._backoff.next())
        except asyncio.CancelledError:
            with self._lock:
                self._pump = None
            raise

    async def close(self) -> None:
        """Stop the pump (on ``loop``); readers still subscribed see the stream end.

        The pump's own end (cancelled, or an error its upstream's close raised) is no concern of
        the closer, but a cancel of the closer itself (an agent's stop cut short) goes on: not
        ``suppress(CancelledError)``, which swallowed it and let the stop run on as if unasked.
        """
        with self._lock:
            pump = self._pump
        if pump is not None:
            pump.cancel()
            try:
                await asyncio.wrap_future(pump)
            except (asyncio.CancelledError, concurrent.futures.CancelledError):
                reraise_cancel()
            except Exception:  # the pump already logged what its upstream raised
                pass
        self._deliver(_END, None)
