"""Health read from a GPU's counters rather than from an XID event: what the repair loop acts on too.

NVML reports some conditions only as readings: a remapped row waiting for a reset to take effect
(``nvmlDeviceGetRemappedRows`` ``isPending``), or remapping that failed (``failureOccurred``). The
health publisher reads them each pass and publishes them with the GPU's fault, so the GPU is
drained and reset like one that raised an XID.
"""

from __future__ import annotations

from gpuchain.gpu.model import Telemetry
from gpuchain.gpu.xid import Resolution

PROBES = {
    "row-remap-failed": "row remapping failed",
    "row-remap-pending": "row remapping pending (a GPU reset activates it)",
}
"""Probe name -> what it means, for condition messages and Events."""


def probe_resolution(name: str) -> Resolution:
    """What a tripped probe needs: a reset activates a pending remap, and is the first thing to try
    after a failed one (the burn-in then fails, and the loop asks for a reboot, then a person)."""
    return Resolution.RESET_GPU


def probe(readings: Telemetry) -> tuple[str, ...]:
    """The probes a GPU's readings trip, in a stable order (a reading the GPU lacks trips none)."""
    found = []
    if readings.row_remap_failure:
        found.append("row-remap-failed")
    if readings.row_remap_pending:
        found.append("row-remap-pending")
    return tuple(found)
