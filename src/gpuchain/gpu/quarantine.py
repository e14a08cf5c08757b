"""The quarantine list on a Node: which GPUs the repair loop withholds from workloads.

The repair loop (``gpuchain gpu-health``) writes annotation ``gpuchain.io/gpu-quarantine`` on its
Node: the UUIDs of the GPUs it is draining, resetting or burning in, comma-separated. The device
plugin and the DRA plugin read it and withhold those GPUs, their MIG devices and replicas
(``HealthState.quarantine``), so a GPU that looks healthy again after its reset takes no work until
its burn-in passed. It lives on the Node so every component that restarts picks it up again.
"""

from __future__ import annotations

from collections.abc import Iterable

QUARANTINE_ANNOTATION = "gpuchain.io/gpu-quarantine"


def encode_quarantine(gpu_uuids: Iterable[str]) -> str | None:
    """The annotation value (sorted, stable), or None when nothing is quarantined (remove it)."""
    uuids = sorted(set(gpu_uuids))
    return ",".join(uuids) or None


def decode_quarantine(text: str | None) -> frozenset[str]:
    """The quarantined GPU UUIDs; absent or empty means none."""
    return frozenset(u.strip() for u in (text or "").split(",") if u.strip())
