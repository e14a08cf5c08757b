"""One metrics endpoint for every role of a process: the exporter's port serves them all.

``MetricsHub`` is a ``MetricsSource`` (``exporter.server``) made of the sources the roles add
(the exporter's GPU metrics, the repair loop's) and, in the node agent, the supervisor's own
(``RoleMetrics``). A role restarted by the supervisor replaces its source under the same name. With
one source the hub is that source: its ``/health`` answers as the separate agent's does.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuchain.exporter.exposition import Family
    from gpuchain.exporter.server import MetricsSource


class MetricsHub:
    """The union of the roles' metrics sources, served by one ``MetricsServer``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: dict[str, MetricsSource] = {}
        self._changes = 0

    def add(self, name: str, source: MetricsSource) -> None:
        """Serve ``source`` from now on (replacing an earlier one of ``name``: a restarted role's)."""
        with self._lock:
            self._sources[name] = source
            self._changes += 1

    def remove(self, name: str) -> None:
        with self._lock:
            if self._sources.pop(name, None) is not None:
                self._changes += 1

    def _now(self) -> list[tuple[str, MetricsSource]]:
        with self._lock:
            return list(self._sources.items())

    @property
    def registry(self) -> MetricsHub:
        return self

    def collect(self) -> Iterator[Family]:
        for _name, source in self._now():
            yield from source.registry.collect()

    @property
    def generation(self) -> Hashable:
        with self._lock:
            return (self._changes, tuple(s.generation for s in self._sources.values()))

    def health(self) -> tuple[bool, str]:
        """Healthy when every source is; each source's reason, named by role when there are several."""
        sources = self._now()
        if not sources:
            return True, "no role serves metrics"
        if len(sources) == 1:
            return sources[0][1].health()
        answers = [(name, *source.health()) for name, source in sources]
        return all(ok for _, ok, _ in answers), "; ".join(f"{name}: {reason}" for name, _, reason in answers)
