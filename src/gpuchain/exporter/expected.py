"""How many GPUs the node should have, from GPU feature discovery's feature file.

GFD (NVIDIA's or gpuchain's) writes ``nvidia.com/gpu.count=<n>`` into NFD's ``features.d`` on the
node; the exporter reads it from the same host path, so it needs no API access to say that a GPU
the node had at discovery is missing from the scrape. Without the file the collector falls back
to the most GPUs the backend has listed since start.
"""

from __future__ import annotations

from pathlib import Path

from gpuchain.discovery.output import DEFAULT_FEATURE_FILE

COUNT_LABEL = "nvidia.com/gpu.count"


def gfd_gpu_count(path: Path = Path(DEFAULT_FEATURE_FILE)) -> tuple[int, str] | None:
    """``(count, "gfd")`` from the feature file; None when it is absent, unreadable or has no count."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key == COUNT_LABEL and value.isdigit():
            return int(value), "gfd"
    return None
