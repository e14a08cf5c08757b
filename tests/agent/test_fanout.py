"""One upstream, many readers on any event loop: what each reader sees is what its own subscription would."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

from gpuchain.agent.fanout import Fanout


class Upstream:
    """An upstream the test feeds: items, a failure, or the end; counts how often it was opened."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[object] = asyncio.Queue()
        self.opened = 0

    async def stream(self) -> AsyncIterator[int]:
        self.opened += 1
        while True:
            item = await self.queue.get()
            if isinstance(item, Exception):
                raise item
            if item is None:
                return
            assert isinstance(item, int)
            yield item


async def test_every_reader_sees_every_item_and_the_failure_from_one_upstream() -> None:
    up = Upstream()
    # The retry after the failure waits longer than the test runs: it checks the one upstream both
    # readers shared, and a loaded machine let a 10 ms retry open a second one before the count.
    fan: Fanout[int] = Fanout(
        "test stream", open=up.stream, loop=asyncio.get_running_loop(), first_delay=30, max_delay=30
    )
    here: list[object] = []
    there: list[object] = []
    subscribed = threading.Event()

    async def read(into: list[object], ready: threading.Event | None = None) -> None:
        stream = fan.subscribe()
        first = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.05)
        if ready is not None:
            ready.set()
        try:
            into.append(await first)
            async for item in stream:
                into.append(item)
        except RuntimeError as exc:
            into.append(str(exc))

    reader = asyncio.create_task(read(here))
    other = threading.Thread(target=lambda: asyncio.run(read(there, subscribed)))  # a reader on a loop of its own
    other.start()
    await asyncio.to_thread(subscribed.wait, 5)
    await asyncio.sleep(0.05)
    for item in (1, 2, RuntimeError("upstream broke")):
        up.queue.put_nowait(item)
    await asyncio.wait_for(reader, 5)
    await asyncio.to_thread(other.join, 5)
    assert here == there == [1, 2, "upstream broke"]
    assert up.opened == 1
    await fan.close()


async def test_an_upstream_that_ends_ends_each_reader_and_is_opened_again_for_the_next() -> None:
    up = Upstream()
    fan: Fanout[int] = Fanout(
        "test stream", open=up.stream, loop=asyncio.get_running_loop(), first_delay=0.01, max_delay=0.02
    )

    async def read_all() -> list[int]:
        return [item async for item in fan.subscribe()]

    first = asyncio.create_task(read_all())
    await asyncio.sleep(0.05)
    up.queue.put_nowait(7)
    up.queue.put_nowait(None)
    assert await asyncio.wait_for(first, 5) == [7]
    second = asyncio.create_task(read_all())
    await asyncio.sleep(0.1)
    up.queue.put_nowait(8)
    up.queue.put_nowait(None)
    assert await asyncio.wait_for(second, 5) == [8]
    assert up.opened == 2
    await fan.close()


async def test_a_new_reader_first_sees_the_replayed_last_item() -> None:
    """As a fresh watch opens with the object's state: a reader that comes late is not left without it."""
    up = Upstream()
    fan: Fanout[int] = Fanout(
        "test stream", open=up.stream, loop=asyncio.get_running_loop(), replay=lambda item: item * 10
    )
    stream = aiter(fan.subscribe())
    pending = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.05)
    up.queue.put_nowait(5)
    assert await asyncio.wait_for(pending, 5) == 5
    late = aiter(fan.subscribe())
    assert await asyncio.wait_for(anext(late), 5) == 50
    up.queue.put_nowait(6)
    assert await asyncio.wait_for(anext(late), 5) == 6
    assert await asyncio.wait_for(anext(stream), 5) == 6
    await fan.close()


async def test_a_cancelled_close_stays_cancelled() -> None:
    """The closer's own cancel (an agent's stop cut short) is not taken for the pump's end."""
    up = Upstream()
    fan: Fanout[int] = Fanout("test stream", open=up.stream, loop=asyncio.get_running_loop())
    stream = aiter(fan.subscribe())
    pending = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.05)
    up.queue.put_nowait(1)
    assert await asyncio.wait_for(pending, 5) == 1
    closing = asyncio.create_task(fan.close())
    await asyncio.sleep(0)  # the closer now waits for the pump's end
    closing.cancel()
    await asyncio.wait([closing], timeout=5)
    assert closing.cancelled()
    await stream.aclose()
