"""Go durations, as NVIDIA's components read and write ``flags.gfd.sleepInterval``."""

from __future__ import annotations

import re
from typing import Any

INFINITE_NS = 2**63 - 1
"""``sleepInterval: infinite``: label once, then sleep until stopped (Go's largest Duration)."""

_GO_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
_GO_DURATION = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def parse_go_duration(text: str) -> int:
    """Nanoseconds in a Go duration string (``60s``, ``1m30s``, ``1.5h``, ``0``), or INFINITE_NS
    for ``infinite``, as NVIDIA's components parse ``sleepInterval``. Raises ValueError."""
    value = text.strip()
    if value == "infinite":
        return INFINITE_NS
    body = value.lstrip("+-")
    sign = -1 if value.startswith("-") else 1
    if body == "0":
        return 0
    total = 0.0
    pos = 0
    while pos < len(body):
        m = _GO_DURATION.match(body, pos)
        if m is None or m.group(1) in ("", "."):
            raise ValueError(f"{text!r} is not a duration; use e.g. 60s, 1m30s, 500ms or infinite")
        total += float(m.group(1)) * _GO_UNITS_NS[m.group(2)]
        pos = m.end()
    if not body:
        raise ValueError(f"{text!r} is not a duration; use e.g. 60s, 1m30s, 500ms or infinite")
    return sign * int(total)


def format_go_duration(ns: int) -> str:
    """The Go spelling of a duration, for messages: ``infinite``, ``1m0s``, ``1.5s``, ``500ms``, ``5ns``."""
    if ns == INFINITE_NS:
        return "infinite"
    if ns < 0:
        return "-" + format_go_duration(-ns)
    if ns == 0:
        return "0s"
    if ns < 10**9:
        for unit, size in (("ms", 10**6), ("\u00b5s", 10**3)):
            if ns >= size:
                return f"{ns / size:.6f}".rstrip("0").rstrip(".") + unit
        return f"{ns}ns"
    h, rest = divmod(ns, 3600 * 10**9)
    m, rest = divmod(rest, 60 * 10**9)
    sec = f"{rest / 10**9:.9f}".rstrip("0").rstrip(".")
    return (f"{h}h" if h else "") + (f"{m}m" if h or m else "") + f"{sec}s"


def duration_value(v: Any) -> Any:
    """A duration field's raw value in nanoseconds: a Go duration string, or a bare number of nanoseconds."""
    if isinstance(v, bool):
        raise ValueError("give a duration such as 60s, 1m30s or infinite")
    if isinstance(v, int | float):
        return int(v)
    if isinstance(v, str):
        return parse_go_duration(v)
    raise ValueError("give a duration such as 60s, 1m30s or infinite")
