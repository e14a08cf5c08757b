"""Numbers from flags and files that mean time: finite and above zero, or refused by name."""

from __future__ import annotations

import math


def positive_seconds(name: str, value: float) -> float:
    """``value`` when it is a finite number above zero; ValueError naming ``name`` otherwise.

    ``nan`` compares false with everything, so ``value <= 0`` alone lets it through (a ``nan``
    collection interval made the exporter's sampler spin a core), and ``inf`` waits forever.
    """
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: must be a finite number of seconds above zero, got {value!r}")
    return value
