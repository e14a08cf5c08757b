"""The device plugin's config file, compatible with NVIDIA's device plugin config v1.

Existing ConfigMaps written for NVIDIA's plugin load unchanged: same keys (``version``, ``flags``,
``resources``, ``sharing``), same defaults, same environment variables overriding the file
(precedence: environment, then file, then default). Unknown keys are rejected so a typo fails
start with the field path instead of being silently ignored.

gpuchain adds one optional top-level section, ``health`` (XIDs to ignore, the recovery quiet
period); NVIDIA's plugin has no such section because it never recovers devices.

Other layers use this module too: feature discovery reads ``Config`` to compute the same
resource names and replica counts as the plugin (see ``gpuchain.deviceplugin.resources``).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpuchain.common.labels import DEVICE_PLUGIN_CONFIG
from gpuchain.common.yamlfile import ConfigFileError, load_yaml_file, load_yaml_model
from gpuchain.gpu.health import DEFAULT_QUIET_SECONDS
from gpuchain.gpu.xid import HealthPolicy, policy_from_env

RESOURCE_PREFIX = "nvidia.com/"


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


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class PluginFlags(_Model):
    """``flags.plugin``: how Allocate answers."""

    pass_device_specs: bool = Field(False, alias="passDeviceSpecs")
    device_list_strategy: tuple[DeviceListStrategy, ...] = Field(
        (DeviceListStrategy.ENVVAR,), alias="deviceListStrategy"
    )
    device_id_strategy: DeviceIdStrategy = Field(DeviceIdStrategy.UUID, alias="deviceIDStrategy")
    cdi_annotation_prefix: str = Field("cdi.k8s.io/", alias="cdiAnnotationPrefix")
    nvidia_ctk_path: str = Field("/usr/bin/nvidia-ctk", alias="nvidiaCTKPath")
    container_driver_root: str = Field("/driver-root", alias="containerDriverRoot")
    shared_devices_allocation_policy: AllocationPolicy = Field(
        AllocationPolicy.DISTRIBUTED, alias="sharedDevicesAllocationPolicy"
    )

    @field_validator("device_list_strategy", mode="before")
    @classmethod
    def _string_or_list(cls, v: Any) -> Any:
        """NVIDIA accepts one strategy as a plain string or several as a list."""
        if isinstance(v, str):
            v = [s.strip() for s in v.split(",") if s.strip()]
        if isinstance(v, list | tuple):
            if not v:
                raise ValueError("give at least one of envvar, volume-mounts, cdi-annotations, cdi-cri")
            return tuple(dict.fromkeys(v))
        return v


class GfdFlags(_Model):
    """``flags.gfd``: read by feature discovery; accepted here so one file serves both."""

    oneshot: bool = False
    no_timestamp: bool = Field(False, alias="noTimestamp")
    sleep_interval: str | int = Field("60s", alias="sleepInterval")
    output_file: str = Field("/etc/kubernetes/node-feature-discovery/features.d/gfd", alias="outputFile")
    machine_type_file: str = Field("/sys/class/dmi/id/product_name", alias="machineTypeFile")


class Flags(_Model):
    """``flags``: behaviour shared by the plugin and feature discovery."""

    mig_strategy: MigStrategy = Field(MigStrategy.NONE, alias="migStrategy")
    fail_on_init_error: bool = Field(True, alias="failOnInitError")
    nvidia_driver_root: str = Field("/", alias="nvidiaDriverRoot")
    nvidia_dev_root: str | None = Field(None, alias="nvidiaDevRoot")
    mps_root: str | None = Field(None, alias="mpsRoot")
    gds_enabled: bool = Field(False, alias="gdsEnabled")
    mofed_enabled: bool = Field(False, alias="mofedEnabled")
    use_node_feature_api: bool = Field(False, alias="useNodeFeatureAPI")
    device_discovery_strategy: str = Field("auto", alias="deviceDiscoveryStrategy")
    plugin: PluginFlags = PluginFlags()
    gfd: GfdFlags = GfdFlags()


class ResourcePattern(_Model):
    """``resources.gpus[]`` / ``resources.mig[]``: devices whose product (or MIG profile) matches
    the glob ``pattern`` are announced as ``name`` instead of the default name."""

    pattern: str
    name: str

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        return _check_resource_name(v)


class Resources(_Model):
    gpus: tuple[ResourcePattern, ...] = ()
    mig: tuple[ResourcePattern, ...] = ()


DeviceSelector = Literal["all"] | Annotated[int, Field(ge=1)] | tuple[int | str, ...]


class ReplicatedResource(_Model):
    """``sharing.<kind>.resources[]``: announce each selected device of ``name`` ``replicas`` times."""

    name: str
    rename: str | None = None
    devices: DeviceSelector = "all"
    replicas: int = Field(ge=2)

    @field_validator("name", "rename")
    @classmethod
    def _valid_name(cls, v: str | None) -> str | None:
        return None if v is None else _check_resource_name(v)

    @field_validator("devices", mode="before")
    @classmethod
    def _list_to_tuple(cls, v: Any) -> Any:
        if isinstance(v, list):
            if not v:
                raise ValueError("an empty device list selects nothing; use 'all', a count or indexes/UUIDs")
            return tuple(v)
        return v


class ReplicatedResources(_Model):
    """``sharing.timeSlicing`` / ``sharing.mps``."""

    rename_by_default: bool = Field(False, alias="renameByDefault")
    fail_requests_greater_than_one: bool = Field(False, alias="failRequestsGreaterThanOne")
    resources: tuple[ReplicatedResource, ...] = ()

    @field_validator("resources")
    @classmethod
    def _unique_names(cls, v: tuple[ReplicatedResource, ...]) -> tuple[ReplicatedResource, ...]:
        seen: set[str] = set()
        for r in v:
            if r.name in seen:
                raise ValueError(f"resource {r.name} is listed twice; give each resource one entry")
            seen.add(r.name)
        return v


class Sharing(_Model):
    time_slicing: ReplicatedResources = Field(ReplicatedResources(), alias="timeSlicing")
    mps: ReplicatedResources | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Sharing:
        if self.time_slicing.resources and self.mps is not None and self.mps.resources:
            raise ValueError("timeSlicing and mps cannot both replicate resources; pick one")
        return self


class Health(_Model):
    """gpuchain extension: the XID policy and when a recovered GPU's devices become healthy again."""

    disabled: bool = False
    ignored_xids: tuple[int, ...] = Field((), alias="ignoredXids")
    enabled_xids: tuple[int, ...] = Field((), alias="enabledXids")
    recovery_quiet_seconds: float = Field(DEFAULT_QUIET_SECONDS, ge=0, alias="recoveryQuietSeconds")

    def policy(self, env: Mapping[str, str] | None = None) -> HealthPolicy:
        """The XID policy: defaults, then this section, then DP_*_HEALTHCHECKS from ``env``."""
        base = HealthPolicy(checks=not self.disabled).with_ignored(self.ignored_xids, self.enabled_xids)
        return policy_from_env(env or {}, base)


