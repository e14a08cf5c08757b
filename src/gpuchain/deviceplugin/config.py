"""The device plugin's config file, compatible with NVIDIA's device plugin config v1.

Existing ConfigMaps written for NVIDIA's plugin load unchanged: same keys (``version``, ``flags``,
``resources``, ``sharing``, ``imex``), same defaults, same environment variables overriding the
file (precedence: environment, then file, then default). ``null`` means "not set", as in the JSON
NVIDIA's plugin logs at start ("Running with config"), so that JSON loads back. Unknown keys are
rejected so a typo fails start with the field path instead of being silently ignored.

At start NVIDIA's plugin and GFD turn resource naming in the config off: ``resources``, a custom
``sharing.*.resources[].rename`` and ``devices`` other than ``all`` are ignored with a warning
(``without_config_naming``). ``load_config`` does the same unless asked to honour the naming, so a
ConfigMap that gives ``nvidia.com/gpu`` on NVIDIA gives ``nvidia.com/gpu`` here too.

gpuchain adds one optional top-level section, ``health`` (XIDs to ignore, the recovery quiet
period); NVIDIA's plugin has no such section because it never recovers devices.

Other layers use this module too: feature discovery reads ``Config`` to compute the same
resource names and replica counts as the plugin (see ``gpuchain.deviceplugin.resources``).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import re
import uuid
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal

from gpuchain.common.labels import DEVICE_PLUGIN_CONFIG
from gpuchain.common.schema import StrictInt, define, dump, field_types, spec
from gpuchain.common.yamlfile import ConfigFileError, load_yaml_file, load_yaml_model
from gpuchain.gpu.health import DEFAULT_QUIET_SECONDS
from gpuchain.gpu.xid import HealthPolicy, policy_from_env

log = logging.getLogger(__name__)

RESOURCE_PREFIX = "nvidia.com/"
MAX_RESOURCE_NAME = 63
"""NVIDIA's limit on a fully-qualified resource name (``nvidia.com/`` included)."""
SHARED_SUFFIX = ".shared"


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


class _Model:
    """What every section shares: unknown keys refused, and ``null`` read as not given."""

    @staticmethod
    def _before(data: Any) -> Any:
        """A key given as ``null`` is a key not given: NVIDIA's Go structs hold pointers, and the
        JSON its components log writes every unset one as ``null``."""
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


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
class PluginFlags(_Model):
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


INFINITE_NS = 2**63 - 1
"""``sleepInterval: infinite``: label once, then sleep until stopped (Go's largest Duration)."""

_GO_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
_GO_DURATION = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def parse_go_duration(text: str) -> int:
    """Nanoseconds in a Go duration string (``60s``, ``1m30s``, ``1.5h``, ``0``), or INFINITE_NS
    for ``infinite``, as NVIDIA's components parse ``sleepInterval``. Raises ValueError."""
    value = text.strip()
    if value == "infinite":
        return INFINITE_NS
    body = value.lstrip("+-")
    sign = -1 if value.startswith("-") else 1
    if body == "0":
        return 0
    total = 0.0
    pos = 0
    while pos < len(body):
        m = _GO_DURATION.match(body, pos)
        if m is None or m.group(1) in ("", "."):
            raise ValueError(f"{text!r} is not a duration; use e.g. 60s, 1m30s, 500ms or infinite")
        total += float(m.group(1)) * _GO_UNITS_NS[m.group(2)]
        pos = m.end()
    if not body:
        raise ValueError(f"{text!r} is not a duration; use e.g. 60s, 1m30s, 500ms or infinite")
    return sign * int(total)


def format_go_duration(ns: int) -> str:
    """The Go spelling of a duration, for messages: ``infinite``, ``1m0s``, ``1.5s``, ``500ms``, ``5ns``."""
    if ns == INFINITE_NS:
        return "infinite"
    if ns < 0:
        return "-" + format_go_duration(-ns)
    if ns == 0:
        return "0s"
    if ns < 10**9:
        for unit, size in (("ms", 10**6), ("\u00b5s", 10**3)):
            if ns >= size:
                return f"{ns / size:.6f}".rstrip("0").rstrip(".") + unit
        return f"{ns}ns"
    h, rest = divmod(ns, 3600 * 10**9)
    m, rest = divmod(rest, 60 * 10**9)
    sec = f"{rest / 10**9:.9f}".rstrip("0").rstrip(".")
    return (f"{h}h" if h else "") + (f"{m}m" if h or m else "") + f"{sec}s"


