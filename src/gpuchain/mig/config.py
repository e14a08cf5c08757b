"""MIG layouts in mig-parted's v1 config format, and the named layouts every cluster expects.

A file written for NVIDIA's mig-parted (the ConfigMap the GPU operator mounts) loads here
unchanged, and nothing else does: unknown fields, a wrong version, a malformed profile name or
a layout that cannot fit the GPUs its device-filter names are rejected with the file, line and
field. Layouts without a device-filter are checked against the actual GPUs when they are
resolved for a node (see ``gpuchain.mig.plan``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from gpuchain.common.inputfile import read_input_text
from gpuchain.common.schema import StrictBool, StrictInt, define, dump, spec, validate
from gpuchain.common.yamlfile import ConfigFileError, load_yaml_file, load_yaml_model
from gpuchain.gpu import catalog
from gpuchain.gpu.errors import InvalidConfigError

DISABLED = "all-disabled"
ENABLED = "all-enabled"
BALANCED = "all-balanced"


class LayoutError(ValueError):
    """A layout that cannot be applied to this node; the message names the GPU and the reason."""


def parse_device_id(value: str) -> int:
    """A PCI device id as mig-parted writes it (``0x233010DE``: device id, then vendor id)."""
    if ":" in value:
        raise ValueError(
            f"device-filter {value!r} names a PCI subsystem id; gpuchain matches GPUs by device id only, "
            f"write {value.split(':', 1)[0]!r}"
        )
    try:
        number = int(value, 16)
    except ValueError:
        raise ValueError(f"device-filter {value!r} is not a hex PCI id such as 0x233010DE") from None
    if not 0 < number <= 0xFFFFFFFF:
        raise ValueError(f"device-filter {value!r} is out of range for a 32-bit PCI id")
    return number


def format_device_id(value: int) -> str:
    return f"0x{value:08X}"


def _filter_ids(value: str | list[str] | None, _: Mapping[str, Any]) -> str | list[str] | None:
    for item in [value] if isinstance(value, str) else value or []:
        parse_device_id(item)
    return value


def _devices_shape(value: Any) -> Any:
    if value != "all" and not isinstance(value, list):
        raise ValueError("devices must be `all` or a list of GPU indexes such as [0, 1]")
    return value


def _devices(value: Literal["all"] | list[int], _: Mapping[str, Any]) -> Literal["all"] | list[int]:
    if isinstance(value, list):
        if not value:
            raise ValueError("list at least one GPU index, or write `devices: all`")
        if any(i < 0 for i in value) or len(set(value)) != len(value):
            raise ValueError("GPU indexes must be distinct and >= 0")
    return value


def _profiles(value: dict[str, int] | None, _: Mapping[str, Any]) -> dict[str, int] | None:
    for name, count in (value or {}).items():
        catalog.parse_profile(name)
        if count < 0:
            raise ValueError(f"{name}: count must be >= 0, got {count}")
    if value and not any(value.values()):
        raise ValueError("every count is 0; write mig-devices: {} for MIG enabled with no instances")
    return value


@define(kw_only=True)
class MigConfigEntry:
    """One entry of a named layout: which GPUs it selects and what MIG state they get."""

    device_filter: str | list[str] | None = spec(default=None, key="device-filter", check=_filter_ids)
    devices: Literal["all"] | list[StrictInt] = spec(before=_devices_shape, check=_devices)
    mig_enabled: StrictBool = spec(key="mig-enabled")
    mig_devices: dict[str, StrictInt] | None = spec(default=None, key="mig-devices", check=_profiles)

    def _after(self) -> None:
        if self.mig_enabled and self.mig_devices is None:
            raise ValueError("mig-devices is required when mig-enabled is true (use {} for no instances)")
        if not self.mig_enabled and self.mig_devices:
            raise ValueError("mig-devices must be empty when mig-enabled is false")

    @property
    def device_ids(self) -> tuple[int, ...]:
        """The PCI device ids this entry is limited to; empty means every GPU model."""
        items = [self.device_filter] if isinstance(self.device_filter, str) else self.device_filter or []
        return tuple(parse_device_id(i) for i in items if i)

    @property
    def layout(self) -> dict[str, int]:
        """Profile -> count, zero counts dropped."""
        return {p: c for p, c in (self.mig_devices or {}).items() if c}

    def selects(self, index: int, pci_device_id: int) -> bool:
        """Whether this entry applies to the GPU at ``index`` with ``pci_device_id``."""
        ids = self.device_ids
        if ids and pci_device_id not in ids:
            return False
        return self.devices == "all" or index in self.devices


def _non_empty(value: dict[str, list[MigConfigEntry]], _: Mapping[str, Any]) -> dict[str, list[MigConfigEntry]]:
    if not value:
        raise ValueError("at least one named layout is required")
    for name, entries in value.items():
        if not entries:
            raise ValueError(f"layout {name!r} needs at least one entry")
    return value


@define(kw_only=True)
class MigPartedConfig:
    """A whole mig-parted v1 file: named layouts, each a list of entries."""

    version: Literal["v1"]
    mig_configs: dict[str, list[MigConfigEntry]] = spec(key="mig-configs", check=_non_empty)

    def _after(self) -> None:
        """Every entry that names GPU models by device-filter must fit each catalogued one."""
        for name, entries in self.mig_configs.items():
            for i, entry in enumerate(entries):
                if not entry.mig_enabled:
                    continue
                for device_id in entry.device_ids:
                    gpu = catalog.model_for_name("", device_id)
                    if gpu is None:
                        continue
                    try:
                        catalog.place_layout(gpu, entry.layout)
                    except InvalidConfigError as exc:
                        raise ValueError(f"layout {name!r} entry {i}: {exc}") from None

    def layout(self, name: str) -> list[MigConfigEntry]:
        """The entries of one named layout; the error lists the names the file has."""
        try:
            return self.mig_configs[name]
        except KeyError:
            known = ", ".join(self.mig_configs)
            raise LayoutError(f"no MIG layout named {name!r}; this config has: {known}") from None

    def to_yaml(self) -> str:
        """The config as mig-parted reads it (for a ConfigMap)."""
        data = dump(self, exclude_none=True)
        return yaml.safe_dump(data, sort_keys=False)


def load_config(path: str | Path) -> MigPartedConfig:
    """Read a mig-parted v1 file, or a ConfigMap holding one under ``config.yaml``.

    NVIDIA ships its layouts as a ConfigMap (gpu-operator's default-mig-parted-config), and that
    file is what a user has at hand, so it loads as it is. Raises ConfigFileError as
    ``file:line: field: reason``, the line counted in the file given.
    """
    inner = _configmap_config(Path(path))
    if inner is None:
        return load_yaml_file(MigPartedConfig, path=path)
    return load_yaml_model(MigPartedConfig, text=inner, source=str(path), empty_ok=False)


#: The key gpu-operator's MIG manager reads from the ConfigMap that migManager.config.name names.
CONFIGMAP_KEY = "config.yaml"


def _configmap_config(path: Path) -> str | None:
    """The config text of a ConfigMap file, padded so lines keep their numbers in the file; None: not a ConfigMap.

    The file may hold other documents too (mig-parted's example manifests: a DaemonSet, then the ConfigMap).
    """
    try:
        docs = list(yaml.compose_all(read_input_text(path)))
    except (ConfigFileError, yaml.YAMLError, RecursionError):
        return None  # the plain reader reports it, with its bounds
    maps = [{str(k.value): v for k, v in d.value} for d in docs if isinstance(d, yaml.MappingNode)]
    configmaps = [m for m in maps if getattr(m.get("kind"), "value", None) == "ConfigMap"]
    if not configmaps:
        return None
    # The first ConfigMap holding config.yaml (mig-parted's example also ships one of clients.yaml).
    top = next((m for m in configmaps if CONFIGMAP_KEY in _keys(m.get("data"))), configmaps[0])
    kind, data = top["kind"], top.get("data")
    node = _keys(data).get(CONFIGMAP_KEY)
    if not isinstance(node, yaml.ScalarNode):
        entries = _keys(data)
        raise ConfigFileError(
            str(path),
            line=(data or kind).start_mark.line + 1,
            field=f"data.{CONFIGMAP_KEY}",
            reason=f"a ConfigMap of MIG layouts holds the mig-parted config under data.{CONFIGMAP_KEY}, as NVIDIA's "
            f"default-mig-parted-config does (keys found: {', '.join(entries) or 'none'})",
        )
    # A block scalar's text starts on the line after its indicator; others on the key's line.
    first = node.start_mark.line + (1 if node.style in ("|", ">") else 0)
    return "\n" * first + str(node.value)


def _keys(node: yaml.Node | None) -> dict[str, yaml.Node]:
    """A YAML mapping node's entries by key; none for anything else."""
    return {str(k.value): v for k, v in node.value} if isinstance(node, yaml.MappingNode) else {}


def parse_config(text: str, source: str = "<input>") -> MigPartedConfig:
    return load_yaml_model(MigPartedConfig, text=text, source=source)


def _entry(ids: list[int] | None, enabled: bool, devices: Mapping[str, int] | None) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if ids:
        entry["device-filter"] = [format_device_id(i) for i in ids]
    entry["devices"] = "all"
    entry["mig-enabled"] = enabled
    if devices is not None:
        entry["mig-devices"] = dict(devices)
    return entry


def balanced_layout(model: catalog.GpuModel) -> dict[str, int]:
    """Two of the smallest slices, one 2-slice and (where the GPU has one) one 3-slice instance.

    NVIDIA's all-balanced: ``1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1`` on an H100, ``1g.6gb: 2,
    2g.12gb: 1`` on an A30 (4 compute slices). Only plain profiles (no ``+``/``-`` attributes).
    """
    plain = [p for p in model.mig_profiles if not (p.parsed.attributes or p.parsed.negated)]
    smallest = next(p for p in plain if p.gi_slices == 1 and p.memory_slices == 1)
    layout = {smallest.name: 2}
    for slices in (2, 3):
        bigger = next((p for p in plain if p.gi_slices == slices), None)
        if bigger is not None:
            layout[bigger.name] = 1
    return layout


def _profile_order(name: str) -> tuple[int, int, tuple[str, ...], tuple[str, ...]]:
    """Compute slices, then memory, plain before attributes: 1g.5gb, 1g.5gb+me, 1g.10gb, ..."""
    p = catalog.parse_profile(name)
    return p.gi_slices, p.memory_gb, p.attributes, p.negated


def config_or_default(path: str | Path | None) -> MigPartedConfig:
    """The mig-parted file ``path`` (``load_config``), or without one the built-in layouts."""
    return load_config(path) if path else default_config()


def default_config() -> MigPartedConfig:
    """The named layouts generated from the catalog: all-disabled, all-enabled, one
    ``all-<profile>`` per profile (``+me`` written ``.me``, as node label values allow no ``+``)
    filled to the GPU's limit, and all-balanced, each limited by device-filter to the GPUs that
    have the profile: every PCI id of each such model, so PCIe cards get the layouts too.
    """
    mig_models = [m for m in catalog.MODELS.values() if m.mig_capable]
    configs: dict[str, list[dict[str, Any]]] = {
        DISABLED: [_entry(None, False, None)],
        ENABLED: [_entry(None, True, {})],
    }
    by_profile: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    label_value: dict[str, str] = {}
    for model in mig_models:
        for prof in model.mig_profiles:
            by_profile[prof.name][prof.max_instances].extend(model.pci_device_ids)
            label_value[prof.name] = prof.resource_suffix
    for name in sorted(by_profile, key=_profile_order):
        configs[f"all-{label_value[name]}"] = [
            _entry(ids, True, {name: count}) for count, ids in by_profile[name].items()
        ]
    configs[BALANCED] = [_entry(list(m.pci_device_ids), True, balanced_layout(m)) for m in mig_models]
    return validate(MigPartedConfig, {"version": "v1", "mig-configs": configs})