class Config(_Model):
    """The whole file. An empty file is a valid config with every default."""

    version: str = "v1"
    flags: Flags = Flags()
    resources: Resources = Resources()
    sharing: Sharing = Sharing()
    imex: dict[str, Any] | None = None
    health: Health = Health()

    @field_validator("version", mode="before")
    @classmethod
    def _v1(cls, v: Any) -> str:
        if v in (None, "", "v1"):
            return "v1"
        raise ValueError("unsupported config version; only v1 exists (or leave it empty)")

    @property
    def replication(self) -> tuple[str, ReplicatedResources] | None:
        """The sharing kind in use (``time-slicing`` or ``mps``) and its settings, or None."""
        if self.mps is not None:
            return "mps", self.mps
        if self.sharing.time_slicing.resources:
            return "time-slicing", self.sharing.time_slicing
        return None

    @property
    def mps(self) -> ReplicatedResources | None:
        """MPS settings with failRequestsGreaterThanOne forced on, as NVIDIA's plugin does."""
        mps = self.sharing.mps
        if mps is None or not mps.resources:
            return None
        return mps.model_copy(update={"fail_requests_greater_than_one": True})


def _check_resource_name(v: str) -> str:
    """Accept ``gpu`` or ``nvidia.com/gpu``; always return the full name."""
    full = v if "/" in v else RESOURCE_PREFIX + v
    prefix, _, short = full.partition("/")
    if not prefix or not short or "/" in short or not short.replace(".", "").replace("-", "").isalnum():
        raise ValueError(f"{v!r} is not a valid resource name; use letters, digits, '-' and '.' (e.g. gpu.shared)")
    return full


ENV_FLAGS: Mapping[str, tuple[str, ...]] = {
    "MIG_STRATEGY": ("flags", "migStrategy"),
    "FAIL_ON_INIT_ERROR": ("flags", "failOnInitError"),
    "NVIDIA_DRIVER_ROOT": ("flags", "nvidiaDriverRoot"),
    "NVIDIA_DEV_ROOT": ("flags", "nvidiaDevRoot"),
    "MPS_ROOT": ("flags", "mpsRoot"),
    "GDS_ENABLED": ("flags", "gdsEnabled"),
    "MOFED_ENABLED": ("flags", "mofedEnabled"),
    "PASS_DEVICE_SPECS": ("flags", "plugin", "passDeviceSpecs"),
    "DEVICE_LIST_STRATEGY": ("flags", "plugin", "deviceListStrategy"),
    "DEVICE_ID_STRATEGY": ("flags", "plugin", "deviceIDStrategy"),
    "CDI_ANNOTATION_PREFIX": ("flags", "plugin", "cdiAnnotationPrefix"),
    "NVIDIA_CTK_PATH": ("flags", "plugin", "nvidiaCTKPath"),
    "CONTAINER_DRIVER_ROOT": ("flags", "plugin", "containerDriverRoot"),
}
"""Environment variables NVIDIA's plugin reads, and the config key each one overrides."""


