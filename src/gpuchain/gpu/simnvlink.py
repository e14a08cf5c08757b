"""What a simulated GPU's NVLinks read before any error, by generation.

Kept apart from `SimBackend` because it is data quoted from NVIDIA's sources (the counters NVML
reports before Blackwell, the NVLink5 field values and healthy bit error rates from Blackwell on),
which the backend's health readings start from and its injected NVLink errors add to.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuchain.gpu.probes import BER_ZERO, Ber, NvLinkCounters, nvlink5


@dataclass(frozen=True)
class CleanNvLink:
    """What a GPU's NVLinks read before any error: each link's counters, and the GPU's aggregates."""

    link: NvLinkCounters
    aggregate: dict[str, Ber]


NVLINK_CLEAN = CleanNvLink(NvLinkCounters(0, replay=0, recovery=0, crc_flit=0, crc_data=0), {})
"""Before Blackwell: nvmlDeviceGetNvLinkErrorCounter's four counters, no NVLink5 field values."""
NVLINK5_CLEAN = CleanNvLink(
    NvLinkCounters(
        0,
        recovery=0,
        recovery_failed=0,
        symbol_errors=0,
        effective_errors=0,
        rx_errors=0,
        rx_malformed=0,
        rx_buffer_overrun=0,
        rx_remote_errors=0,
        rx_general_errors=0,
        link_integrity_errors=0,
        symbol_ber=BER_ZERO,
        effective_ber=BER_ZERO,
    ),
    {"symbol_ber": Ber(15, 238), "effective_ber": BER_ZERO},
)
"""Blackwell and later: NVLink5 field values, no replay or CRC counters. A healthy B200's aggregate
symbol BER reads 15e-238 (raw 73710, NVIDIA/DCGM testing/python3/tests/test_field_values.py
``test_nvlink_ber_fields`` @ 72fa3fea: "Blackwell aggregate healthy floor"); a BER with no errors
reads 15e-255 (raw 4095, the same test and DcgmHealthWatch's healthy baselines)."""


def clean_nvlink(compute_capability: tuple[int, int]) -> CleanNvLink:
    """The error-free NVLink readings of a GPU of this compute capability."""
    return NVLINK5_CLEAN if nvlink5(compute_capability) else NVLINK_CLEAN