def _duration(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError("give a duration such as 60s, 1m30s or infinite")
    if isinstance(v, int | float):
        return int(v)
    if isinstance(v, str):
        return parse_go_duration(v)
    raise ValueError("give a duration such as 60s, 1m30s or infinite")


@define
class GfdFlags(_Model):
    """``flags.gfd``: read by feature discovery; accepted here so one file serves both.

    ``sleepInterval`` is held in nanoseconds, as NVIDIA's Duration: a string is a Go duration or
    ``infinite``, a bare number counts nanoseconds (``5`` is 5 ns, not 5 s).
    """

    oneshot: bool = False
    no_timestamp: bool = spec(default=False, key="noTimestamp")
    sleep_interval: int = spec(default=60 * 10**9, key="sleepInterval", before=_duration)
    output_file: str = spec(default="/etc/kubernetes/node-feature-discovery/features.d/gfd", key="outputFile")
    machine_type_file: str = spec(default="/sys/class/dmi/id/product_name", key="machineTypeFile")


@define
class Flags(_Model):
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


def _valid_name(v: str | None, _: Mapping[str, Any]) -> str | None:
    return None if v is None else _check_resource_name(v)


@define
class ResourcePattern(_Model):
    """``resources.gpus[]`` / ``resources.mig[]``: devices whose product (or MIG profile) matches
    ``pattern`` (``*`` matches any run of characters, nothing else is special) are announced as
    ``name`` instead of the default name."""

    pattern: str
    name: str = spec(check=_valid_name)


@define
class Resources(_Model):
    gpus: tuple[ResourcePattern, ...] = ()
    mig: tuple[ResourcePattern, ...] = ()


DeviceSelector = Literal["all"] | StrictInt | tuple[str, ...]
"""``devices``: ``all``, a count of devices, or GPU indexes, MIG indexes (``0:1``) and UUIDs."""

_UINT = re.compile(r"[0-9]+")


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return len(text) == 36


def _device_ref(item: Any) -> str:
    """One entry of a ``devices`` list as NVIDIA reads it: a GPU index (number or string), a MIG
    index ``<gpu>:<mig>``, or a GPU or MIG UUID (``MIG-GPU-<uuid>/<gi>/<ci>`` too)."""
    if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
        return str(item)
    if isinstance(item, str):
        parts = item.split(":")
        if all(_UINT.fullmatch(p) for p in parts) and len(parts) <= 2:
            return item
        if item.startswith("GPU-") and _is_uuid(item[4:]):
            return item
        if item.startswith("MIG-"):
            rest = item[4:]
            gpu, _, tail = rest.partition("/")
            ids = tail.split("/")
            if _is_uuid(rest) or (
                gpu.startswith("GPU-") and _is_uuid(gpu[4:]) and len(ids) == 2 and all(_UINT.fullmatch(i) for i in ids)
            ):
                return item
    raise ValueError(
        f"device {item!r} is not a GPU index, a MIG index (0:1) or a GPU/MIG UUID (GPU-<uuid>, MIG-<uuid>)"
    )


def _device_list(v: Any) -> Any:
    """``all``, a count above 0, or a list of device references (NVIDIA's three forms)."""
    if v == "all":
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        if v <= 0:
            raise ValueError(f"a count of devices must be greater than 0 (got {v})")
        return v
    if isinstance(v, list | tuple):
        # An empty list is accepted as NVIDIA's reader accepts it: at start the devices field is
        # dropped (``without_config_naming``); only honoured naming refuses it (``load_config``).
        return tuple(_device_ref(item) for item in v)
    if isinstance(v, str):
        raise ValueError(f"the only word devices takes is 'all' (got {v!r}); or give a count or a list")
    raise ValueError(f"devices is 'all', a count or a list of indexes/UUIDs (got {v!r})")


@define(kw_only=True)
class ReplicatedResource(_Model):
    """``sharing.<kind>.resources[]``: announce each selected device of ``name`` ``replicas`` times."""

    name: str = spec(check=_valid_name)
    rename: str | None = spec(default=None, check=_valid_name)
    devices: DeviceSelector = spec(default="all", ge=1, before=_device_list)
    replicas: StrictInt = spec(ge=2)


def _unique_names(v: tuple[ReplicatedResource, ...], _: Mapping[str, Any]) -> tuple[ReplicatedResource, ...]:
    if not v:
        raise ValueError("no resources to share; list at least one (name, replicas) or leave the section out")
    seen: set[str] = set()
    for r in v:
        if r.name in seen:
            raise ValueError(f"resource {r.name} is listed twice; give each resource one entry")
        seen.add(r.name)
    return v


@define
class ReplicatedResources(_Model):
    """``sharing.timeSlicing`` / ``sharing.mps``.

    ``failRequestsGreaterThanOne`` left unset is off for time-slicing and on for MPS (NVIDIA's
    defaults); an explicit value is honoured for both (see ``Config.replication``), as
    k8s-device-plugin v0.20.0, the release gpuchain follows, does (``NewConfig`` in
    api/config/v1/config.go@v0.20.0, tested by config_test.go@v0.20.0). Releases v0.15.0 (which
    added MPS) through v0.19.3 force it on for MPS whatever the file says
    (api/config/v1/config.go@v0.18.0), so a ConfigMap with ``false`` allows multi-replica requests
    here and refuses them there; tests/peers/test_nvidia_config_peer.py lists that as known.
    """

    rename_by_default: bool = spec(default=False, key="renameByDefault")
    fail_requests_greater_than_one: bool | None = spec(default=None, key="failRequestsGreaterThanOne")
    resources: tuple[ReplicatedResource, ...] = spec(default=(), check=_unique_names)

    def _after(self) -> None:
        if not self.resources:
            raise ValueError("no resources to share; add resources: [{name: nvidia.com/gpu, replicas: N}]")

    def settled(self, kind: str) -> ReplicatedResources:
        """These settings with ``failRequestsGreaterThanOne`` resolved: unset is True for MPS."""
        if self.fail_requests_greater_than_one is not None:
            return self
        return dataclasses.replace(self, fail_requests_greater_than_one=kind == "mps")


def _empty_is_unset(v: Any) -> Any:
    if isinstance(v, dict) and not {k: x for k, x in v.items() if x is not None}:
        return None
    return v


@define
class Sharing(_Model):
    """``sharing``: time-slicing or MPS. Given both, MPS is used and time-slicing ignored, as
    NVIDIA's plugin does (``Config.replication``; a warning at start names the ignored section).

    ``timeSlicing: {}`` (no keys at all) is "no time-slicing", because that is how NVIDIA's
    components write an unset section in the JSON they log.
    """

    time_slicing: ReplicatedResources | None = spec(default=None, key="timeSlicing", before=_empty_is_unset)
    mps: ReplicatedResources | None = None


def _channel_ids(v: Any) -> Any:
    if isinstance(v, str):  # IMEX_CHANNEL_IDS=0,1
        try:
            v = [int(x) for x in v.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"channel IDs are integers, e.g. 0 (got {v!r})") from None
    if isinstance(v, list | tuple) and len(v) > 0 and list(v) != [0]:
        raise ValueError(f"channelIDs must be [] or [0] (got {list(v)})")
    return v


@define
class Imex(_Model):
    """``imex``: IMEX channels to inject. NVIDIA allows only channel 0 (``[]`` or ``[0]``)."""

    channel_ids: tuple[StrictInt, ...] = spec(default=(), key="channelIDs", before=_channel_ids)
    required: bool = False


@define
class Health(_Model):
    """gpuchain extension: the XID policy and when a recovered GPU's devices become healthy again."""

    disabled: bool = False
    ignored_xids: tuple[int, ...] = spec(default=(), key="ignoredXids")
    enabled_xids: tuple[int, ...] = spec(default=(), key="enabledXids")
    recovery_quiet_seconds: float = spec(default=DEFAULT_QUIET_SECONDS, ge=0, key="recoveryQuietSeconds")

    def policy(self, env: Mapping[str, str] | None = None) -> HealthPolicy:
        """The XID policy: defaults, then this section, then DP_*_HEALTHCHECKS from ``env``."""
        base = HealthPolicy(checks=not self.disabled).with_ignored(self.ignored_xids, self.enabled_xids)
        return policy_from_env(env or {}, base)


def _v1(v: Any) -> str:
    if v in (None, "", "v1"):
        return "v1"
    raise ValueError("unsupported config version; only v1 exists (or leave it empty)")


@define
class Config(_Model):
    """The whole file. An empty file is a valid config with every default."""

    version: str = spec(default="v1", before=_v1)
    flags: Flags = Flags()
    resources: Resources = Resources()
    sharing: Sharing = Sharing()
    imex: Imex = Imex()
    health: Health = Health()

    @property
    def replication(self) -> tuple[str, ReplicatedResources] | None:
        """The sharing kind in use (``time-slicing`` or ``mps``) and its settings, with
        ``failRequestsGreaterThanOne`` resolved; None without sharing."""
        if self.sharing.mps is not None:
            return "mps", self.sharing.mps.settled("mps")
        if self.sharing.time_slicing is not None:
            return "time-slicing", self.sharing.time_slicing.settled("time-slicing")
        return None

    @property
    def mps(self) -> ReplicatedResources | None:
        """The MPS settings in use (``failRequestsGreaterThanOne`` resolved), or None."""
        replication = self.replication
        return replication[1] if replication is not None and replication[0] == "mps" else None

    def plugin_problems(self) -> list[str]:
        """What NVIDIA's device plugin refuses at start in a config feature discovery accepts."""
        problems = []
        if self.flags.device_discovery_strategy is DeviceDiscoveryStrategy.VFIO:
            problems.append(
                "flags.deviceDiscoveryStrategy: vfio is for feature discovery only; use auto, nvml or tegra"
            )
        if self.sharing.mps is not None and self.flags.mig_strategy is MigStrategy.MIXED:
            problems.append(
                "sharing.mps: MPS sharing does not work with migStrategy mixed; use none or single, or time-slicing"
            )
        return problems


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")


def _check_resource_name(v: str) -> str:
    """Accept ``gpu`` or ``nvidia.com/gpu`` as NVIDIA does; always return the full name.

    The part after ``nvidia.com/`` must be a DNS subdomain (lowercase letters, digits, '-', '.')
    and the whole name at most 63 characters.
    """
    full = v if v.startswith(RESOURCE_PREFIX) else RESOURCE_PREFIX + v
    short = full[len(RESOURCE_PREFIX) :]
    if len(full) > MAX_RESOURCE_NAME:
        raise ValueError(f"{full!r} is longer than {MAX_RESOURCE_NAME} characters; shorten it")
    if not _DNS_SUBDOMAIN.fullmatch(short) or len(short) > 253:
        raise ValueError(
            f"{v!r} is not a valid resource name; after nvidia.com/ use lowercase letters, digits, '-' and '.'"
            " (e.g. gpu.shared)"
        )
    return full


NAMING_WARNINGS = {
    "resources": "Customizing the 'resources' field is not yet supported in the config. Ignoring...",
    "rename": "Setting the 'rename' field in sharing.{kind}.resources is not yet supported in the config. Ignoring...",
    "devices": "Customizing the 'devices' field in sharing.{kind}.resources is not yet supported in the config. "
    "Ignoring...",
}
"""The warnings NVIDIA's plugin and GFD log when they drop resource naming from a config at start
(log lines users and alerts know; kept word for word)."""


def without_config_naming(config: Config) -> tuple[Config, list[str]]:
    """``config`` as NVIDIA's plugin and GFD use it, and the warnings they log about it.

    At start they ignore ``resources.gpus``/``resources.mig``, any ``rename`` in the sharing
    sections other than ``<name>.shared`` under ``renameByDefault``, and any ``devices`` other
    than ``all``. Pure: the caller logs the warnings.
    """
    warnings: list[str] = []
    update: dict[str, Any] = {}
    if config.resources.gpus or config.resources.mig:
        warnings.append(NAMING_WARNINGS["resources"])
        update["resources"] = Resources()
    sharing: dict[str, ReplicatedResources] = {}
    for kind, attr in (("timeSlicing", "time_slicing"), ("mps", "mps")):
        section: ReplicatedResources | None = getattr(config.sharing, attr)
        if section is None:
            continue
        renamed = devices = False
        entries = []
        for r in section.resources:
            default = r.name + SHARED_SUFFIX if section.rename_by_default else None
            if r.rename is not None and r.rename != default:
                renamed = True
            if r.devices != "all":
                devices = True
            entries.append(dataclasses.replace(r, rename=default, devices="all"))
        if renamed:
            warnings.append(NAMING_WARNINGS["rename"].format(kind=kind))
        if devices:
            warnings.append(NAMING_WARNINGS["devices"].format(kind=kind))
        if renamed or devices:
            sharing[attr] = dataclasses.replace(section, resources=tuple(entries))
    if sharing:
        update["sharing"] = dataclasses.replace(config.sharing, **sharing)
    return (dataclasses.replace(config, **update) if update else config), warnings


def unsupported_settings(config: Config) -> list[str]:
    """Settings NVIDIA's components act on that gpuchain accepts but does not implement, one line
    each, so a ConfigMap carried over says at start what it will not get."""
    flags = config.flags
    notes = [
        f"flags.{key}=true: gpuchain does not add {what} to containers; ignored"
        for key, on, what in (
            ("gdrcopyEnabled", flags.gdrcopy_enabled, "GDRCopy (NVIDIA_GDRCOPY)"),
            ("gdsEnabled", flags.gds_enabled, "GPUDirect Storage (NVIDIA_GDS)"),
            ("mofedEnabled", flags.mofed_enabled, "MOFED (NVIDIA_MOFED)"),
        )
        if on
    ]
    if config.imex.channel_ids:
        notes.append("imex.channelIDs: gpuchain does not inject IMEX channels; ignored")
    if flags.use_node_feature_api:
        notes.append(
            "flags.useNodeFeatureAPI=true: gpuchain feature discovery writes the feature file or patches "
            "the Node (--node), never a NodeFeature object"
        )
    if flags.device_discovery_strategy in (DeviceDiscoveryStrategy.TEGRA, DeviceDiscoveryStrategy.VFIO):
        notes.append(
            f"flags.deviceDiscoveryStrategy={flags.device_discovery_strategy.value}: "
            "gpuchain finds GPUs through its GPU backend; ignored"
        )
    if config.sharing.mps is not None and config.sharing.time_slicing is not None:
        notes.append(
            "sharing.timeSlicing: ignored because sharing.mps is also set (MPS is used, as NVIDIA's plugin does)"
        )
    if config.sharing.mps is not None and not flags.mps_root:
        notes.append(
            "sharing.mps: no flags.mpsRoot (MPS_ROOT), so gpuchain announces the MPS replicas but runs no "
            "MPS control daemon and containers share the GPU as with time-slicing; set it to run one"
        )
    return notes


ENV_FLAGS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("flags", "migStrategy"), ("MIG_STRATEGY",)),
    (("flags", "failOnInitError"), ("FAIL_ON_INIT_ERROR",)),
    (("flags", "nvidiaDriverRoot"), ("NVIDIA_DRIVER_ROOT",)),
    (("flags", "nvidiaDevRoot"), ("NVIDIA_DEV_ROOT",)),
    (("flags", "mpsRoot"), ("MPS_ROOT",)),
    (("flags", "gdrcopyEnabled"), ("GDRCOPY_ENABLED",)),
    (("flags", "gdsEnabled"), ("GDS_ENABLED",)),
    (("flags", "mofedEnabled"), ("MOFED_ENABLED",)),
    (("flags", "deviceDiscoveryStrategy"), ("DEVICE_DISCOVERY_STRATEGY",)),
    (("flags", "plugin", "passDeviceSpecs"), ("PASS_DEVICE_SPECS",)),
    (("flags", "plugin", "deviceListStrategy"), ("DEVICE_LIST_STRATEGY",)),
    (("flags", "plugin", "deviceIDStrategy"), ("DEVICE_ID_STRATEGY",)),
    (("flags", "plugin", "cdiAnnotationPrefix"), ("CDI_ANNOTATION_PREFIX",)),
    (("flags", "plugin", "nvidiaCTKPath"), ("NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH")),
    (("flags", "plugin", "containerDriverRoot"), ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT")),
    (("flags", "plugin", "sharedDevicesAllocationPolicy"), ("SHARED_DEVICES_ALLOCATION_POLICY",)),
    (("imex", "channelIDs"), ("IMEX_CHANNEL_IDS",)),
    (("imex", "required"), ("IMEX_REQUIRED",)),
)
"""Environment variables NVIDIA's plugin reads, by the config key each overrides (the first set
variable of a key wins, as with NVIDIA's aliases)."""

