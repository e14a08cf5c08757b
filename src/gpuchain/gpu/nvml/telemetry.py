"""What a GPU reads now: utilisation, memory, clocks, power, its processes and its health counters."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gpuchain.gpu.errors import NotFoundError
from gpuchain.gpu.model import MigMemory, Telemetry
from gpuchain.gpu.nvml.queries import MIB, Queries
from gpuchain.gpu.nvml.session import as_pair, nvml_operation
from gpuchain.gpu.processes import GpuProcess, read_processes

if TYPE_CHECKING:
    # The health probes' module loads with the first health reading: a node agent's device plugin
    # registers before it asks for any.
    from gpuchain.gpu.probes import Ber, HealthReadings, NvLinkCounters


class TelemetryReads(Queries):
    """The exporter's and the health probes' readings, per GPU or MIG device, by UUID."""

    _process_reads: dict[str, int]
    """GPU UUID -> time (microseconds) of its last ``processes`` read, the start of the next SM window."""

    @nvml_operation
    def processes(self, gpu_uuid: str) -> tuple[GpuProcess, ...]:
        """Read by ``gpu.processes``; SM shares are averaged since this GPU's previous read."""
        now_us = int(time.time() * 1_000_000)
        since = self._process_reads.get(gpu_uuid, now_us - 1_000_000)
        found = read_processes(self._nvml, call=self._call, optional=self._optional, gpu_uuid=gpu_uuid, since_us=since)
        self._process_reads[gpu_uuid] = now_us
        return found

    @nvml_operation
    def telemetry(self, gpu_uuid: str) -> Telemetry:
        n = self._nvml
        h = self._call(n.nvmlDeviceGetHandleByUUID, gpu_uuid)
        if self._is_mig_handle(h):
            raise NotFoundError(f"{gpu_uuid} is a MIG device, not a GPU: read its memory with mig_memory()")
        util = self._optional(n.nvmlDeviceGetUtilizationRates, h)
        mem = self._call(n.nvmlDeviceGetMemoryInfo, h)
        enc = self._optional(n.nvmlDeviceGetEncoderUtilization, h)
        dec = self._optional(n.nvmlDeviceGetDecoderUtilization, h)
        power = self._optional(n.nvmlDeviceGetPowerUsage, h)
        rows = self._optional(n.nvmlDeviceGetRemappedRows, h)
        reserved = getattr(mem, "reserved", None)
        return Telemetry(
            uuid=gpu_uuid,
            gpu_util=util.gpu if util is not None else None,
            mem_copy_util=util.memory if util is not None else None,
            enc_util=enc[0] if enc is not None else None,
            dec_util=dec[0] if dec is not None else None,
            memory_used_mib=int(mem.used // MIB),
            memory_free_mib=int(mem.free // MIB),
            memory_reserved_mib=int(reserved // MIB) if reserved is not None else None,
            temperature_c=self._optional(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
            memory_temperature_c=self._memory_temperature(h),
            power_w=power / 1000.0 if power is not None else None,
            energy_mj=self._optional(n.nvmlDeviceGetTotalEnergyConsumption, h),
            sm_clock_mhz=self._optional(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
            mem_clock_mhz=self._optional(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM),
            pcie_replay=self._optional(n.nvmlDeviceGetPcieReplayCounter, h),
            remapped_rows_correctable=rows[0] if rows is not None else None,
            remapped_rows_uncorrectable=rows[1] if rows is not None else None,
            row_remap_failure=rows[3] if rows is not None else None,
            row_remap_pending=rows[2] if rows is not None else None,
        )

    @nvml_operation
    def health_readings(self, gpu_uuid: str) -> HealthReadings:
        """Row remapping, page retirement and every active NVLink's error counters (on Blackwell and
        later from NVML's field values); a reading the GPU does not support (retired pages on Ampere
        and newer, replay and CRC counters on Blackwell) is None."""
        n = self._nvml
        h = self._call(n.nvmlDeviceGetHandleByUUID, gpu_uuid)
        if self._is_mig_handle(h):
            raise NotFoundError(f"{gpu_uuid} is a MIG device, not a GPU: its health counters are its GPU's")
        rows = self._optional(n.nvmlDeviceGetRemappedRows, h)
        pending = self._optional(n.nvmlDeviceGetRetiredPagesPendingStatus, h)
        sbe = self._optional(
            n.nvmlDeviceGetRetiredPages, h, n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        )
        dbe = self._optional(n.nvmlDeviceGetRetiredPages, h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        links, symbol_ber, effective_ber = self._nvlink_counters(h)
        from gpuchain.gpu.probes import HealthReadings

        return HealthReadings(
            uuid=gpu_uuid,
            row_remap_pending=bool(rows[2]) if rows is not None else None,
            row_remap_failed=bool(rows[3]) if rows is not None else None,
            retired_pages_pending=bool(pending) if pending is not None else None,
            retired_pages_sbe=len(sbe) if sbe is not None else None,
            retired_pages_dbe=len(dbe) if dbe is not None else None,
            nvlink=links,
            nvlink_symbol_ber=symbol_ber,
            nvlink_effective_ber=effective_ber,
        )

    def _nvlink_counters(self, h: Any) -> tuple[tuple[NvLinkCounters, ...], Ber | None, Ber | None]:
        """Every active link's error counters, and the GPU's aggregate symbol and effective BER.

        Which counters a GPU has is decided by its compute capability, as DCGM decides it
        (``probes.nvlink5``): from Blackwell on, every link's NVLink5 field values, in one call;
        before, nvmlDeviceGetNvLinkErrorCounter per link and counter (no aggregate BER). Not by what
        the old counters answer: a driver answering them with zeros on Blackwell would otherwise
        hide the NVLink5 errors (nvml.h says only that they are "unsupported for Blackwell+")."""
        from gpuchain.gpu.probes import nvlink5

        links = list(self._active_links(h))
        if not links:
            return (), None, None
        if nvlink5(as_pair(self._call(self._nvml.nvmlDeviceGetCudaComputeCapability, h))):
            return self._nvlink_fields(h, links)
        found = [c for c in (self._error_counters(h, link) for link in links) if c is not None]
        return tuple(found), None, None

    def _error_counters(self, h: Any, link: int) -> NvLinkCounters | None:
        """One link's replay, recovery, CRC flit and CRC data counters; None if it reports none."""
        n = self._nvml
        kinds = (
            n.NVML_NVLINK_ERROR_DL_REPLAY,
            n.NVML_NVLINK_ERROR_DL_RECOVERY,
            n.NVML_NVLINK_ERROR_DL_CRC_FLIT,
            n.NVML_NVLINK_ERROR_DL_CRC_DATA,
        )
        values = [self._optional(n.nvmlDeviceGetNvLinkErrorCounter, h, link, kind) for kind in kinds]
        from gpuchain.gpu.probes import NvLinkCounters

        return NvLinkCounters(link, *values) if any(v is not None for v in values) else None

    def _nvlink_fields(self, h: Any, links: list[int]) -> tuple[tuple[NvLinkCounters, ...], Ber | None, Ber | None]:
        """NVLink5 error counters and BERs, per link (scopeId = link) and the GPU's aggregate BERs
        (scopeId UINT_MAX, as DCGM reads them), all in one nvmlDeviceGetFieldValues call: one call per
        link and field would be hundreds of driver round trips per GPU every pass. A field the GPU
        does not report comes back with its own error status and reads as None."""
        n = self._nvml
        per_link = [(name, getattr(n, field)) for name, field in _NVLINK5_FIELDS]
        aggregate = (n.NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER, n.NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER)
        request = [(fid, link) for link in links for _, fid in per_link]
        request += [(fid, _ALL_LINKS) for fid in aggregate]
        values = self._optional(n.nvmlDeviceGetFieldValues, h, request)
        if values is None:
            return (), None, None
        read = {key: _field_int(n, v) for key, v in zip(request, values, strict=True)}
        from gpuchain.gpu.probes import NvLinkCounters

        found = []
        for link in links:
            got: dict[str, Any] = {name: read[(fid, link)] for name, fid in per_link}
            if all(v is None for v in got.values()):
                continue
            for name in ("symbol_ber", "effective_ber"):
                got[name] = _ber(got[name])
            found.append(NvLinkCounters(link, **got))
        return tuple(found), _ber(read[(aggregate[0], _ALL_LINKS)]), _ber(read[(aggregate[1], _ALL_LINKS)])

    @nvml_operation
    def mig_memory(self, mig_uuid: str) -> MigMemory:
        """nvmlDeviceGetMemoryInfo on the MIG device handle: that GPU instance's framebuffer."""
        n = self._nvml
        h = self._call(n.nvmlDeviceGetHandleByUUID, mig_uuid)
        if not self._is_mig_handle(h):
            raise NotFoundError(f"{mig_uuid} is a whole GPU, not a MIG device: read its memory with telemetry()")
        mem = self._call(n.nvmlDeviceGetMemoryInfo, h)
        return MigMemory(
            uuid=mig_uuid, total_mib=int(mem.total // MIB), used_mib=int(mem.used // MIB), free_mib=int(mem.free // MIB)
        )

    def _is_mig_handle(self, h: Any) -> bool:
        """Whether NVML handed out a MIG device handle (handle-by-UUID answers both kinds)."""
        return bool(self._optional(self._nvml.nvmlDeviceIsMigDeviceHandle, h))

    def _memory_temperature(self, h: Any) -> int | None:
        """HBM temperature: only a field value in NVML, not a sensor of nvmlDeviceGetTemperature."""
        n = self._nvml
        values = self._optional(n.nvmlDeviceGetFieldValues, h, [n.NVML_FI_DEV_MEMORY_TEMP])
        if not values or values[0].nvmlReturn != n.NVML_SUCCESS:
            return None
        return int(values[0].value.uiVal)


# ---- NVLink5 error field values (Blackwell and later) ---------------------------------------------

_NVLINK5_FIELDS = (
    ("recovery", "NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS"),
    ("recovery_failed", "NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS"),
    ("symbol_errors", "NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS"),
    ("effective_errors", "NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS"),
    ("rx_errors", "NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS"),
    ("rx_malformed", "NVML_FI_DEV_NVLINK_COUNT_MALFORMED_PACKET_ERRORS"),
    ("rx_buffer_overrun", "NVML_FI_DEV_NVLINK_COUNT_BUFFER_OVERRUN_ERRORS"),
    ("rx_remote_errors", "NVML_FI_DEV_NVLINK_COUNT_RCV_REMOTE_ERRORS"),
    ("rx_general_errors", "NVML_FI_DEV_NVLINK_COUNT_RCV_GENERAL_ERRORS"),
    ("link_integrity_errors", "NVML_FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS"),
    ("symbol_ber", "NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER"),
    ("effective_ber", "NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER"),
)
"""NvLinkCounters field -> the NVML field id read per link (nvml.h "NVLink counter field id
201-225 / Link ID needs to be specified in the scopeId field"). Link-recovery events stand in for
the old recovery counter, as nvml.h says of NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: "unsupported for
Blackwell+. Please use NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_*"."""

_ALL_LINKS = 0xFFFFFFFF
"""scopeId UINT_MAX: the value over all the GPU's links (DCGM's DcgmCacheManager reads NVLink5
counters so on Blackwell)."""

_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
"""nvmlValueType_t (NVML_VALUE_TYPE_*) -> the member of the nvmlValue_t union that holds the value."""


def _field_int(nvml: Any, value: Any) -> int | None:
    """One nvmlFieldValue_t as an integer; None when NVML answered that field with an error."""
    if value.nvmlReturn != nvml.NVML_SUCCESS:
        return None
    return int(getattr(value.value, _VALUE_MEMBER.get(int(value.valueType), "ullVal")))


def _ber(raw: int | None) -> Ber | None:
    from gpuchain.gpu.probes import Ber

    return Ber.from_raw(raw) if raw is not None else None
