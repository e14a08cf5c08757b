"""``flags``: how the device plugin and feature discovery behave, and the strategies they choose from."""

from __future__ import annotations

import enum
from typing import Any

from gpuchain.api.config.v1.durations import duration_value
from gpuchain.api.config.v1.section import Section
from gpuchain.common.schema import define, spec


class MigStrategy(enum.StrEnum):
    """How MIG devices become resources: ignore MIG, one uniform resource, or one per profile."""

    NONE = "none"
    SINGLE = "single"
    MIXED = "mixed"


class DeviceListStrategy(enum.StrEnum):
    """How Allocate tells the container runtime which devices to inject."""

    ENVVAR = "envvar"
    VOLUME_MOUNTS = "volume-mounts"
    CDI_ANNOTATIONS = "cdi-annotations"
    CDI_CRI = "cdi-cri"


class DeviceIdStrategy(enum.StrEnum):
    """Whether the runtime gets devices by UUID or by index."""

    UUID = "uuid"
    INDEX = "index"


class AllocationPolicy(enum.StrEnum):
    """For shared (replicated) devices: spread requests over GPUs, or fill one GPU first."""

    DISTRIBUTED = "distributed"
    PACKED = "packed"


class DeviceDiscoveryStrategy(enum.StrEnum):
    """How NVIDIA's components find devices; gpuchain reads them through its GPU backend either way.

    ``vfio`` is for feature discovery only (NVIDIA's plugin refuses it)."""

    AUTO = "auto"
    NVML = "nvml"
    TEGRA = "tegra"
    VFIO = "vfio"


def _string_or_list(v: Any) -> Any:
    """NVIDIA accepts one strategy as a plain string or several as a list."""
    choices = ", ".join(s.value for s in DeviceListStrategy)
    if isinstance(v, str):
        v = [s.strip() for s in v.split(",") if s.strip()]
    if not isinstance(v, list | tuple):
        raise ValueError(f"give one strategy or a list of them ({choices})")
    if not v:
        raise ValueError(f"give at least one of {choices}")
    for item in v:
        if not isinstance(item, str):
            raise ValueError(f"each entry must be one of {choices}, not {item!r}")
    return tuple(dict.fromkeys(v))


@define
class PluginFlags(Section):
    """``flags.plugin``: how Allocate answers."""

    pass_device_specs: bool = spec(default=False, key="passDeviceSpecs")
    device_list_strategy: tuple[DeviceListStrategy, ...] = spec(
        default=(DeviceListStrategy.ENVVAR,), key="deviceListStrategy", before=_string_or_list
    )
    device_id_strategy: DeviceIdStrategy = spec(default=DeviceIdStrategy.UUID, key="deviceIDStrategy")
    cdi_annotation_prefix: str = spec(default="cdi.k8s.io/", key="cdiAnnotationPrefix")
    nvidia_ctk_path: str = spec(default="/usr/bin/nvidia-ctk", key="nvidiaCTKPath")
    container_driver_root: str = spec(default="/driver-root", key="containerDriverRoot")
    shared_devices_allocation_policy: AllocationPolicy = spec(
        default=AllocationPolicy.DISTRIBUTED, key="sharedDevicesAllocationPolicy"
    )


@define
class GfdFlags(Section):
    """``flags.gfd``: read by feature discovery; accepted here so one file serves both.

    ``sleepInterval`` is held in nanoseconds, as NVIDIA's Duration: a string is a Go duration or
    ``infinite``, a bare number counts nanoseconds (``5`` is 5 ns, not 5 s).
    """

    oneshot: bool = False
    no_timestamp: bool = spec(default=False, key="noTimestamp")
    sleep_interval: int = spec(default=60 * 10**9, key="sleepInterval", before=duration_value)
    output_file: str = spec(default="/etc/kubernetes/node-feature-discovery/features.d/gfd", key="outputFile")
    machine_type_file: str = spec(default="/sys/class/dmi/id/product_name", key="machineTypeFile")


@define
class Flags(Section):
    """``flags``: behaviour shared by the plugin and feature discovery."""

    mig_strategy: MigStrategy = spec(default=MigStrategy.NONE, key="migStrategy")
    fail_on_init_error: bool = spec(default=True, key="failOnInitError")
    nvidia_driver_root: str = spec(default="/", key="nvidiaDriverRoot")
    nvidia_dev_root: str | None = spec(default=None, key="nvidiaDevRoot")
    mps_root: str | None = spec(default=None, key="mpsRoot")
    gdrcopy_enabled: bool = spec(default=False, key="gdrcopyEnabled")
    gds_enabled: bool = spec(default=False, key="gdsEnabled")
    mofed_enabled: bool = spec(default=False, key="mofedEnabled")
    use_node_feature_api: bool = spec(default=False, key="useNodeFeatureAPI")
    device_discovery_strategy: DeviceDiscoveryStrategy = spec(
        default=DeviceDiscoveryStrategy.AUTO, key="deviceDiscoveryStrategy"
    )
    plugin: PluginFlags = PluginFlags()
    gfd: GfdFlags = GfdFlags()

    @property
    def dev_root(self) -> str:
        """Where the driver's ``/dev`` is on the node: ``nvidiaDevRoot``, else ``nvidiaDriverRoot``."""
        return self.nvidia_dev_root or self.nvidia_driver_root
