"""Prometheus text format 0.0.4, written the way dcgm-exporter writes it.

prometheus-client's ``generate_latest`` follows OpenMetrics naming and declares every counter as
``<name>_total``. DCGM counters keep their DCGM names (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``),
which dashboards and alerts query, so this writer names the ``# TYPE`` line after the samples it
heads. gpuchain's own counters (``<name>_total`` samples) come out as ``generate_latest`` writes a
prometheus-client counter, minus the ``_created`` samples.

No node agent role needs prometheus-client: every metric source yields ``Family`` (the exporter's
DCGM and self-metrics, the repair loop's, the DRA plugin's, the node agent's own), and
``histogram`` writes a histogram's samples as prometheus-client's does. Importing any part of
prometheus-client runs its package, which brings an HTTP server, urllib and email (2.6 MiB on a
device plugin that serves nothing else; 1.4 MiB more on a node agent that has the Kubernetes
client). ``render_families`` reads only a family's name, help, type and samples, so it writes
prometheus-client's families too (the tests compare the two).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol


class Sample(NamedTuple):
    """One sample of a ``Family``: what ``render_families`` reads of prometheus-client's."""

    name: str
    labels: dict[str, str]
    value: float


class Family(NamedTuple):
    """A metric family as ``render_families`` writes it.
    ``type`` is Prometheus's (``gauge``, ``counter``); a counter's samples are named ``<name>_total``,
    as prometheus-client names them."""

    name: str
    documentation: str
    type: str
    samples: list[Sample]

    def add_sample(self, name: str, *, labels: dict[str, str], value: float) -> None:
        """One more sample (as prometheus-client's ``Metric.add_sample``), while the family is built."""
        self.samples.append(Sample(name, labels, value))


def histogram(name: str, *, labels: dict[str, str], bounds: Sequence[float], values: Sequence[float]) -> list[Sample]:
    """One histogram's samples over ``bounds`` and +Inf, as prometheus-client's
    ``HistogramMetricFamily`` writes them: a cumulative ``<name>_bucket`` per bound (label ``le``,
    last), then ``<name>_count`` and ``<name>_sum``."""
    out = [
        Sample(f"{name}_bucket", {**labels, "le": f"{b:g}"}, float(sum(1 for v in values if v <= b))) for b in bounds
    ]
    out.append(Sample(f"{name}_bucket", {**labels, "le": "+Inf"}, float(len(values))))
    out.append(Sample(f"{name}_count", labels, float(len(values))))
    out.append(Sample(f"{name}_sum", labels, sum(values)))
    return out


class Collects(Protocol):
    """What is rendered: prometheus-client's registries and collectors, and gpuchain's own sources."""

    def collect(self) -> Iterable[Family]: ...


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _number(value: float) -> str:
    """A sample value as Prometheus parses it (Go's spelling of the infinities and NaN)."""
    if math.isfinite(value):
        return repr(value)
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_value(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def render_families(families: Iterable[Family]) -> str:
    """Text exposition of ``families``; label order is kept as given (dcgm-exporter's order)."""
    out: list[str] = []
    for family in families:
        samples = [s for s in family.samples if not s.name.endswith("_created")]
        type_name = family.name
        if family.type == "counter" and any(s.name == family.name + "_total" for s in samples):
            type_name = family.name + "_total"
        prom_type = "untyped" if family.type == "unknown" else family.type
        out.append(f"# HELP {type_name} {_escape_help(family.documentation)}\n# TYPE {type_name} {prom_type}\n")
        for s in samples:
            if s.labels:
                labels = ",".join(f'{k}="{_escape_value(v)}"' for k, v in s.labels.items())
                out.append(f"{s.name}{{{labels}}} {_number(s.value)}\n")
            else:
                out.append(f"{s.name} {_number(s.value)}\n")
    return "".join(out)


def render(registry: Collects) -> bytes:
    """Collect ``registry`` and write it as Prometheus text."""
    return render_families(registry.collect()).encode("utf-8")
