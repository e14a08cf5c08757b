"""What the driver says the node has: GPUs, MIG devices and how the GPUs are linked (``inventory``)."""

from __future__ import annotations

import ctypes
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuchain.gpu import catalog
from gpuchain.gpu.errors import GpuError, GpuLostError, NotFoundError, NotSupportedError, ReleasedError
from gpuchain.gpu.model import DriverInfo, Gpu, GpuLink, Inventory, MigDevice, TopologyLevel
from gpuchain.gpu.nvml.session import Session, as_pair, as_text, nvml_operation

log = logging.getLogger(__name__)

MIB = 1024 * 1024
SYSFS_PCI = Path("/sys/bus/pci/devices")


def _cuda_version(value: int) -> str:
    """NVML encodes CUDA 12.8 as 12080."""
    return f"{value // 1000}.{(value % 1000) // 10}"


class Queries(Session):
    """The inventory: every GPU with its MIG devices, NUMA node and PCI class, and the links between them."""

    _sysfs: Path
    """Where a GPU's PCI attributes are read when NVML lacks them (``/sys/bus/pci/devices``)."""

    @nvml_operation
    def inventory(self) -> Inventory:
        n = self._nvml
        driver = DriverInfo(
            self._call(n.nvmlSystemGetDriverVersion), _cuda_version(self._call(n.nvmlSystemGetCudaDriverVersion))
        )
        gpus: list[Gpu] = []
        handles: dict[int, Any] = {}
        for index in range(self._call(n.nvmlDeviceGetCount)):
            try:
                handle = self._call(n.nvmlDeviceGetHandleByIndex, index)
                gpus.append(self._gpu(index, handle))
            except GpuLostError as exc:
                log.warning("GPU %d left out of the inventory: %s", index, exc)
                continue
            handles[index] = handle
        return Inventory(driver, tuple(gpus), self._links(handles, {g.index: g for g in gpus}))

    def _gpu(self, index: int, h: Any) -> Gpu:
        n = self._nvml
        pci = self._call(n.nvmlDeviceGetPciInfo, h)
        bus_id = as_text(pci.busId)
        name = self._call(n.nvmlDeviceGetName, h)
        known = catalog.model_for_name(name, int(pci.pciDeviceId))
        attrs = self._optional(n.nvmlDeviceGetAttributes, h)
        sms = attrs.multiprocessorCount if attrs is not None else (known.multiprocessors if known else 0)
        modes = self._optional(n.nvmlDeviceGetMigMode, h)
        mig_enabled = bool(modes and modes[0] == n.NVML_DEVICE_MIG_ENABLE)
        uuid = self._call(n.nvmlDeviceGetUUID, h)
        return Gpu(
            index=index,
            uuid=uuid,
            name=name,
            pci_bus_id=bus_id,
            pci_device_id=int(pci.pciDeviceId),
            memory_mib=int(self._call(n.nvmlDeviceGetMemoryInfo, h).total // MIB),
            compute_capability=as_pair(self._call(n.nvmlDeviceGetCudaComputeCapability, h)),
            numa_node=self._numa_node(h, bus_id),
            multiprocessors=int(sms),
            mig_capable=modes is not None,
            mig_enabled=mig_enabled,
            mig_devices=self._mig_devices(index, uuid, h, known) if mig_enabled else (),
            minor_number=int(self._call(n.nvmlDeviceGetMinorNumber, h)),
            pci_class=self._pci_class(h, bus_id),
            vgpu=self._optional(n.nvmlDeviceGetVirtualizationMode, h) == n.NVML_GPU_VIRTUALIZATION_MODE_VGPU,
        )

    def _numa_node(self, h: Any, bus_id: str) -> int | None:
        """NVML's NUMA id where the driver has it, else sysfs as the kubelet plugin reads it."""
        node = self._optional(self._nvml.nvmlDeviceGetNumaNodeId, h)
        if node is None:
            node = self._sysfs_int(bus_id, "numa_node")
        return node if node is not None and node >= 0 else None

    def _pci_class(self, h: Any, bus_id: str) -> int | None:
        """The PCI class code: NVML's extended PCI info (R550 and later), else sysfs as GFD reads it.

        NVML gives base class and subclass only; the programming interface byte is 0 on every
        NVIDIA GPU, so the two sources agree (0x030200 for a 3D controller).
        """
        n = self._nvml
        info = n.nvmlPciInfoExt_v1_t()
        info.version = n.nvmlPciInfoExt_v1
        try:
            self._call(n.nvmlDeviceGetPciInfoExt, h, ctypes.byref(info))
        except (GpuLostError, ReleasedError):
            raise
        except GpuError:  # an older driver (function not found) or library: sysfs has it too
            return self._sysfs_int(bus_id, "class")
        return (int(info.baseClass) << 16) | (int(info.subClass) << 8)

    def _sysfs_int(self, bus_id: str, attribute: str) -> int | None:
        """An integer attribute of the GPU's PCI device in sysfs (``0x030200``, ``1``); None if unreadable.

        NVML's bus id has an 8-digit PCI domain, sysfs a 4-digit one (``0000:17:00.0``).
        """
        path = self._sysfs / bus_id.lower()[4:] / attribute
        try:
            return int(path.read_text().strip(), 0)
        except (OSError, ValueError):
            return None

    def _mig_devices(
        self, index: int, parent_uuid: str, h: Any, known: catalog.GpuModel | None
    ) -> tuple[MigDevice, ...]:
        n = self._nvml
        out: list[MigDevice] = []
        profile_names: dict[int, str] | None = None
        for slot in range(self._call(n.nvmlDeviceGetMaxMigDeviceCount, h)):
            try:
                m = self._call(n.nvmlDeviceGetMigDeviceHandleByIndex, h, slot)
            except NotFoundError:
                continue
            gi_id = int(self._call(n.nvmlDeviceGetGpuInstanceId, m))
            attrs = self._call(n.nvmlDeviceGetAttributes, m)
            gi = self._call(n.nvmlDeviceGetGpuInstanceById, h, gi_id)
            profile_id = int(self._call(n.nvmlGpuInstanceGetInfo, gi).profileId)
            if profile_names is None:
                profile_names = self._profile_names(h, known)
            if profile_id in profile_names:
                profile = profile_names[profile_id]
            else:
                gb = math.ceil(attrs.memorySizeMB / 1024)
                profile = f"{attrs.gpuInstanceSliceCount}g.{gb}gb"
            if int(attrs.computeInstanceSliceCount) != int(attrs.gpuInstanceSliceCount):
                profile = catalog.device_profile(profile, int(attrs.computeInstanceSliceCount))
            out.append(
                MigDevice(
                    uuid=self._call(n.nvmlDeviceGetUUID, m),
                    parent_index=index,
                    parent_uuid=parent_uuid,
                    index=slot,
                    profile=profile,
                    gi_id=gi_id,
                    ci_id=int(self._call(n.nvmlDeviceGetComputeInstanceId, m)),
                    memory_mib=int(attrs.memorySizeMB),
                    multiprocessors=int(attrs.multiprocessorCount),
                )
            )
        return tuple(out)

    def _gi_profiles(self, h: Any, known: catalog.GpuModel | None) -> dict[str, Any]:
        """NVML's profile info for each catalog profile the GPU offers, by catalog name.

        The id to create or list GPU instances with (``info.id``, the ID `nvidia-smi mig -lgip`
        prints) is not the NVML_GPU_INSTANCE_PROFILE_* constant that asks for it, so every use
        goes through this lookup. Empty while MIG mode is off (NVML answers not supported).
        """
        infos: dict[str, Any] = {}
        for prof in known.mig_profiles if known is not None else ():
            try:
                info = self._call(self._nvml.nvmlDeviceGetGpuInstanceProfileInfo, h, prof.nvml_gi_profile_id)
            except (NotSupportedError, NotFoundError):
                continue
            infos[prof.name] = info
        return infos

    def _profile_names(self, h: Any, known: catalog.GpuModel | None) -> dict[int, str]:
        return {int(info.id): name for name, info in self._gi_profiles(h, known).items()}

    def _links(self, handles: dict[int, Any], gpus: dict[int, Gpu]) -> tuple[GpuLink, ...]:
        n = self._nvml
        direct: dict[tuple[int, int], int] = {}
        to_switch: dict[int, int] = {}
        by_bus = {g.pci_bus_id.upper(): i for i, g in gpus.items()}
        for i, h in handles.items():
            switch_links = 0
            for link in self._active_links(h):
                kind = self._optional(n.nvmlDeviceGetNvLinkRemoteDeviceType, h, link)
                if kind == n.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                    switch_links += 1
                elif kind == n.NVML_NVLINK_DEVICE_TYPE_GPU:
                    peer = by_bus.get(as_text(self._call(n.nvmlDeviceGetNvLinkRemotePciInfo, h, link).busId).upper())
                    if peer is not None:
                        key = (min(i, peer), max(i, peer))
                        direct[key] = direct.get(key, 0) + 1
            to_switch[i] = switch_links
        links = []
        order = sorted(handles)
        for pos, a in enumerate(order):
            for b in order[pos + 1 :]:
                level = TopologyLevel(int(self._call(n.nvmlDeviceGetTopologyCommonAncestor, handles[a], handles[b])))
                # Direct links are seen from both ends; NVSwitch lanes are shared by every pair.
                lanes = direct.get((a, b), 0) // 2
                if to_switch[a] and to_switch[b]:
                    status = self._optional(
                        n.nvmlDeviceGetP2PStatus, handles[a], handles[b], n.NVML_P2P_CAPS_INDEX_NVLINK
                    )
                    if status == n.NVML_P2P_STATUS_OK:
                        lanes += min(to_switch[a], to_switch[b])
                links.append(GpuLink(a=a, b=b, level=level, nvlinks=lanes))
        return tuple(links)

    def _active_links(self, h: Any) -> Iterator[int]:
        """The GPU's NVLinks that are up, by index, up to the first one NVML does not know."""
        n = self._nvml
        for link in range(n.NVML_NVLINK_MAX_LINKS):
            try:
                if self._call(n.nvmlDeviceGetNvLinkState, h, link) != n.NVML_FEATURE_ENABLED:
                    continue
            except (NotSupportedError, NotFoundError):
                return
            yield link
