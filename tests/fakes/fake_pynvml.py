"""A fake ``pynvml`` module that answers from a SimBackend, for driving NvmlBackend in tests.

Only the NVML calls are fake: constants and error classes are the real nvidia-ml-py ones, so an
error raised here is exactly what the real library raises (``NVMLError`` picks the subclass by
code). Because it reads the SimBackend's live state, faults injected into the sim (XIDs, a
lost GPU) reach NvmlBackend through the same NVML calls a driver would answer.
"""

from __future__ import annotations

import queue
import types
from dataclasses import dataclass
from typing import Any

import pynvml as real

from gpuchain.gpu import catalog
from gpuchain.gpu.model import EventKind, Gpu, HealthEvent, MigDevice
from gpuchain.gpu.sim import SimBackend

MIB = 1024 * 1024
NO_INSTANCE = 0xFFFFFFFF


@dataclass(frozen=True)
class GpuHandle:
    uuid: str


@dataclass(frozen=True)
class MigHandle:
    parent_uuid: str
    uuid: str


@dataclass(frozen=True)
class GiHandle:
    parent_uuid: str
    gi_id: int


class FakeNvml(types.ModuleType):
    """Build with ``FakeNvml(sim)``; pass it as ``NvmlBackend(nvml=...)``."""

    def __init__(
        self, sim: SimBackend, library_missing: bool = False, unsupported: frozenset[str] = frozenset()
    ) -> None:
        super().__init__("pynvml")
        for name in dir(real):
            if name.startswith(("NVML_", "nvmlEventType", "NVMLError")):
                setattr(self, name, getattr(real, name))
        self.sim = sim
        self.library_missing = library_missing
        self.unsupported = set(unsupported)
        self.initialized = 0
        self.calls: list[str] = []
        self._event_sets: list[_EventSet] = []

    # ---- helpers -----------------------------------------------------------------------------

    def _err(self, code: int) -> Exception:
        return real.NVMLError(code)  # type: ignore[no-any-return]

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        if name in self.unsupported:
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)
        if not self.initialized and name != "nvmlInit":
            raise self._err(real.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: GpuHandle) -> Gpu:
        if self.sim.is_lost(handle.uuid):
            raise self._err(real.NVML_ERROR_GPU_IS_LOST)
        return self.sim.inventory().gpu(handle.uuid)

    def _mig(self, handle: MigHandle) -> MigDevice:
        parent = self._gpu(GpuHandle(handle.parent_uuid))
        for mig in parent.mig_devices:
            if mig.uuid == handle.uuid:
                return mig
        raise self._err(real.NVML_ERROR_NOT_FOUND)

    def _model(self, gpu: Gpu) -> catalog.GpuModel:
        found = catalog.model_for_name(gpu.name)
        assert found is not None
        return found

    # ---- init and system ---------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self.library_missing:
            raise self._err(real.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.sim.inventory().driver.version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        major, minor = self.sim.inventory().driver.cuda_major_minor
        return major * 1000 + minor * 10

    # ---- devices -----------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.sim.topology.expanded())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> GpuHandle:
        self._enter("nvmlDeviceGetHandleByIndex")
        specs = self.sim.topology.expanded()
        if not 0 <= index < len(specs):
            raise self._err(real.NVML_ERROR_INVALID_ARGUMENT)
        handle = GpuHandle(specs[index].uuid)
        self._gpu(handle)
        return handle

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> GpuHandle:
        self._enter("nvmlDeviceGetHandleByUUID")
        if uuid not in {s.uuid for s in self.sim.topology.expanded()}:
            raise self._err(real.NVML_ERROR_NOT_FOUND)
        handle = GpuHandle(uuid)
        self._gpu(handle)
        return handle

    def nvmlDeviceGetUUID(self, handle: GpuHandle | MigHandle) -> str:
        self._enter("nvmlDeviceGetUUID")
        if isinstance(handle, MigHandle):
            return self._mig(handle).uuid
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: GpuHandle) -> str:
        self._enter("nvmlDeviceGetName")
        return self._gpu(handle).name

    def nvmlDeviceGetPciInfo(self, handle: GpuHandle) -> Any:
        self._enter("nvmlDeviceGetPciInfo")
        gpu = self._gpu(handle)
        return types.SimpleNamespace(busId=gpu.pci_bus_id, pciDeviceId=gpu.pci_device_id)

    def nvmlDeviceGetMemoryInfo(self, handle: GpuHandle) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo")
        gpu = self._gpu(handle)
        t = self.sim.telemetry(gpu.uuid)
        return types.SimpleNamespace(
            total=gpu.memory_mib * MIB,
            used=(t.memory_used_mib or 0) * MIB,
            free=(t.memory_free_mib or 0) * MIB,
            reserved=(t.memory_reserved_mib or 0) * MIB,
        )

    def nvmlDeviceGetCudaComputeCapability(self, handle: GpuHandle) -> tuple[int, int]:
        self._enter("nvmlDeviceGetCudaComputeCapability")
        return self._gpu(handle).compute_capability

    def nvmlDeviceGetNumaNodeId(self, handle: GpuHandle) -> int:
        self._enter("nvmlDeviceGetNumaNodeId")
        node = self._gpu(handle).numa_node
        return -1 if node is None else node

    def nvmlDeviceGetMinorNumber(self, handle: GpuHandle) -> int:
        self._enter("nvmlDeviceGetMinorNumber")
        return self._gpu(handle).minor_number

    def nvmlDeviceGetAttributes(self, handle: GpuHandle | MigHandle) -> Any:
        self._enter("nvmlDeviceGetAttributes")
        if isinstance(handle, MigHandle):
            mig = self._mig(handle)
            prof = self._model(self._gpu(GpuHandle(handle.parent_uuid))).profile(mig.profile)
            return types.SimpleNamespace(
                multiprocessorCount=prof.multiprocessors,
                sharedCopyEngineCount=prof.copy_engines,
                sharedDecoderCount=prof.decoders,
                sharedEncoderCount=prof.encoders,
                sharedJpegCount=prof.jpeg,
                sharedOfaCount=prof.ofa,
                gpuInstanceSliceCount=prof.gi_slices,
                computeInstanceSliceCount=prof.gi_slices,
                memorySizeMB=prof.memory_mib,
            )
        gpu = self._gpu(handle)
        return types.SimpleNamespace(multiprocessorCount=gpu.multiprocessors, memorySizeMB=gpu.memory_mib)

    def nvmlDeviceGetMigMode(self, handle: GpuHandle) -> list[int]:
        self._enter("nvmlDeviceGetMigMode")
        gpu = self._gpu(handle)
        if not gpu.mig_capable:
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)
        mode = real.NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else real.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: GpuHandle) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount")
        return 7 if self._gpu(handle).mig_capable else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: GpuHandle, index: int) -> MigHandle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex")
        gpu = self._gpu(handle)
        for mig in gpu.mig_devices:
            if mig.index == index:
                return MigHandle(gpu.uuid, mig.uuid)
        raise self._err(real.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetGpuInstanceId(self, handle: MigHandle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId")
        return self._mig(handle).gi_id

    def nvmlDeviceGetComputeInstanceId(self, handle: MigHandle) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId")
        return self._mig(handle).ci_id

    def nvmlDeviceGetGpuInstanceById(self, handle: GpuHandle, gi_id: int) -> GiHandle:
        self._enter("nvmlDeviceGetGpuInstanceById")
        gpu = self._gpu(handle)
        if not any(m.gi_id == gi_id for m in gpu.mig_devices):
            raise self._err(real.NVML_ERROR_NOT_FOUND)
        return GiHandle(gpu.uuid, gi_id)

    def nvmlGpuInstanceGetInfo(self, gi: GiHandle) -> Any:
        self._enter("nvmlGpuInstanceGetInfo")
        gpu = self._gpu(GpuHandle(gi.parent_uuid))
        mig = next(m for m in gpu.mig_devices if m.gi_id == gi.gi_id)
        prof = self._model(gpu).profile(mig.profile)
        return types.SimpleNamespace(id=gi.gi_id, profileId=prof.nvml_gi_profile_id)

    # ---- topology ----------------------------------------------------------------------------

    def _switch_links(self, gpu: Gpu) -> int:
        topo = self.sim.topology
        nvswitch = (topo.interconnect or ("nvswitch" if self._model(gpu).nvlinks else "pcie")) == "nvswitch"
        return self._model(gpu).nvlinks if nvswitch and not topo.links else 0

    def _direct_peers(self, gpu: Gpu) -> list[int]:
        """One entry per direct NVLink lane: the peer GPU index at the other end."""
        if self._switch_links(gpu):
            return []
        peers: list[int] = []
        for link in self.sim.inventory().links:
            if gpu.index in (link.a, link.b) and link.nvlinks:
                peers.extend([link.b if link.a == gpu.index else link.a] * link.nvlinks)
        return peers

    def nvmlDeviceGetNvLinkState(self, handle: GpuHandle, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkState")
        gpu = self._gpu(handle)
        lanes = self._switch_links(gpu) or len(self._direct_peers(gpu))
        if lanes == 0:
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)
        if link >= max(lanes, self._model(gpu).nvlinks):
            raise self._err(real.NVML_ERROR_INVALID_ARGUMENT)
        return real.NVML_FEATURE_ENABLED if link < lanes else real.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: GpuHandle, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkRemoteDeviceType")
        gpu = self._gpu(handle)
        return real.NVML_NVLINK_DEVICE_TYPE_SWITCH if self._switch_links(gpu) else real.NVML_NVLINK_DEVICE_TYPE_GPU

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: GpuHandle, link: int) -> Any:
        self._enter("nvmlDeviceGetNvLinkRemotePciInfo")
        gpu = self._gpu(handle)
        peer = self.sim.inventory().gpu(self._direct_peers(gpu)[link])
        return types.SimpleNamespace(busId=peer.pci_bus_id, pciDeviceId=peer.pci_device_id)

    def nvmlDeviceGetTopologyCommonAncestor(self, a: GpuHandle, b: GpuHandle) -> int:
        self._enter("nvmlDeviceGetTopologyCommonAncestor")
        ga, gb = self._gpu(a), self._gpu(b)
        link = self.sim.inventory().link(ga.index, gb.index)
        return 0 if link is None else int(link.level)

    def nvmlDeviceGetP2PStatus(self, a: GpuHandle, b: GpuHandle, caps: int) -> int:
        self._enter("nvmlDeviceGetP2PStatus")
        ga, gb = self._gpu(a), self._gpu(b)
        link = self.sim.inventory().link(ga.index, gb.index)
        ok = caps == real.NVML_P2P_CAPS_INDEX_NVLINK and link is not None and link.nvlinks > 0
        return real.NVML_P2P_STATUS_OK if ok else real.NVML_P2P_STATUS_NOT_SUPPORTED

    # ---- telemetry ---------------------------------------------------------------------------

    def _t(self, handle: GpuHandle) -> Any:
        return self.sim.telemetry(self._gpu(handle).uuid)

    def nvmlDeviceGetUtilizationRates(self, handle: GpuHandle) -> Any:
        self._enter("nvmlDeviceGetUtilizationRates")
        t = self._t(handle)
        return types.SimpleNamespace(gpu=t.gpu_util, memory=t.mem_copy_util)

    def nvmlDeviceGetEncoderUtilization(self, handle: GpuHandle) -> list[int]:
        self._enter("nvmlDeviceGetEncoderUtilization")
        return [self._t(handle).enc_util, 167000]

    def nvmlDeviceGetDecoderUtilization(self, handle: GpuHandle) -> list[int]:
        self._enter("nvmlDeviceGetDecoderUtilization")
        return [self._t(handle).dec_util, 167000]

    def nvmlDeviceGetPowerUsage(self, handle: GpuHandle) -> int:
        self._enter("nvmlDeviceGetPowerUsage")
        return round(self._t(handle).power_w * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: GpuHandle) -> int:
        self._enter("nvmlDeviceGetTotalEnergyConsumption")
        return int(self._t(handle).energy_mj)

    def nvmlDeviceGetTemperature(self, handle: GpuHandle, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature")
        return int(self._t(handle).temperature_c)

    def nvmlDeviceGetFieldValues(self, handle: GpuHandle, field_ids: list[int]) -> list[Any]:
        self._enter("nvmlDeviceGetFieldValues")
        t = self._t(handle)
        known = {real.NVML_FI_DEV_MEMORY_TEMP: t.memory_temperature_c}
        return [
            types.SimpleNamespace(
                fieldId=f,
                nvmlReturn=real.NVML_SUCCESS if f in known else real.NVML_ERROR_NOT_SUPPORTED,
                value=types.SimpleNamespace(uiVal=known.get(f, 0)),
            )
            for f in field_ids
        ]

    def nvmlDeviceGetClockInfo(self, handle: GpuHandle, clock: int) -> int:
        self._enter("nvmlDeviceGetClockInfo")
        t = self._t(handle)
        return int(t.sm_clock_mhz if clock == real.NVML_CLOCK_SM else t.mem_clock_mhz)

    def nvmlDeviceGetPcieReplayCounter(self, handle: GpuHandle) -> int:
        self._enter("nvmlDeviceGetPcieReplayCounter")
        return int(self._t(handle).pcie_replay)

    def nvmlDeviceGetRemappedRows(self, handle: GpuHandle) -> tuple[int, int, int, int]:
        self._enter("nvmlDeviceGetRemappedRows")
        t = self._t(handle)
        return (t.remapped_rows_correctable, t.remapped_rows_uncorrectable, 0, t.row_remap_failure)

    # ---- events ------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> _EventSet:
        self._enter("nvmlEventSetCreate")
        es = _EventSet(self)
        self._event_sets.append(es)
        self.sim.add_listener(es.on_event)
        return es

    def nvmlDeviceRegisterEvents(self, handle: GpuHandle, mask: int, es: _EventSet) -> None:
        self._enter("nvmlDeviceRegisterEvents")
        self._gpu(handle)
        es.registered[handle.uuid] = es.registered.get(handle.uuid, 0) | mask

    def nvmlEventSetWait(self, es: _EventSet, timeout_ms: int) -> Any:
        self._enter("nvmlEventSetWait")
        try:
            return es.pending.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise self._err(real.NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetFree(self, es: _EventSet) -> None:
        self._enter("nvmlEventSetFree")
        self.sim.remove_listener(es.on_event)
        self._event_sets.remove(es)


class _EventSet:
    """Collects XID events for registered GPUs, as NVML's event set does."""

    def __init__(self, fake: FakeNvml) -> None:
        self.fake = fake
        self.registered: dict[str, int] = {}
        self.pending: queue.Queue[Any] = queue.Queue()

    def on_event(self, event: HealthEvent) -> None:
        if (
            event.kind is not EventKind.XID
            or not self.registered.get(event.gpu_uuid, 0) & real.nvmlEventTypeXidCriticalError
        ):
            return
        gi = ci = NO_INSTANCE
        if event.mig_uuid is not None:
            mig = next(m for m in self.fake.sim.snapshot_gpu(event.gpu_uuid).mig_devices if m.uuid == event.mig_uuid)
            gi, ci = mig.gi_id, mig.ci_id
        self.pending.put(
            types.SimpleNamespace(
                device=GpuHandle(event.gpu_uuid),
                eventType=real.nvmlEventTypeXidCriticalError,
                eventData=event.xid,
                gpuInstanceId=gi,
                computeInstanceId=ci,
            )
        )
