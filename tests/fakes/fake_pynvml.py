"""A fake ``pynvml`` module that answers from a SimBackend, for driving NvmlBackend in tests.

Only the NVML calls are fake: constants and error classes are the real nvidia-ml-py ones, so an
error raised here is exactly what the real library raises (``NVMLError`` picks the subclass by
code). Because it reads the SimBackend's live state, faults injected into the sim (XIDs, a
lost GPU) reach NvmlBackend through the same NVML calls a driver would answer.

One FakeNvml is one process's copy of the library, and the SimBackend it reads is the node's
driver: as in libnvidia-ml, nvmlInit and nvmlShutdown are counted per process (the library is
torn down, its event sets freed, when the count reaches zero; every call but nvmlInit then
answers NVML_ERROR_UNINITIALIZED). Every FakeNvml knows the others on its sim (``clients``), and
persistence mode is the driver's, shared by them: that is what fakes.fake_nvidia_smi reads to
refuse a reset while any process holds the GPU. The sim plays the driver here, so it is never
released itself (its reads would refuse the fake): an agent lets go by releasing its NvmlBackend.
"""

from __future__ import annotations

import ctypes
import queue
import threading
import time
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml as real

from gpuchain.gpu import catalog
from gpuchain.gpu.errors import GpuError, GpuLostError, InvalidConfigError, NotFoundError, NotSupportedError
from gpuchain.gpu.model import EventKind, Gpu, HealthEvent, MigDevice
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.probes import Ber, nvlink5
from gpuchain.gpu.sim import SimBackend

MIB = 1024 * 1024
NO_INSTANCE = 0xFFFFFFFF

ALL_LINKS = 0xFFFFFFFF
"""scopeId UINT_MAX: a value over all the GPU's links (nvml.h, NVLink throughput and NVLink5 counters)."""
NVLINK5_FIELDS = {
    real.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS: "recovery",
    real.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS: "recovery_failed",
    real.NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS: "symbol_errors",
    real.NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS: "effective_errors",
    real.NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS: "rx_errors",
    real.NVML_FI_DEV_NVLINK_COUNT_MALFORMED_PACKET_ERRORS: "rx_malformed",
    real.NVML_FI_DEV_NVLINK_COUNT_BUFFER_OVERRUN_ERRORS: "rx_buffer_overrun",
    real.NVML_FI_DEV_NVLINK_COUNT_RCV_REMOTE_ERRORS: "rx_remote_errors",
    real.NVML_FI_DEV_NVLINK_COUNT_RCV_GENERAL_ERRORS: "rx_general_errors",
    real.NVML_FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS: "link_integrity_errors",
    real.NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER: "symbol_ber",
    real.NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER: "effective_ber",
}
"""NVLink5 field ids (nvml.h 201-225, NVLink5 only) -> the sim's NvLinkCounters reading each answers,
by what nvml.h says each counts."""

# NVML_GPU_INSTANCE_PROFILE_* constant -> the profile info ``id`` a real driver answers (the ID
# `nvidia-smi mig -lgip` prints). They differ on purpose, as on hardware, so a backend that
# confuses the two fails here.
GI_PROFILE_INFO_ID = {0: 19, 7: 20, 9: 15, 1: 14, 2: 9, 3: 5, 4: 0}
# NVML_COMPUTE_INSTANCE_PROFILE_* constant -> compute slices.
CI_PROFILE_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7}


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


@dataclass(frozen=True)
class CiHandle:
    parent_uuid: str
    gi_id: int
    ci_id: int


@dataclass
class _Driver:
    """What the node's driver knows beyond the sim: the processes that loaded NVML, and the
    persistence mode of each GPU (unset: enabled, as on a data-centre node)."""

    clients: weakref.WeakSet[FakeNvml] = field(default_factory=weakref.WeakSet)
    persistence: dict[str, int] = field(default_factory=dict)


_DRIVERS: weakref.WeakKeyDictionary[SimBackend, _Driver] = weakref.WeakKeyDictionary()
_DRIVERS_LOCK = threading.Lock()


