"""Each role's settings, and what the roles of one process share: plain frozen dataclasses.

A command (``gpuchain device-plugin``, ``gpuchain node-agent``, ...) parses its flags and NVIDIA's
environment variables into these and hands them to ``agent.build``. ``None`` leaves a value to
the role (its config file, NVIDIA's default), as an absent flag does. The module imports nothing
but the standard library, so parsing settings costs a node agent nothing before its first role.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpuchain.exporter import COLLECT_INTERVAL
from gpuchain.kube.allocator import DEVICE_PLUGIN, Allocator

if TYPE_CHECKING:
    from gpuchain.gpu.burnin import BurnInConfig
    from gpuchain.gpu.xid import XidOverride


@dataclass(frozen=True, kw_only=True)
class NodeSettings:
    """What every role of one process shares: the GPUs, the Node, the kubelet's pod-resources
    socket, the NVML release board and the metrics endpoint."""

    node_name: str | None = None
    """This Node (downward API spec.nodeName); None: roles that need a Node refuse to start."""
    release_dir: str | None = ""
    """The node's NVML release board ('' for none): for agents that share no process with gpu-health.
    None: the chart's (``gpu.nvmlrelease.DEFAULT_DIR``), which ``open_board`` resolves, so a node
    agent imports the board's module only once its first role serves."""
    pod_resources_socket: str | None = None
    """The kubelet's pod-resources socket; '' for none (no pod attribution); None: the kubelet's
    own (``exporter.podresources.DEFAULT_SOCKET``) when it exists, looked for by the first role
    that asks, so a node agent's device plugin registers before that module is loaded."""
    pod_resources_timeout: float = 5.0
    metrics_address: str = "0.0.0.0"
    metrics_port: int | None = None
    """The one metrics endpoint of the process (the exporter's 9400 in the node agent); None: none."""


@dataclass(frozen=True, kw_only=True)
class DevicePluginSettings:
    """``gpuchain device-plugin``: NVIDIA's device plugin config v1 from a file or a ConfigMap directory."""

    socket_dir: Path | None = None
    """None: the kubelet's device plugin directory (``deviceplugin.plugin.DEFAULT_SOCKET_DIR``)."""
    config_file: Path | None = None
    config_dir: Path | None = None
    config_key: str | None = None
    config_naming: bool = False
    cdi_dir: Path | None = None
    """None: the container runtime's CDI directory (``gpu.cdi.DEFAULT_CDI_DIR``)."""


@dataclass(frozen=True, kw_only=True)
class ExporterSettings:
    """``gpuchain exporter``: DCGM-compatible metrics, served on the process's metrics endpoint."""

    collectors: Path | None = None
    interval: float = COLLECT_INTERVAL
    call_timeout: float = 5.0
    hostname: str | None = None
    """The Hostname label; None: the node's name, else this host's."""
    per_process: bool = False
    pods_from_api: bool = False


@dataclass(frozen=True, kw_only=True)
class GfdSettings:
    """``gpuchain gfd``: NVIDIA GFD-compatible labels into a feature file and/or onto the Node."""

    config_file: Path | None = None
    config_dir: Path | None = None
    config_key: str | None = None
    config_naming: bool = False
    mig_strategy: str | None = None
    sleep_interval: str | None = None
    """A Go duration or 'infinite'; None: flags.gfd.sleepInterval (GFD_SLEEP_INTERVAL)."""
    output_file: str | None = None
    """None: flags.gfd.outputFile; '-' stdout; '' none."""
    patch_node: str | None = None
    """Also patch this Node's labels through the API (``--node``); None: the feature file alone."""
    no_timestamp: bool = False
    machine_type_file: str | None = None
    oneshot: bool = False


@dataclass(frozen=True, kw_only=True)
class GpuHealthSettings:
    """``gpuchain gpu-health``: publish GPU health; with ``repair`` the repair loop, with
    ``gate_startup`` the new node's readiness gate."""

    config_file: Path | None = None
    resync: float = 30.0
    namespace: str | None = None
    """Where the remediator keeps its status ConfigMap (its breaker holds resets); None:
    ``remediation.decide.DEFAULT_NAMESPACE``."""
    repair: bool = False
    repair_interval: float | None = None
    """Seconds between the repair loop's passes; None: ``GpuLoopAgent.run``'s."""
    xid_overrides: Mapping[int, XidOverride] = field(default_factory=dict)
    burn_in: BurnInConfig | None = None
    gate_startup: bool = False
    gate_burn_in: bool = False
    startup_taint: str | None = None
    """None: ``remediation.readiness``'s taint."""
    validations_dir: str | None = None


@dataclass(frozen=True, kw_only=True)
class MigManagerSettings:
    """``gpuchain mig-manager``: the Node's nvidia.com/mig.config label applied to the GPUs."""

    config_file: str | None = None
    evict: bool = False
    timeout: float = 300.0
    interval: float = 2.0
    resync: float | None = None
    """None: the manager's safety-net resync (``mig.manager.RESYNC_SECONDS``)."""
    operands: tuple[str, ...] | None = None
    """Deploy-label suffixes paused around a change; None: ``mig.agent.OPERANDS``."""
    default_config: str | None = None


@dataclass(frozen=True, kw_only=True)
class DraPluginSettings:
    """``gpuchain dra-plugin``: the DRA kubelet plugin, driver gpu.gpuchain.io."""

    registry_dir: Path | None = None
    plugin_dir: Path | None = None
    cdi_dir: Path | None = None
    state_dir: Path | None = None
    """None each: the kubelet's and the runtime's directories (``dra.server``, ``gpu.cdi``, ``dra.driver``)."""
    resync: float = 30.0
    recovery_quiet_seconds: float | None = None
    dev_root: Path = Path("/")
    unlabelled: Allocator = DEVICE_PLUGIN
    """Who serves a node without the ``gpuchain.io/gpu.allocator`` label (``kube.allocator``):
    ``device-plugin`` (the driver publishes nothing there) or ``dra``."""
    device_taints: bool = False
    """Publish an unhealthy device with a taint instead of leaving it out of the slice."""
    partitionable_mig: bool = False
    """Publish MIG-capable GPUs as partitionable devices, MIG devices made on Prepare (``dra.partitions``)."""
    gpu_shares: bool = False
    """Publish whole GPUs for several claims to share, each with its memory and SMs (``dra.shares``)."""
    mps_root: Path | None = None
    """With ``gpu_shares``: where the MPS control daemons enforcing the shares keep their directories
    (``dra.mps``); None: no daemon."""


@dataclass(frozen=True, kw_only=True)
class ValidatorSettings:
    """The validator's GPU links, kept current: ``driver-ready`` and ``toolkit-ready`` written while
    the check passes and removed when it fails, as ``gpuchain validate driver|toolkit`` write them once."""

    directory: Path | None = None
    """None: the operator's validations directory (``validator.ready.DEFAULT_DIR``)."""
    dev_dir: Path = Path("/dev")
    interval: float = 60.0


RoleSettings = (
    DevicePluginSettings
    | ExporterSettings
    | GfdSettings
    | GpuHealthSettings
    | MigManagerSettings
    | DraPluginSettings
    | ValidatorSettings
)
