"""The discovery loop: read the GPUs, compute the labels, hand them to every output, sleep, repeat.

This is the shell around ``labels.gfd_labels``. In a loop, a failed pass (the backend not
answering, the API server down) is logged and retried after the sleep interval with the outputs
left as they were: stale-but-present labels are better than labels removed by a transient error.
With ``oneshot`` the error is raised to the caller.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuchain.deviceplugin.config import INFINITE_NS, Config, format_go_duration
from gpuchain.discovery.labels import UNKNOWN_MACHINE, Labels, gfd_labels
from gpuchain.gpu.backend import GpuBackend

log = logging.getLogger(__name__)

Sink = Callable[[Labels], object]
"""An output: receives the full label set of one pass."""

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_interval(value: str | int | float) -> float:
    """Seconds from a number or a Go-style duration (``60s``, ``1m30s``, ``500ms``), as GFD takes it.

    Raises ValueError naming the value when it is not a positive duration.
    """
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip()
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            seconds = float(text)
        elif text and _DURATION.sub("", text) == "":
            seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION.findall(text))
        else:
            raise ValueError(f"sleep interval {value!r} is not a duration; use e.g. 60s, 1m30s or 500ms")
    if seconds <= 0:
        raise ValueError(f"sleep interval {value!r} must be positive")
    return seconds


def sleep_seconds(interval_ns: int, oneshot: bool) -> float | None:
    """Seconds between passes for a ``sleepInterval`` in nanoseconds; None for no further pass
    (``infinite``, or ``oneshot`` where the interval does not matter, 0 included).

    Raises ValueError for a zero or negative interval without oneshot: NVIDIA's GFD would relabel
    in a loop with no pause, which gpuchain refuses.
    """
    if oneshot or interval_ns == INFINITE_NS:
        return None
    if interval_ns <= 0:
        shown = format_go_duration(interval_ns)
        raise ValueError(
            f"sleepInterval {shown} would relabel without pause; give a positive duration (60s), infinite, or oneshot"
        )
    return interval_ns / 1e9


def read_machine_type(path: str | Path) -> str:
    """The machine's product name (``/sys/class/dmi/id/product_name``); ``unknown`` if unreadable."""
    try:
        return Path(path).read_text(encoding="utf-8").strip() or UNKNOWN_MACHINE
    except OSError as exc:
        log.warning("cannot read machine type from %s: %s", path, exc)
        return UNKNOWN_MACHINE


@dataclass
class Discovery:
    """One node's feature discovery: its backend, the shared config, and what to write to."""

    backend: GpuBackend
    config: Config
    sinks: Sequence[Sink] = ()
    machine: str = UNKNOWN_MACHINE
    timestamps: bool = True
    clock: Callable[[], float] = time.time
    stop: threading.Event = field(default_factory=threading.Event)

    def labels(self) -> Labels:
        """One pass of discovery, without writing anything."""
        stamp = int(self.clock()) if self.timestamps else None
        return gfd_labels(self.backend.inventory(), self.config, stamp, self.machine)

    def run_once(self) -> Labels:
        """Discover and write to every sink; raises what the backend or a sink raises."""
        labels = self.labels()
        for sink in self.sinks:
            sink(labels)
        return labels

    def run(self, interval: float | None) -> None:
        """Run passes every ``interval`` seconds until ``stop`` is set; failures are logged and retried.

        ``interval`` None (``sleepInterval: infinite``): one pass, then wait for ``stop``; a failed
        pass is still retried, every 60 seconds, until one succeeds.
        """
        while not self.stop.is_set():
            try:
                labels = self.run_once()
                log.info("wrote %d labels", len(labels))
            except Exception as exc:
                log.error("discovery pass failed, outputs left unchanged: %s", exc)
                self.stop.wait(interval if interval is not None else 60.0)
                continue
            if interval is None:
                log.info("sleep interval is infinite: labelled once, waiting until stopped")
                self.stop.wait()
                return
            self.stop.wait(interval)
