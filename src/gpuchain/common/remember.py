"""Answers about a snapshot's objects worked out once while one reader (a diagnosis) reads it.

A diagnosis asks the same questions of the same objects from many checks: a pod's state from several
links, a node's GPU capacity and its ``status.nodeInfo`` some eight to ten times a node (at 10,000 nodes,
hundreds of thousands of calls, a fifth of the diagnosis; bench.doctor.live). The objects of a snapshot
do not change while it is read, so inside `answers_remembered` a function marked `remembered` answers
each object once. Outside such a block it works its answer out every time, as before: a caller that
changes objects between calls (the operator, the MIG manager) gets fresh answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import wraps
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Each remembered function's answers while `answers_remembered` is on: by the object's id, beside a list
#: that keeps each object asked about alive, so that its id names no other object meanwhile. One table a
#: function, so that a lookup hashes an int, not a (function, id) pair: there are hundreds of thousands of
#: them; the answer itself, not an (object, answer) pair, so that a lookup builds and reads no tuple.
_TABLES: list[ContextVar[tuple[dict[int, object], list[object]] | None]] = []
#: What no answer is (an answer may be None).
_NONE = object()


@contextmanager
def answers_remembered() -> Iterator[None]:
    """Every `remembered` function answers each object once in the block (blocks nest: the outer one's
    answers hold in the inner one)."""
    if _TABLES and _TABLES[0].get() is not None:
        yield
        return
    tokens = [(table, table.set(({}, []))) for table in _TABLES]
    try:
        yield
    finally:
        for table, token in tokens:
            table.reset(token)


def remembered(fn: Callable[[T], R]) -> Callable[[T], R]:
    """``fn(obj)`` answered once per object inside `answers_remembered`; its answer must not be changed
    by the caller (return an immutable value, or copy it in a public wrapper)."""
    table: ContextVar[tuple[dict[int, object], list[object]] | None] = ContextVar(
        f"answers of {fn.__qualname__}", default=None
    )
    _TABLES.append(table)

    @wraps(fn)
    def answer(obj: T) -> R:
        remembering = table.get()
        if remembering is None:
            return fn(obj)
        answers = remembering[0]
        hit = answers.get(id(obj), _NONE)
        if hit is not _NONE:
            return hit  # type: ignore[return-value]
        value = fn(obj)
        answers[id(obj)] = value
        remembering[1].append(obj)  # alive until the block ends: its id is no other object's meanwhile
        return value

    return answer
