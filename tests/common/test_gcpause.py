"""`collector_paused`: the collector off inside, on after, and what the block built not walked on the way out."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gpuchain.common.gcpause import collector_paused


@pytest.fixture
def collector_on() -> Iterator[None]:
    """The collector on and nothing frozen, as in a fresh process. An agent command run in this
    test process before (commands/_agent.py freezes what it built at start, for the process's
    lifetime) leaves objects frozen; unfreezing them only lets the collector walk them again."""
    was_on = gc.isenabled()
    gc.unfreeze()
    gc.enable()
    yield
    if not was_on:
        gc.disable()


def test_off_inside_on_after_and_nested_blocks_leave_it_to_the_outer(collector_on: None) -> None:
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block found it off and leaves it off
    assert gc.isenabled()


def test_an_error_in_the_block_still_turns_it_back_on(collector_on: None) -> None:
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_what_the_block_built_goes_to_the_oldest_generation_unwalked(collector_on: None) -> None:
    """Without the move, the first allocation after the block would walk every one of these
    (gen0 holds them all); with it, gen0 and gen1 are empty and the objects are still tracked."""
    with collector_paused():
        tree = [{"a": [i], "b": {"c": [i]}} for i in range(100_000)]
        assert gc.get_count()[0] > 100_000
    assert gc.get_count()[0] < 1000 and gc.get_count()[1] == 0
    assert gc.is_tracked(tree[0]) and gc.get_freeze_count() == 0


def test_a_process_that_froze_objects_keeps_them_frozen(collector_on: None) -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector_paused():
            tree = [[i] for i in range(1000)]
        assert gc.get_freeze_count() >= frozen + len(tree)
    finally:
        gc.unfreeze()
