"""The whole config file (``Config``), and what NVIDIA's plugin and GFD make of it at start.

At start NVIDIA's plugin and GFD turn resource naming in the config off: ``resources``, a custom
``sharing.*.resources[].rename`` and ``devices`` other than ``all`` are ignored with a warning
(``without_config_naming``). ``load.load_config`` does the same unless asked to honour the naming,
so a ConfigMap that gives ``nvidia.com/gpu`` on NVIDIA gives ``nvidia.com/gpu`` here too.

Feature discovery reads ``Config`` to compute the same resource names and replica counts as the
plugin (see ``gpuchain.deviceplugin.resources``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuchain.api.config.v1.flags import DeviceDiscoveryStrategy, Flags, MigStrategy
from gpuchain.api.config.v1.health import Health
from gpuchain.api.config.v1.imex import Imex
from gpuchain.api.config.v1.replicas import ReplicatedResources
from gpuchain.api.config.v1.resources import SHARED_SUFFIX, Resources
from gpuchain.api.config.v1.section import Section
from gpuchain.api.config.v1.sharing import Sharing
from gpuchain.common.schema import define, spec
from gpuchain.common.yamlfile import load_yaml_model


def _v1(v: Any) -> str:
    if v in (None, "", "v1"):
        return "v1"
    raise ValueError("unsupported config version; only v1 exists (or leave it empty)")


@define
class Config(Section):
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


def parse_config(text: str, source: str = "<config>") -> Config:
    """Validate config text (for tests and ConfigMap payloads); raises ConfigFileError."""
    return load_yaml_model(Config, text=text, source=source)
