"""MIG mode and GPU/compute instances, read and changed through NVML's MIG API (the MIG manager's)."""

from __future__ import annotations

import ctypes
from typing import Any

from gpuchain.gpu import catalog
from gpuchain.gpu.backend import ComputeInstance, GpuInstance, MigMode
from gpuchain.gpu.errors import NotFoundError, NotSupportedError
from gpuchain.gpu.nvml.queries import Queries
from gpuchain.gpu.nvml.session import nvml_operation


class MigWrites(Queries):
    """MIG mode per GPU and its GPU and compute instances, created and destroyed as mig-parted does."""

    def _mig_handle(self, gpu_index: int) -> tuple[Any, catalog.GpuModel]:
        h = self._call(self._nvml.nvmlDeviceGetHandleByIndex, gpu_index)
        name = self._call(self._nvml.nvmlDeviceGetName, h)
        pci = self._call(self._nvml.nvmlDeviceGetPciInfo, h)
        known = catalog.model_for_name(name, int(pci.pciDeviceId))
        if known is None or not known.mig_capable:
            raise NotSupportedError(f"GPU {gpu_index} ({name}) has no MIG profiles in the catalog")
        return h, known

    @nvml_operation
    def mig_mode(self, gpu_index: int) -> MigMode:
        n = self._nvml
        h = self._call(n.nvmlDeviceGetHandleByIndex, gpu_index)
        current, pending = self._call(n.nvmlDeviceGetMigMode, h)
        return MigMode(current == n.NVML_DEVICE_MIG_ENABLE, pending == n.NVML_DEVICE_MIG_ENABLE)

    @nvml_operation
    def set_mig_mode(self, gpu_index: int, enabled: bool) -> MigMode:
        """nvmlDeviceSetMigMode; the mode read back afterwards says whether a reset is pending."""
        n = self._nvml
        h = self._call(n.nvmlDeviceGetHandleByIndex, gpu_index)
        self._call(n.nvmlDeviceSetMigMode, h, n.NVML_DEVICE_MIG_ENABLE if enabled else n.NVML_DEVICE_MIG_DISABLE)
        return self.mig_mode(gpu_index)

    @nvml_operation
    def gpu_instances(self, gpu_index: int) -> tuple[GpuInstance, ...]:
        n = self._nvml
        h, known = self._mig_handle(gpu_index)
        out: list[GpuInstance] = []
        for name, info in self._gi_profiles(h, known).items():
            handles = (n.c_nvmlGpuInstance_t * int(info.instanceCount))()
            count = ctypes.c_uint(0)
            self._call(n.nvmlDeviceGetGpuInstances, h, info.id, handles, ctypes.byref(count))
            for k in range(count.value):
                gi_info = self._call(n.nvmlGpuInstanceGetInfo, handles[k])
                cis = tuple(sorted((ci for _, ci in self._compute_instances(handles[k])), key=lambda c: c.ci_id))
                out.append(
                    GpuInstance(
                        gi_id=int(gi_info.id), profile=name, start=int(gi_info.placement.start), compute_instances=cis
                    )
                )
        return tuple(sorted(out, key=lambda gi: gi.start))

    def _compute_instances(self, gi: Any) -> list[tuple[Any, ComputeInstance]]:
        """Every compute instance of a GPU instance, with its handle, over all CI profiles."""
        n = self._nvml
        out: list[tuple[Any, ComputeInstance]] = []
        for prof in range(n.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                info = self._call(
                    n.nvmlGpuInstanceGetComputeInstanceProfileInfo,
                    gi,
                    prof,
                    n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                )
            except (NotSupportedError, NotFoundError):
                continue
            handles = (n.c_nvmlComputeInstance_t * int(info.instanceCount))()
            count = ctypes.c_uint(0)
            self._call(n.nvmlGpuInstanceGetComputeInstances, gi, info.id, handles, ctypes.byref(count))
            for k in range(count.value):
                ci_info = self._call(n.nvmlComputeInstanceGetInfo, handles[k])
                out.append((handles[k], ComputeInstance(int(ci_info.id), int(info.sliceCount))))
        return out

    @nvml_operation
    def create_gpu_instance(self, gpu_index: int, *, profile: str, start: int) -> int:
        n = self._nvml
        h, known = self._mig_handle(gpu_index)
        prof = known.profile(profile)
        info = self._call(n.nvmlDeviceGetGpuInstanceProfileInfo, h, prof.nvml_gi_profile_id)
        placement = n.c_nvmlGpuInstancePlacement_t(start, prof.memory_slices)
        gi = self._call(n.nvmlDeviceCreateGpuInstanceWithPlacement, h, info.id, ctypes.byref(placement))
        return int(self._call(n.nvmlGpuInstanceGetInfo, gi).id)

    @nvml_operation
    def create_compute_instance(self, gpu_index: int, *, gi_id: int, slices: int | None = None) -> int:
        """nvmlGpuInstanceCreateComputeInstance with the CI profile of ``slices`` (None: the GPU
        instance's full size), placed by the driver, as mig-parted creates them."""
        n = self._nvml
        h, known = self._mig_handle(gpu_index)
        gi = self._call(n.nvmlDeviceGetGpuInstanceById, h, gi_id)
        profile_id = int(self._call(n.nvmlGpuInstanceGetInfo, gi).profileId)
        names = self._profile_names(h, known)
        if profile_id not in names:
            raise NotFoundError(f"GPU {gpu_index} GPU instance {gi_id}: unknown profile id {profile_id}")
        prof = known.profile(names[profile_id])
        ci_profile = prof.nvml_ci_profile_id if slices is None else catalog.nvml_ci_profile_id(slices)
        info = self._call(
            n.nvmlGpuInstanceGetComputeInstanceProfileInfo,
            gi,
            ci_profile,
            n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
        )
        ci = self._call(n.nvmlGpuInstanceCreateComputeInstance, gi, info.id)
        return int(self._call(n.nvmlComputeInstanceGetInfo, ci).id)

    @nvml_operation
    def destroy_gpu_instance(self, gpu_index: int, gi_id: int) -> None:
        n = self._nvml
        h, _ = self._mig_handle(gpu_index)
        gi = self._call(n.nvmlDeviceGetGpuInstanceById, h, gi_id)
        for handle, _ci in self._compute_instances(gi):
            self._call(n.nvmlComputeInstanceDestroy, handle)
        self._call(n.nvmlGpuInstanceDestroy, gi)
