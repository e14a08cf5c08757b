"""Python's cyclic garbage collector paused for a block that builds a large acyclic tree.

CPython's collector runs whenever allocations outnumber deallocations by its thresholds, and each
full collection walks every container object still alive. Reading a 10,000-node cluster builds
some ten million dicts and lists that all stay alive until the diagnosis is done, so the collector
walked them again and again, finding nothing: JSON holds no reference cycles, nor do the doctor's
findings over it. At 2,000 nodes that was half of a live doctor's time (bench.doctor.live).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off for the block, back on after it if it was on (so blocks nest).

    What the block built and still holds then goes straight to the collector's oldest generation,
    where it would land anyway after surviving two collections, without those two walks over it
    (``gc.freeze`` then ``gc.unfreeze``; when the process keeps objects frozen itself, they stay
    frozen, and so do these). Reference counting frees everything that goes out of use meanwhile;
    only cyclic garbage waits for the next full collection.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            frozen_before = gc.get_freeze_count()
            gc.freeze()
            if not frozen_before:
                gc.unfreeze()
            gc.enable()
