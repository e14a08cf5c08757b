"""A clock the test moves, so recovery quiet periods pass without sleeping (imported as ``dra.fakeclock``)."""

from __future__ import annotations

QUIET = 5.0
"""The test drivers' recovery quiet period, in seconds of the test clock."""


class Clock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
