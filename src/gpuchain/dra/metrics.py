"""The DRA plugin's metrics: how long Prepare and Unprepare take, and the node's devices by state.

Served by ``dra-plugin --metrics-port`` on the exporter's HTTP server (``/metrics``, ``/health``),
as the repair loop's are. A pod waits for NodePrepareResources before its containers start, so its
latency is the plugin's share of a GPU pod's start-up; the device states say at a glance why a
node offers fewer devices than it has (unhealthy and tainted or withdrawn, or not DRA's at all).

- ``gpuchain_dra_prepare_seconds`` / ``gpuchain_dra_unprepare_seconds``: histograms per claim, by
  ``result`` (ok, error), measured around the driver's own work (API read, CDI spec, checkpoint).
- ``gpuchain_dra_devices``: a gauge per ``state``: ``available`` (published, free), ``prepared``
  (held by a prepared claim), ``tainted`` (unhealthy, published with a taint), ``withdrawn``
  (unhealthy, left out of the slice), ``withheld`` (the node's GPUs are the device plugin's).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field

from gpuchain.exporter.exposition import Family, Sample, histogram, render_families

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Histogram bounds (seconds): a prepare is a claim read and two small files, milliseconds when well."""
STATES = ("available", "prepared", "tainted", "withdrawn", "withheld")
"""Every device state, each served (0 included) so a dashboard sees it before it happens."""
OPERATIONS = ("prepare", "unprepare")
RESULTS = ("ok", "error")


@dataclass(kw_only=True)
class DraMetrics:
    """Prepare/unprepare latencies observed by the driver, and its device states read at each scrape.

    ``states`` is the driver's own count of its devices per state. The gRPC threads observe while
    the metrics server renders on another thread: every access to the latencies holds ``_lock``.
    """

    node: str
    states: Callable[[], Mapping[str, int]]
    latencies: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    observed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def registry(self) -> DraMetrics:
        """What ``MetricsServer`` renders: this collector itself."""
        return self

    @property
    def generation(self) -> Hashable:
        """Changes whenever a scrape's output would: a new observation or another device count."""
        with self._lock:
            observed = self.observed
        return observed, tuple(sorted(self.states().items()))

    def observe(self, operation: str, *, seconds: float, ok: bool) -> None:
        """One claim prepared or unprepared (``operation``) in ``seconds``, successfully or not."""
        with self._lock:
            self.latencies.setdefault((operation, "ok" if ok else "error"), []).append(seconds)
            self.observed += 1

    def health(self) -> tuple[bool, str]:
        """``/health``: the plugin answers (its state is readable)."""
        counts = self.states()
        return True, ", ".join(f"{state} {counts.get(state, 0)}" for state in STATES)

    def collect(self) -> Iterator[Family]:
        """The families, as gpuchain's own (``exporter.exposition.Family``): the DRA role loads no
        prometheus-client."""
        with self._lock:
            latencies = {k: list(v) for k, v in self.latencies.items()}
        for operation in OPERATIONS:
            name = f"gpuchain_dra_{operation}_seconds"
            samples = [
                sample
                for result in RESULTS
                for sample in histogram(
                    name,
                    labels={"result": result, "node": self.node},
                    bounds=LATENCY_BUCKETS,
                    values=latencies.get((operation, result), []),
                )
            ]
            help_text = f"Seconds the DRA plugin took to {operation} one claim (Node{operation.capitalize()}Resources)."
            yield Family(name, help_text, "histogram", samples)
        counts = self.states()
        yield Family(
            "gpuchain_dra_devices",
            "The node's DRA devices (whole GPUs, MIG devices) by state.",
            "gauge",
            [
                Sample("gpuchain_dra_devices", {"state": state, "node": self.node}, counts.get(state, 0))
                for state in STATES
            ],
        )

    def prometheus(self) -> str:
        """The metrics in Prometheus' text format, as ``/metrics`` serves them."""
        return render_families(self.collect())