def driver(sim: SimBackend) -> _Driver:
    """The driver state of ``sim``'s node, shared by every FakeNvml on it."""
    with _DRIVERS_LOCK:
        return _DRIVERS.setdefault(sim, _Driver())


def clients(sim: SimBackend) -> list[FakeNvml]:
    """The fake NVML libraries (one per process) on ``sim``'s node that are initialised now."""
    with _DRIVERS_LOCK:
        found = list(_DRIVERS[sim].clients) if sim in _DRIVERS else []
    return [c for c in found if c.initialized > 0]


def _deref(ref: Any) -> Any:
    """What a ``ctypes.byref(x)`` argument points at (``x``), as the C side would read it."""
    return getattr(ref, "_obj", ref)


class FakeNvml(types.ModuleType):
    """Build with ``FakeNvml(sim)``; pass it as ``NvmlBackend(nvml=...)``."""

    def __init__(
        self, sim: SimBackend, library_missing: bool = False, unsupported: frozenset[str] = frozenset()
    ) -> None:
        super().__init__("pynvml")
        for name in dir(real):
            if name.startswith(("NVML_", "nvmlEventType", "NVMLError", "c_nvml", "nvmlPciInfoExt")):
                setattr(self, name, getattr(real, name))
        self.sim = sim
        self.library_missing = library_missing
        self.unsupported = set(unsupported)
        self.initialized = 0
        """nvmlInit calls not yet matched by nvmlShutdown (NVML's per-process reference count)."""
        self.inits = 0
        """nvmlInit calls that succeeded, ever (to check a release shuts down each one)."""
        self.calls: list[str] = []
        self.stale: list[str] = []
        """NVML calls made on an event set already freed (use after free, double free)."""
        self._lock = threading.Lock()
        self._event_sets: list[_EventSet] = []
        self._opaque: dict[int, GiHandle | CiHandle] = {}
        self.persistence: dict[str, int] = driver(sim).persistence
        """GPU UUID -> persistence mode set through NVML: the driver's, shared by every FakeNvml on
        the sim (unset: enabled, as on a data-centre node)."""
        driver(sim).clients.add(self)
        self.persistence_log: list[tuple[int, int]] = []
        self.fabric: dict[int, list[tuple[int, int]]] = {}
        """GPU index -> (state, status) answers of nvmlDeviceGetGpuFabricInfo, one per call, the
        last one repeating; unset: registration completed."""

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
        if isinstance(handle, MigHandle):
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)  # a whole-GPU query on a MIG device handle
        if self.sim.is_lost(handle.uuid):
            raise self._err(real.NVML_ERROR_GPU_IS_LOST)
        return self.sim.inventory().gpu(handle.uuid)

    def _mig(self, handle: MigHandle) -> MigDevice:
        parent = self._gpu(GpuHandle(handle.parent_uuid))
        for mig in parent.mig_devices:
            if mig.uuid == handle.uuid:
                return mig
        raise self._err(real.NVML_ERROR_NOT_FOUND)

    def _sim(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call a SimBackend MIG method, turning its errors into the NVML codes a driver returns."""
        try:
            return fn(*args, **kwargs)
        except GpuLostError:
            raise self._err(real.NVML_ERROR_GPU_IS_LOST) from None
        except NotSupportedError:
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED) from None
        except NotFoundError:
            raise self._err(real.NVML_ERROR_NOT_FOUND) from None
        except InvalidConfigError:
            raise self._err(real.NVML_ERROR_INSUFFICIENT_RESOURCES) from None
        except GpuError:
            raise self._err(real.NVML_ERROR_IN_USE) from None

    def _pointer(self, handle: GiHandle | CiHandle, kind: Any) -> Any:
        """An opaque ctypes handle for ``handle``, to fill the caller's handle arrays with."""
        key = len(self._opaque) + 1
        self._opaque[key] = handle
        return ctypes.cast(ctypes.c_void_p(key), kind)

    def _resolve(self, handle: Any) -> Any:
        if isinstance(handle, GiHandle | CiHandle):
            return handle
        key = ctypes.cast(handle, ctypes.c_void_p).value
        if key not in self._opaque:
            raise self._err(real.NVML_ERROR_INVALID_ARGUMENT)
        return self._opaque[key]

    def _gi(self, handle: Any) -> tuple[Gpu, Any]:
        """The parent GPU and the sim's view of a GPU instance handle."""
        gi = self._resolve(handle)
        gpu = self._gpu(GpuHandle(gi.parent_uuid))
        for inst in self._sim(self.sim.gpu_instances, gpu.index):
            if inst.gi_id == gi.gi_id:
                return gpu, inst
        raise self._err(real.NVML_ERROR_NOT_FOUND)

    def _gi_profile(self, gpu: Gpu, info_id: int) -> catalog.MigProfile:
        for prof in self._model(gpu).mig_profiles:
            if GI_PROFILE_INFO_ID[prof.nvml_gi_profile_id] == info_id:
                return prof
        raise self._err(real.NVML_ERROR_INVALID_ARGUMENT)

    def _model(self, gpu: Gpu) -> catalog.GpuModel:
        found = catalog.model_for_name(gpu.name, gpu.pci_device_id)
        assert found is not None
        return found

    # ---- init and system ---------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self.library_missing:
            raise self._err(real.NVML_ERROR_LIBRARY_NOT_FOUND)
        with self._lock:
            self.initialized += 1
            self.inits += 1

    def nvmlShutdown(self) -> None:
        """One nvmlShutdown per nvmlInit; the last one tears the library down and frees every
        event set still open (an event raised later reaches none of them)."""
        self._enter("nvmlShutdown")
        with self._lock:
            self.initialized -= 1
            if self.initialized:
                return
            freed, self._event_sets = self._event_sets, []
        for es in freed:
            es.freed = True
            self.sim.remove_listener(es.on_event)

    @property
    def event_sets(self) -> int:
        """Event sets created and not freed (by nvmlEventSetFree or the last nvmlShutdown)."""
        with self._lock:
            return len(self._event_sets)

    def registered(self) -> list[set[str]]:
        """Per live event set, the GPU UUIDs registered on it (what a watcher listens to)."""
        with self._lock:
            return [set(es.registered) for es in self._event_sets]

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

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> GpuHandle | MigHandle:
        """A GPU's handle, or a MIG device's (NVML answers MIG UUIDs here too)."""
        self._enter("nvmlDeviceGetHandleByUUID")
        if uuid in {s.uuid for s in self.sim.topology.expanded()}:
            handle = GpuHandle(uuid)
            self._gpu(handle)
            return handle
        for gpu in self.sim.inventory().gpus:
            if any(m.uuid == uuid for m in gpu.mig_devices):
                return MigHandle(gpu.uuid, uuid)
        for spec in self.sim.topology.expanded():
            if self.sim.is_lost(spec.uuid) and any(
                m.uuid == uuid for m in self.sim.snapshot_gpu(spec.uuid).mig_devices
            ):
                raise self._err(real.NVML_ERROR_GPU_IS_LOST)
        raise self._err(real.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceIsMigDeviceHandle(self, handle: GpuHandle | MigHandle) -> int:
        self._enter("nvmlDeviceIsMigDeviceHandle")
        return int(isinstance(handle, MigHandle))

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

    def nvmlDeviceGetPciInfoExt(self, handle: GpuHandle, ref: Any) -> None:
        """Fills the caller's nvmlPciInfoExt_v1_t, class included, as drivers from R550 do."""
        self._enter("nvmlDeviceGetPciInfoExt")
        gpu = self._gpu(handle)
        info = _deref(ref)
        if info.version != real.nvmlPciInfoExt_v1:
            raise self._err(real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        info.busId = gpu.pci_bus_id.encode()
        info.pciDeviceId = gpu.pci_device_id
        pci_class = gpu.pci_class or 0
        info.baseClass, info.subClass = pci_class >> 16, (pci_class >> 8) & 0xFF

    def nvmlDeviceGetMemoryInfo(self, handle: GpuHandle | MigHandle) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo")
        if isinstance(handle, MigHandle):
            self._mig(handle)
            m = self.sim.mig_memory(handle.uuid)
            return types.SimpleNamespace(total=m.total_mib * MIB, used=m.used_mib * MIB, free=m.free_mib * MIB)
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

    def nvmlDeviceGetVirtualizationMode(self, handle: GpuHandle) -> int:
        self._enter("nvmlDeviceGetVirtualizationMode")
        vgpu = self._gpu(handle).vgpu
        return real.NVML_GPU_VIRTUALIZATION_MODE_VGPU if vgpu else real.NVML_GPU_VIRTUALIZATION_MODE_NONE

    def nvmlDeviceGetMinorNumber(self, handle: GpuHandle) -> int:
        self._enter("nvmlDeviceGetMinorNumber")
        return self._gpu(handle).minor_number

    def nvmlDeviceGetAttributes(self, handle: GpuHandle | MigHandle) -> Any:
        self._enter("nvmlDeviceGetAttributes")
        if isinstance(handle, MigHandle):
            mig = self._mig(handle)
            prof = self._model(self._gpu(GpuHandle(handle.parent_uuid))).profile(mig.profile)
            return types.SimpleNamespace(
                multiprocessorCount=prof.multiprocessors * mig.ci_slices // prof.gi_slices,
                sharedCopyEngineCount=prof.copy_engines,
                sharedDecoderCount=prof.decoders,
                sharedEncoderCount=prof.encoders,
                sharedJpegCount=prof.jpeg,
                sharedOfaCount=prof.ofa,
                gpuInstanceSliceCount=prof.gi_slices,
                computeInstanceSliceCount=mig.ci_slices,
                memorySizeMB=prof.memory_mib,
            )
        gpu = self._gpu(handle)
        return types.SimpleNamespace(multiprocessorCount=gpu.multiprocessors, memorySizeMB=gpu.memory_mib)

    def nvmlDeviceGetMigMode(self, handle: GpuHandle) -> list[int]:
        self._enter("nvmlDeviceGetMigMode")
        mode = self._sim(self.sim.mig_mode, self._gpu(handle).index)
        on, off = real.NVML_DEVICE_MIG_ENABLE, real.NVML_DEVICE_MIG_DISABLE
        return [on if mode.current else off, on if mode.pending else off]

    def nvmlDeviceSetMigMode(self, handle: GpuHandle, mode: int) -> int:
        self._enter("nvmlDeviceSetMigMode")
        after = self._sim(self.sim.set_mig_mode, self._gpu(handle).index, mode == real.NVML_DEVICE_MIG_ENABLE)
        return real.NVML_ERROR_RESET_REQUIRED if after.reset_pending else real.NVML_SUCCESS

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
        self._gi(GiHandle(gpu.uuid, gi_id))
        return GiHandle(gpu.uuid, gi_id)

    def nvmlGpuInstanceGetInfo(self, gi: Any) -> Any:
        self._enter("nvmlGpuInstanceGetInfo")
        gpu, inst = self._gi(gi)
        prof = self._model(gpu).profile(inst.profile)
        return types.SimpleNamespace(
            device=GpuHandle(gpu.uuid),
            id=inst.gi_id,
            profileId=GI_PROFILE_INFO_ID[prof.nvml_gi_profile_id],
            placement=types.SimpleNamespace(start=inst.start, size=prof.memory_slices),
        )

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: GpuHandle, profile: int, version: int = 2) -> Any:
        self._enter("nvmlDeviceGetGpuInstanceProfileInfo")
        gpu = self._gpu(handle)
        if not gpu.mig_enabled:
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= profile < real.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise self._err(real.NVML_ERROR_INVALID_ARGUMENT)
        prof = next((p for p in self._model(gpu).mig_profiles if p.nvml_gi_profile_id == profile), None)
        if prof is None:
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)
        return types.SimpleNamespace(
            id=GI_PROFILE_INFO_ID[profile],
            sliceCount=prof.gi_slices,
            instanceCount=prof.max_instances,
            multiprocessorCount=prof.multiprocessors,
            copyEngineCount=prof.copy_engines,
            decoderCount=prof.decoders,
            encoderCount=prof.encoders,
            jpegCount=prof.jpeg,
            ofaCount=prof.ofa,
            memorySizeMB=prof.memory_mib,
            name=f"MIG {prof.name}",
        )

    def nvmlDeviceGetGpuInstances(self, handle: GpuHandle, profile_id: int, out: Any, count_ref: Any) -> int:
        self._enter("nvmlDeviceGetGpuInstances")
        gpu = self._gpu(handle)
        prof = self._gi_profile(gpu, profile_id)
        found = [gi for gi in self._sim(self.sim.gpu_instances, gpu.index) if gi.profile == prof.name]
        if len(found) > len(out):
            raise self._err(real.NVML_ERROR_INSUFFICIENT_SIZE)
        for k, gi in enumerate(found):
            out[k] = self._pointer(GiHandle(gpu.uuid, gi.gi_id), real.c_nvmlGpuInstance_t)
        _deref(count_ref).value = len(found)
        return int(real.NVML_SUCCESS)

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, handle: GpuHandle, profile_id: int, placement: Any) -> GiHandle:
        self._enter("nvmlDeviceCreateGpuInstanceWithPlacement")
        gpu = self._gpu(handle)
        prof = self._gi_profile(gpu, profile_id)
        where = _deref(placement)
        if where.size != prof.memory_slices:
            raise self._err(real.NVML_ERROR_INVALID_ARGUMENT)
        gi_id = self._sim(self.sim.create_gpu_instance, gpu.index, profile=prof.name, start=where.start)
        return GiHandle(gpu.uuid, gi_id)

    def nvmlGpuInstanceDestroy(self, gi: Any) -> int:
        self._enter("nvmlGpuInstanceDestroy")
        gpu, inst = self._gi(gi)
        if inst.compute_instances:
            raise self._err(real.NVML_ERROR_IN_USE)
        self._sim(self.sim.destroy_gpu_instance, gpu.index, inst.gi_id)
        return int(real.NVML_SUCCESS)

    def _ci_slices(self, prof: catalog.MigProfile, ci_profile: int) -> int:
        """Compute slices of a CI profile the GPU instance offers (a 4-slice one has no 3-slice
        CI, as NVIDIA's go-nvml mocks list them); NOT_SUPPORTED otherwise."""
        slices = CI_PROFILE_SLICES.get(ci_profile)
        if slices is None or slices > prof.gi_slices or (prof.gi_slices, slices) == (4, 3):
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)
        return slices

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, gi: Any, profile: int, eng: int, version: int = 2) -> Any:
        self._enter("nvmlGpuInstanceGetComputeInstanceProfileInfo")
        gpu, inst = self._gi(gi)
        prof = self._model(gpu).profile(inst.profile)
        slices = self._ci_slices(prof, profile)
        return types.SimpleNamespace(
            id=profile,
            sliceCount=slices,
            instanceCount=prof.gi_slices // slices,
            multiprocessorCount=prof.multiprocessors * slices // prof.gi_slices,
        )

    def nvmlGpuInstanceCreateComputeInstance(self, gi: Any, profile_id: int) -> CiHandle:
        self._enter("nvmlGpuInstanceCreateComputeInstance")
        gpu, inst = self._gi(gi)
        slices = self._ci_slices(self._model(gpu).profile(inst.profile), profile_id)
        # The driver places it (no placement given); the sim picks the first free legal start.
        ci_id = self._sim(self.sim.create_compute_instance, gpu.index, gi_id=inst.gi_id, slices=slices)
        return CiHandle(gpu.uuid, inst.gi_id, ci_id)

    def nvmlGpuInstanceGetComputeInstances(self, gi: Any, profile_id: int, out: Any, count_ref: Any) -> int:
        self._enter("nvmlGpuInstanceGetComputeInstances")
        gpu, inst = self._gi(gi)
        found = [ci for ci in inst.compute_instances if CI_PROFILE_SLICES.get(profile_id) == ci.slices]
        for k, ci in enumerate(found):
            out[k] = self._pointer(CiHandle(gpu.uuid, inst.gi_id, ci.ci_id), real.c_nvmlComputeInstance_t)
        _deref(count_ref).value = len(found)
        return int(real.NVML_SUCCESS)

    def _ci(self, handle: Any) -> tuple[Gpu, Any, Any]:
        ci = self._resolve(handle)
        gpu, inst = self._gi(GiHandle(ci.parent_uuid, ci.gi_id))
        for c in inst.compute_instances:
            if c.ci_id == ci.ci_id:
                return gpu, inst, c
        raise self._err(real.NVML_ERROR_NOT_FOUND)

    def nvmlComputeInstanceGetInfo(self, handle: Any) -> Any:
        self._enter("nvmlComputeInstanceGetInfo")
        gpu, inst, ci = self._ci(handle)
        profile = next(p for p, n in CI_PROFILE_SLICES.items() if n == ci.slices)
        return types.SimpleNamespace(
            device=GpuHandle(gpu.uuid),
            gpuInstance=GiHandle(gpu.uuid, inst.gi_id),
            id=ci.ci_id,
            profileId=profile,
            placement=types.SimpleNamespace(start=0, size=ci.slices),
        )

    def nvmlComputeInstanceDestroy(self, handle: Any) -> int:
        self._enter("nvmlComputeInstanceDestroy")
        gpu, inst, ci = self._ci(handle)
        self._sim(self.sim.destroy_compute_instance, gpu.index, gi_id=inst.gi_id, ci_id=ci.ci_id)
        return int(real.NVML_SUCCESS)

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

    def _processes(self, handle: GpuHandle | MigHandle, mps: bool) -> list[Any]:
        """The sim's processes on the device behind ``handle`` (a MIG handle: that GPU instance's)."""
        if isinstance(handle, MigHandle):
            parent, uuid = self._gpu(GpuHandle(handle.parent_uuid)), self._mig(handle).uuid
        else:
            parent = self._gpu(handle)
            uuid = parent.uuid
        return [
            types.SimpleNamespace(
                pid=p.pid,
                usedGpuMemory=None if p.used_memory_mib is None else p.used_memory_mib * MIB,
                gpuInstanceId=0xFFFFFFFF,
                computeInstanceId=0xFFFFFFFF,
            )
            for p in self.sim.processes(parent.uuid)
            if p.device_uuid == uuid and p.mps == mps
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: GpuHandle | MigHandle) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        return self._processes(handle, mps=False)

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: GpuHandle | MigHandle) -> list[Any]:
        self._enter("nvmlDeviceGetMPSComputeRunningProcesses")
        return self._processes(handle, mps=True)

    def nvmlDeviceGetProcessUtilization(self, handle: GpuHandle, since_us: int) -> list[Any]:
        """As the driver: NOT_SUPPORTED on a MIG device, NOT_FOUND when no process has a sample."""
        self._enter("nvmlDeviceGetProcessUtilization")
        gpu = self._gpu(handle)
        stamp = max(since_us + 1, int(time.time() * 1_000_000))
        samples = [
            types.SimpleNamespace(pid=p.pid, timeStamp=stamp, smUtil=p.sm_percent, memUtil=0, encUtil=0, decUtil=0)
            for p in self.sim.processes(gpu.uuid)
            if p.sm_percent is not None
        ]
        if not samples:
            raise self._err(real.NVML_ERROR_NOT_FOUND)
        return samples

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

    unsupported_fields: frozenset[int] = frozenset()
    """Field ids this driver answers NOT_SUPPORTED for, field by field, whatever the GPU."""

    def nvmlDeviceGetFieldValues(self, handle: GpuHandle, field_ids: list[int | tuple[int, int]]) -> Any:
        """An array of c_nvmlFieldValue_t as pynvml returns it, one per requested id (an int, or a
        (fieldId, scopeId) pair as pynvml takes them), each with its own nvmlReturn as NVML fills
        it: the call succeeds while a field the GPU lacks answers NOT_SUPPORTED (nvml.h: "you must
        check the nvmlReturn field of each value"). Memory temperature, and on an NVLink5 GPU
        (Blackwell and later) the NVLink error counters and BERs per link (scopeId = link) or over
        all links (scopeId UINT_MAX), read from the simulator."""
        self._enter("nvmlDeviceGetFieldValues")
        gpu = self._gpu(handle)
        t = self._t(handle)
        values = (real.c_nvmlFieldValue_t * len(field_ids))()
        for out, wanted in zip(values, field_ids, strict=True):
            field_id, scope = wanted if isinstance(wanted, tuple) else (wanted, 0)
            out.fieldId, out.scopeId = field_id, scope
            out.timestamp = 1_764_720_000_000_000
            if field_id in self.unsupported_fields:
                out.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
            elif field_id == real.NVML_FI_DEV_MEMORY_TEMP:
                out.valueType, out.nvmlReturn = real.NVML_VALUE_TYPE_UNSIGNED_INT, real.NVML_SUCCESS
                out.value.uiVal = int(t.memory_temperature_c)
            elif field_id in NVLINK5_FIELDS and nvlink5(gpu.compute_capability):
                found = self._nvlink5_value(handle, NVLINK5_FIELDS[field_id], scope)
                out.valueType = real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                out.nvmlReturn = real.NVML_SUCCESS if found is not None else real.NVML_ERROR_INVALID_ARGUMENT
                out.value.ullVal = found or 0
            else:
                out.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
        return values

    def _nvlink5_value(self, handle: GpuHandle, name: str, scope: int) -> int | None:
        """One NVLink5 field of one link, or over all links (counters summed, the GPU's aggregate
        BER); None for a link the GPU does not have up."""
        r = self._readings(handle)
        if scope == ALL_LINKS:
            if name.endswith("_ber"):
                ber = r.nvlink_symbol_ber if name == "symbol_ber" else r.nvlink_effective_ber
                return ber.raw if ber is not None else None
            return sum(getattr(c, name) or 0 for c in r.nvlink)
        found = next((c for c in r.nvlink if c.link == scope), None)
        if found is None:
            return None
        value = getattr(found, name)
        return value.raw if isinstance(value, Ber) else value

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
        return (
            t.remapped_rows_correctable,
            t.remapped_rows_uncorrectable,
            t.row_remap_pending,
            t.row_remap_failure,
        )

    def _readings(self, handle: GpuHandle) -> Any:
        return self.sim.health_readings(self._gpu(handle).uuid)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: GpuHandle) -> int:
        """NOT_SUPPORTED unless the sim was given page-retirement readings (Ampere and newer GPUs
        remap rows instead and answer NOT_SUPPORTED)."""
        self._enter("nvmlDeviceGetRetiredPagesPendingStatus")
        pending = self._readings(handle).retired_pages_pending
        if pending is None:
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)
        return real.NVML_FEATURE_ENABLED if pending else real.NVML_FEATURE_DISABLED

    def nvmlDeviceGetRetiredPages(self, handle: GpuHandle, cause: int) -> list[int]:
        """One made-up page address per retired page of that cause, as the real call lists them."""
        self._enter("nvmlDeviceGetRetiredPages")
        r = self._readings(handle)
        count = r.retired_pages_sbe if cause == real.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS else None
        if cause == real.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR:
            count = r.retired_pages_dbe
        if count is None:
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)
        return [0x1000 * (i + 1) for i in range(count)]

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: GpuHandle, link: int, counter: int) -> int:
        """Replay, recovery, CRC flit and CRC data counters of an active link (the link is checked
        as nvmlDeviceGetNvLinkState checks it). Not supported on NVLink5 GPUs, Blackwell and later
        (nvml.h: the NVML_NVLINK_ERROR_DL_* counters are "unsupported for Blackwell+")."""
        self._enter("nvmlDeviceGetNvLinkErrorCounter")
        if nvlink5(self._gpu(handle).compute_capability):
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)
        found = next((c for c in self._readings(handle).nvlink if c.link == link), None)
        if found is None:
            raise self._err(real.NVML_ERROR_INVALID_ARGUMENT)
        kinds = {
            real.NVML_NVLINK_ERROR_DL_REPLAY: found.replay,
            real.NVML_NVLINK_ERROR_DL_RECOVERY: found.recovery,
            real.NVML_NVLINK_ERROR_DL_CRC_FLIT: found.crc_flit,
            real.NVML_NVLINK_ERROR_DL_CRC_DATA: found.crc_data,
        }
        if counter not in kinds:
            raise self._err(real.NVML_ERROR_INVALID_ARGUMENT)
        return int(kinds[counter] or 0)

    # ---- repair: persistence mode around a reset, NVLink fabric state in the burn-in ---------

    def nvmlDeviceGetPersistenceMode(self, handle: GpuHandle) -> int:
        self._enter("nvmlDeviceGetPersistenceMode")
        return self.persistence.get(self._gpu(handle).uuid, real.NVML_FEATURE_ENABLED)

    def nvmlDeviceSetPersistenceMode(self, handle: GpuHandle, mode: int) -> None:
        self._enter("nvmlDeviceSetPersistenceMode")
        gpu = self._gpu(handle)
        if mode not in (real.NVML_FEATURE_ENABLED, real.NVML_FEATURE_DISABLED):
            raise self._err(real.NVML_ERROR_INVALID_ARGUMENT)
        self.persistence[gpu.uuid] = mode
        self.persistence_log.append((gpu.index, mode))

    def nvmlDeviceGetGpuFabricInfo(self, handle: GpuHandle, ref: Any) -> int:
        """Fills the caller's c_nvmlGpuFabricInfo_t on Hopper-or-later GPUs on NVSwitch, as NVML
        documents the call; other GPUs are not part of a fabric (not supported)."""
        self._enter("nvmlDeviceGetGpuFabricInfo")
        gpu = self._gpu(handle)
        if gpu.compute_capability[0] < 9 or not self._switch_links(gpu):
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)
        answers = self.fabric.get(gpu.index) or [(real.NVML_GPU_FABRIC_STATE_COMPLETED, real.NVML_SUCCESS)]
        state, status = answers.pop(0) if len(answers) > 1 else answers[0]
        info = _deref(ref)
        info.state, info.status = state, status
        return int(real.NVML_SUCCESS)

    # ---- events ------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> _EventSet:
        self._enter("nvmlEventSetCreate")
        es = _EventSet(self)
        with self._lock:
            self._event_sets.append(es)
        self.sim.add_listener(es.on_event)
        return es

    def _live(self, es: _EventSet, name: str) -> None:
        """A set freed (or torn down with the library) is no longer a valid argument. The real
        library would read freed memory (or free it twice): each such call is kept in ``stale``."""
        if es.freed:
            self.stale.append(name)
            raise self._err(real.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceRegisterEvents(self, handle: GpuHandle, mask: int, es: _EventSet) -> None:
        self._enter("nvmlDeviceRegisterEvents")
        self._live(es, "nvmlDeviceRegisterEvents")
        self._gpu(handle)
        es.registered[handle.uuid] = es.registered.get(handle.uuid, 0) | mask

    def nvmlEventSetWait(self, es: _EventSet, timeout_ms: int) -> Any:
        self._enter("nvmlEventSetWait")
        self._live(es, "nvmlEventSetWait")
        try:
            return es.pending.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise self._err(real.NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetFree(self, es: _EventSet) -> None:
        self._enter("nvmlEventSetFree")
        self._live(es, "nvmlEventSetFree")
        es.freed = True
        self.sim.remove_listener(es.on_event)
        with self._lock:
            self._event_sets.remove(es)


class _EventSet:
    """Collects XID events for registered GPUs, as NVML's event set does."""

    def __init__(self, fake: FakeNvml) -> None:
        self.fake = fake
        self.freed = False
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


def nvml_over(sim: SimBackend, **kwargs: Any) -> NvmlBackend:
    """An NvmlBackend whose pynvml is the fake answering from ``sim`` (fast loss/recovery probes)."""
    return NvmlBackend(nvml=FakeNvml(sim, **kwargs), probe_interval=0.2)
