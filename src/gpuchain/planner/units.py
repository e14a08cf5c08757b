"""Reading the sizes and rates people type: `3GiB`, `3GB`, `512MiB`, `5%`.

Units are explicit because the gap matters here: a "3GB" model is 2861 MiB, a "3GiB" one 3072 MiB,
and on a 4864 MiB MIG slice that is the difference between 2.0 and 1.75 GiB of headroom. A bare
number is refused rather than guessed.
"""

from __future__ import annotations

import re

from gpuchain.planner.errors import PlanInputError

MIB = 1024 * 1024
"""Bytes in a MiB: the unit NVML and the MIG catalog report memory in."""

_UNITS: dict[str, int] = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}

_SIZE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>[a-zA-Z]*)\s*$")
_RATE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?|\.\d+)\s*(?P<pct>%?)\s*$")


def parse_memory(text: str, field: str = "model memory") -> int:
    """Bytes in a size like ``3GiB``, ``3 GB`` or ``512MiB`` (unit case-insensitive).

    Raises PlanInputError naming ``field`` when the unit is missing or unknown, or the size is not
    positive, so the user sees what to type instead.
    """
    m = _SIZE.match(text)
    if m is None:
        raise PlanInputError(f"{field}: {text!r} is not a size; write a number and a unit, e.g. 3GiB, 3GB or 512MiB")
    unit = m.group("unit").lower()
    if not unit:
        raise PlanInputError(f"{field}: {text!r} has no unit; write e.g. {m.group('num')}GiB or {m.group('num')}GB")
    if unit not in _UNITS:
        known = ", ".join(u.upper().replace("I", "i") for u in _UNITS)
        raise PlanInputError(f"{field}: unknown unit {m.group('unit')!r} in {text!r}; use one of {known}")
    size = round(float(m.group("num")) * _UNITS[unit])
    if size <= 0:
        raise PlanInputError(f"{field}: {text!r} must be larger than zero")
    return size


def parse_rate(text: str, field: str = "failure rate") -> float:
    """A fraction in [0, 1] from ``5%`` or ``0.05``.

    A bare number above 1 (``5``) is refused: it could mean 5% or 500%, and the two answers differ
    by a factor of a hundred.
    """
    m = _RATE.match(text)
    if m is None:
        raise PlanInputError(f"{field}: {text!r} is not a rate; write a percentage like 5% or a fraction like 0.05")
    value = float(m.group("num"))
    if m.group("pct"):
        value /= 100
    elif value > 1:
        raise PlanInputError(f"{field}: {text!r} is ambiguous; write {m.group('num')}% or a fraction like 0.05")
    if value > 1:
        raise PlanInputError(f"{field}: {text!r} is above 100%")
    return value


def format_mib(mib: float) -> str:
    """A memory amount for people: GiB with up to two decimals from 1 GiB up, MiB below."""
    if abs(mib) >= 1024:
        return f"{mib / 1024:.2f}".rstrip("0").rstrip(".") + " GiB"
    return f"{mib:.0f} MiB"