def apply_env(config: Config, env: Mapping[str, str]) -> Config:
    """``config`` with the ENV_FLAGS variables present in ``env`` applied over it (env wins).

    Validates the result as a whole; a bad value raises ConfigFileError naming the variable.
    """
    data = config.model_dump(mode="json", by_alias=True, exclude_none=True)
    names: dict[str, str] = {}
    for var, path in ENV_FLAGS.items():
        if var not in env:
            continue
        node = data
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = env[var]
        names[".".join(path)] = var
    if not names:
        return config
    try:
        return load_yaml_model(Config, yaml.safe_dump(data, sort_keys=False), "environment")
    except ConfigFileError as exc:
        var = names.get(exc.field, exc.field)
        raise ConfigFileError("environment", None, var, exc.reason) from None


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read the config file (None: all defaults), then apply environment overrides.

    Raises ConfigFileError (`file:line: field: reason`) on a bad file or variable.
    """
    config = load_yaml_file(Config, path) if path else Config()
    return apply_env(config, env or {})


def parse_config(text: str, source: str = "<config>") -> Config:
    """Validate config text (for tests and ConfigMap payloads); raises ConfigFileError."""
    return load_yaml_model(Config, text, source)


NODE_CONFIG_LABEL = DEVICE_PLUGIN_CONFIG
"""Node label whose value picks one key of a multi-config ConfigMap."""


CLUSTER_DEFAULT_SOURCE = "--config-key/NODE_CONFIG_KEY"
"""Where the cluster-wide default key comes from (the ClusterPolicy's devicePlugin.config.default)."""


class ConfigKeyError(ConfigFileError):
    """A config key named by the node label (or the cluster default) is not in the ConfigMap.

    ``key`` is the missing name and ``available`` the keys that exist, for logs and Node events.
    """

    def __init__(self, source: str, field: str, key: str, available: Collection[str], hint: str = "") -> None:
        self.key = key
        self.available = tuple(sorted(available))
        listing = ", ".join(self.available) or "(none)"
        super().__init__(source, None, field, f"names config {key!r}, which does not exist; available: {listing}{hint}")


def select_config_key(
    label: str | None,
    cluster_default: str | None,
    available: Collection[str],
    default: str = "default",
    source: str = "<config directory>",
) -> str:
    """Which key of a multi-config ConfigMap applies to a node, as NVIDIA's config manager decides.

    The node's ``nvidia.com/device-plugin.config`` label wins; without it the cluster default
    (the ClusterPolicy's ``devicePlugin.config.default``), then the ``default`` key, then the only
    key. A key that was named (label or cluster default) but is missing is an error naming the
    keys that exist, never a silent fallback: the node would run a config nobody asked for.
    Raises ConfigKeyError (field: which name was wrong) or, with no key to go by, ConfigFileError.
    """
    names = sorted(available)
    if label:
        if label in available:
            return label
        raise ConfigKeyError(source, NODE_CONFIG_LABEL, label, names)
    if cluster_default:
        if cluster_default in available:
            return cluster_default
        hint = "; fix devicePlugin.config.default or add the key to the ConfigMap"
        raise ConfigKeyError(source, CLUSTER_DEFAULT_SOURCE, cluster_default, names, hint)
    if default in available:
        return default
    if len(names) == 1:
        return names[0]
    listing = ", ".join(names) or "(none)"
    raise ConfigFileError(
        source,
        None,
        NODE_CONFIG_LABEL,
        f"no label on the node and no {default!r} config among {listing}; label the node or add a {default!r} key",
    )


def config_files(directory: str | Path) -> dict[str, Path]:
    """The configs of a mounted ConfigMap by key (hidden entries such as ``..data`` skipped)."""
    root = Path(directory)
    try:
        return {p.name: p for p in sorted(root.iterdir()) if p.is_file() and not p.name.startswith(".")}
    except OSError as exc:
        raise ConfigFileError(str(root), None, "", f"cannot list config directory: {exc.strerror or exc}") from None


def choose_config_file(
    directory: str | Path, label: str | None, cluster_default: str | None = None, default: str = "default"
) -> Path:
    """The file of a mounted config ConfigMap that applies to this node (see select_config_key).

    Errors name the directory, so the message says where the available keys were looked for.
    """
    files = config_files(directory)
    return files[select_config_key(label, cluster_default, files, default, str(directory))]
