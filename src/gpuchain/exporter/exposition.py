"""Prometheus text format 0.0.4, written the way dcgm-exporter writes it.

prometheus-client's ``generate_latest`` follows OpenMetrics naming and declares every counter as
``<name>_total``. DCGM counters keep their DCGM names (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``),
which dashboards and alerts query, so this writer names the ``# TYPE`` line after the samples it
heads. Families from prometheus-client's own metrics (the exporter's self-metrics) come out as
``generate_latest`` would write them, minus the ``_created`` samples.

This module and the server need nothing of prometheus-client at run time: a family is anything
with a name, help, type and samples (``Exposed``). Importing any part of prometheus-client runs its
package, which brings an HTTP server, urllib and email (2.6 MiB on a device plugin that serves
nothing else); a source whose role needs nothing else of it yields ``Family`` instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


class Sample(NamedTuple):
    """One sample of a ``Family``: what ``render_families`` reads of prometheus-client's."""

    name: str
    labels: dict[str, str]
    value: float


class Family(NamedTuple):
    """A metric family as ``render_families`` writes it, for a source that loads no prometheus-client.
    ``type`` is Prometheus's (``gauge``, ``counter``); a counter's samples are named ``<name>_total``,
    as prometheus-client names them."""

    name: str
    documentation: str
    type: str
    samples: Sequence[Sample]


if TYPE_CHECKING:
    Exposed = Metric | Family


class Collects(Protocol):
    """What is rendered: prometheus-client's registries and collectors, and gpuchain's own sources."""

    def collect(self) -> Iterable[Exposed]: ...


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


def render_families(families: Iterable[Exposed]) -> str:
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