GFD_ENV_FLAGS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("flags", "migStrategy"), ("GFD_MIG_STRATEGY", "MIG_STRATEGY")),
    (("flags", "failOnInitError"), ("GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR")),
    (("flags", "useNodeFeatureAPI"), ("GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API")),
    (("flags", "deviceDiscoveryStrategy"), ("DEVICE_DISCOVERY_STRATEGY",)),
    (("flags", "plugin", "containerDriverRoot"), ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT")),
    (("flags", "gfd", "oneshot"), ("GFD_ONESHOT",)),
    (("flags", "gfd", "noTimestamp"), ("GFD_NO_TIMESTAMP",)),
    (("flags", "gfd", "sleepInterval"), ("GFD_SLEEP_INTERVAL",)),
    (("flags", "gfd", "outputFile"), ("GFD_OUTPUT_FILE",)),
    (("flags", "gfd", "machineTypeFile"), ("GFD_MACHINE_TYPE_FILE",)),
)
"""Environment variables NVIDIA's GFD reads, by config key (GFD_* first, then the shared name)."""


_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def go_env_bool(text: str) -> bool:
    """A boolean environment variable as NVIDIA's plugin and GFD read it (urfave/cli over Go's
    strconv.ParseBool): exactly the twelve spellings Go takes, and a variable set to the empty
    string is false. Anything else (``yes``, `` true``) stops NVIDIA's plugin at start, so it is
    refused here too rather than read the way a YAML file would read it."""
    if text == "" or text in _GO_FALSE:
        return False
    if text in _GO_TRUE:
        return True
    raise ValueError(f"{text!r} is not a boolean; use true or false (also 1/0, t/f, TRUE/FALSE, True/False)")


