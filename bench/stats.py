"""The one percentile the benches print, so every p50/p99 in docs/performance.md is computed the same way."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: int, *, scale: float = 1.0) -> float:
    """The q-th percentile (1..99) of ``values`` times ``scale``; inclusive, so a p99 of few samples stays
    inside the measured range instead of extrapolating past the slowest call."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * scale
