"""The discovery loop: read the GPUs, compute the labels, hand them to every output, sleep, repeat.

This is the shell around ``labels.gfd_labels``. In a loop, a failed pass (the backend not
answering, the API server down) is logged and retried after the sleep interval with the outputs
left as they were: stale-but-present labels are better than labels removed by a transient error.
With ``oneshot`` the error is raised to the caller.

Per-node config: where NVIDIA's operator gives GFD the device plugin's ConfigMap and a
config-manager sidecar that follows the Node's ``nvidia.com/device-plugin.config`` label and
restarts GFD on a change, ``follow_config_label`` watches the label from a thread of this process
and relabels at once with the config the new value names; a label naming a missing key, or a bad
file, keeps the running config (logged).
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuchain.api.config.v1.config import Config
from gpuchain.api.config.v1.durations import INFINITE_NS, format_go_duration
from gpuchain.api.config.v1.selection import NODE_CONFIG_LABEL
from gpuchain.common.inputfile import read_input_text
from gpuchain.common.supervise import Backoff, cancel_and_wait
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.deviceplugin.nodeconfig import NodeLabelWatch
from gpuchain.discovery.labels import UNKNOWN_MACHINE, Labels, gfd_labels
from gpuchain.gpu.backend import GpuBackend, SeenInventory
from gpuchain.kube.follow import MAX_RETRY_SECONDS

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


MACHINE_TYPE_MAX_BYTES = 4096
"""A sysfs attribute is at most one page; a wrong --machine-type-file (a FIFO, a 100 MB log) must
not block the labeller or be read into memory."""


def read_machine_type(path: str | Path) -> str:
    """The machine's product name (``/sys/class/dmi/id/product_name``); ``unknown`` if unreadable.

    Read through the one input reader, so a FIFO, a device or a huge file is refused at once.
    """
    try:
        return read_input_text(path, MACHINE_TYPE_MAX_BYTES).strip() or UNKNOWN_MACHINE
    except ConfigFileError as exc:
        log.warning("machine type: %s; labelled %s", exc, UNKNOWN_MACHINE)
        return UNKNOWN_MACHINE


@dataclass(kw_only=True)
class Discovery:
    """One node's feature discovery: its backend, the shared config, and what to write to."""

    backend: GpuBackend
    config: Config
    sinks: Sequence[Sink] = ()
    machine: str = UNKNOWN_MACHINE
    timestamps: bool = True
    clock: Callable[[], float] = time.time
    stop: threading.Event = field(default_factory=threading.Event)
    _pass_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _inventory: SeenInventory = field(init=False, repr=False)
    """The GPUs; while NVML is let go for a GPU reset on the node, the last answer (labels stay)."""

    def __post_init__(self) -> None:
        self._inventory = SeenInventory(self.backend)

    def labels(self) -> Labels:
        """One pass of discovery, without writing anything."""
        stamp = int(self.clock()) if self.timestamps else None
        return gfd_labels(self._inventory(), config=self.config, timestamp=stamp, machine=self.machine)

    def run_once(self) -> Labels:
        """Discover and write to every sink; raises what the backend or a sink raises.

        Passes never overlap: a pass for a new config waits for the one in progress.
        """
        with self._pass_lock:
            labels = self.labels()
            for sink in self.sinks:
                sink(labels)
            return labels

    def reconfigure(self, config: Config, reason: str) -> None:
        """Switch to ``config`` and relabel now, as NVIDIA's GFD does when its config changes;
        the loop keeps its schedule. A failed pass is logged; the next scheduled one retries it."""
        self.config = config
        try:
            labels = self.run_once()
        except Exception as exc:
            log.error("%s: config switched, but the pass with it failed, outputs left unchanged: %s", reason, exc)
            return
        log.info("%s: config switched; wrote %d labels", reason, len(labels))

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


def follow_config_label(
    discovery: Discovery,
    *,
    watch: NodeLabelWatch,
    load: Callable[[str | None], Config],
    label: str | None,
    resource_version: str | None = None,
    retry_seconds: float = 1.0,
) -> threading.Thread:
    """Start a daemon thread that relabels with ``load(value)`` each time the Node's
    ``nvidia.com/device-plugin.config`` label changes, until ``discovery.stop`` is set.

    ``label`` is the value the running config was chosen with. A value whose config cannot be
    loaded (missing key, bad file) keeps the running config and is logged. The watch retries on its
    own (see ``NodeLabelWatch.changes``); anything else that ends the thread's loop is logged and
    the watch started again from the last label seen, after a jittered backoff from
    ``retry_seconds`` (``kube.follow``'s pacing). The thread notices ``discovery.stop`` within
    ``retry_seconds``.
    """
    current = label
    rv = resource_version

    async def follow() -> None:
        nonlocal current, rv
        async for value in watch.changes(current, rv):
            current, rv = value, None
            shown = f"{NODE_CONFIG_LABEL}={value}" if value else f"{NODE_CONFIG_LABEL} removed"
            try:
                config = load(value)
            except ConfigFileError as exc:
                log.error("node label %s: config not switched, keeping the running one: %s", shown, exc)
                continue
            await asyncio.to_thread(discovery.reconfigure, config, f"node label {shown}")

    async def until_stopped() -> None:
        following = asyncio.create_task(follow())
        while not (following.done() or discovery.stop.is_set()):
            await asyncio.wait({following}, timeout=retry_seconds)
        await cancel_and_wait(following)

    def supervise() -> None:
        backoff = Backoff(retry_seconds, cap=MAX_RETRY_SECONDS)
        while not discovery.stop.is_set():
            started = time.monotonic()
            try:
                asyncio.run(until_stopped())
            except Exception:
                log.exception("following Node %s's %s label failed; watching again", watch.node_name, NODE_CONFIG_LABEL)
            if time.monotonic() - started > MAX_RETRY_SECONDS:  # it ran a good while: a new fault
                backoff.reset()
            discovery.stop.wait(backoff.next())

    thread = threading.Thread(target=supervise, name="gfd-config-label", daemon=True)
    thread.start()
    return thread