def _field_type(path: tuple[str, ...]) -> Any:
    """The type of the config field at ``path`` (aliases, as in the file)."""
    model: Any = Config
    for key in path:
        model = field_types(model)[key]
    return model


def apply_env(
    config: Config,
    env: Mapping[str, str],
    variables: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ENV_FLAGS,
) -> Config:
    """``config`` with the ``variables`` present in ``env`` applied over it (env wins).

    Validates the result as a whole; a bad value raises ConfigFileError naming the variable.
    """
    data = dump(config, exclude_none=True, exclude_defaults=True)
    names: dict[str, str] = {}
    for path, candidates in variables:
        var = next((v for v in candidates if v in env), None)
        if var is None:
            continue
        node = data
        for key in path[:-1]:
            node = node.setdefault(key, {})
        value: str | bool = env[var]
        if _field_type(path) is bool:
            try:
                value = go_env_bool(env[var])
            except ValueError as exc:
                raise ConfigFileError("environment", None, var, str(exc)) from None
        node[path[-1]] = value
        names[".".join(path)] = var
    if not names:
        return config
    import yaml

    try:
        return load_yaml_model(Config, yaml.safe_dump(data, sort_keys=False), "environment")
    except ConfigFileError as exc:
        var = names.get(exc.field, exc.field)
        raise ConfigFileError("environment", None, var, exc.reason) from None


