"""The agents' start-up helper: stop signals before start-up work, start-up objects frozen after."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
from collections.abc import Iterator

import pytest

from gpuchain.agent.runtime import STOP_SIGNALS, settled, stop_on_signals


@pytest.fixture
def restored_handlers() -> Iterator[None]:
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", STOP_SIGNALS)
def test_without_a_loop_a_signal_sets_the_stop_from_a_thread(sig: signal.Signals, restored_handlers: None) -> None:
    stop = threading.Event()
    stop_on_signals(stop.set)
    os.kill(os.getpid(), sig)
    assert stop.wait(5)


@pytest.mark.parametrize("sig", STOP_SIGNALS)
async def test_in_a_loop_a_signal_sets_the_stop_on_the_loop(sig: signal.Signals, restored_handlers: None) -> None:
    stop = asyncio.Event()
    stop_on_signals(stop.set)
    try:
        os.kill(os.getpid(), sig)
        await asyncio.wait_for(stop.wait(), 5)
    finally:
        for s in STOP_SIGNALS:
            asyncio.get_running_loop().remove_signal_handler(s)


def test_settled_freezes_what_start_up_left() -> None:
    try:
        settled()
        assert gc.get_freeze_count() > 1000  # at least the imported modules' objects
    finally:
        gc.unfreeze()


def test_off_the_main_thread_the_signals_are_left_to_the_main_thread() -> None:
    """Python refuses signal handlers from other threads; an agent started on one (embedded, or a
    test bounding it with a thread) must still start, leaving the handlers as they were."""
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    errors: list[BaseException] = []

    def start() -> None:
        try:
            stop_on_signals(lambda: None)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join(5)
    assert errors == []
    assert {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} == before