def load_config(
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    *,
    config_naming: bool = False,
    variables: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ENV_FLAGS,
) -> Config:
    """Read the config file (None: all defaults), then apply environment overrides.

    An empty file (no bytes, only whitespace or comments, or a ``null`` document) is every default,
    as NVIDIA's plugin and GFD read it: k8s-device-plugin CHANGELOG.md@v0.20.0 under v0.12.2 "Allow
    an empty config file and default to version: v1" (``parseConfigFrom`` in
    api/config/v1/config.go@v0.20.0 unmarshals nothing into a zero Config). A ConfigMap key created
    before anyone fills it in must not stop the plugin on every node.

    Without ``config_naming`` the config's resource naming is dropped, with NVIDIA's warnings
    logged, as NVIDIA's plugin and GFD do at start (see ``without_config_naming``).
    Raises ConfigFileError (`file:line: field: reason`) on a bad file or variable.
    """
    config = load_yaml_file(Config, path, empty_ok=True) if path else Config()
    config = apply_env(config, env or {}, variables)
    for note in unsupported_settings(config):
        log.warning("%s", note)
    if config_naming:
        for kind, section in (("timeSlicing", config.sharing.time_slicing), ("mps", config.sharing.mps)):
            for i, entry in enumerate(section.resources if section is not None else ()):
                if entry.devices == ():
                    raise ConfigFileError(
                        str(path) if path else "<config>",
                        None,
                        f"sharing.{kind}.resources.{i}.devices",
                        "an empty device list selects nothing; use 'all', a count or indexes/UUIDs",
                    )
        return config
    config, warnings = without_config_naming(config)
    for warning in warnings:
        log.warning("%s (gpuchain: --config-resource-naming applies it)", warning)
    return config


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
