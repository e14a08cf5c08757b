"""What the chain looks like on one simulated node, derived from the scenario's facts (pure).

`plan_node` answers, link by link, what the real stack would do with these facts: a driver
container on a kernel it has no build for crash-loops; one started over a loaded host driver
cannot unload it and crash-loops; a toolkit that never registered the ``nvidia`` handler leaves
every pod of that RuntimeClass without a sandbox; a device plugin whose config label names a
missing key refuses to start; operands paused for a MIG change are not scheduled. Capacity,
allocatable and feature-discovery labels come from the device plugin's and GFD's own pure
functions over a SimBackend inventory, so the numbers are the ones the real code computes.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

from gpuchain.api.config.v1.config import Config as DevicePluginConfig
from gpuchain.api.config.v1.environment import apply_env
from gpuchain.api.config.v1.flags import MigStrategy
from gpuchain.common.labels import GPU_PRESENT, MIG_CAPABLE
from gpuchain.common.schema import validate
from gpuchain.deviceplugin.resources import Resource, ResourceMappingError, map_resources
from gpuchain.discovery.labels import gfd_labels
from gpuchain.doctor.node import DISTRIBUTIONS, KUBEADM, RECOGNISED_RUNTIMES, Distribution
from gpuchain.doctor.placement import tolerates
from gpuchain.gpu.model import Inventory
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import DriverSpec, load_preset
from gpuchain.mig.agent import State as MigState
from gpuchain.mig.apply import apply as mig_apply
from gpuchain.mig.config import default_config
from gpuchain.operator.operands import (
    DCGM_EXPORTER,
    DEVICE_PLUGIN,
    DRIVER,
    GFD,
    MIG_MANAGER,
    NODE_AGENT,
    OPERANDS,
    TOOLKIT,
    VALIDATOR,
    Operand,
    agent_operands,
    enabled,
)
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy
from gpuchain.sim.sandbox import container_opt_out
from gpuchain.sim.scenario import PER_OPERAND, NodeGroup, Scenario
from gpuchain.sim.stacks import HOST_DRIVER, HOST_STACKS, host_tolerations, operand_image

#: CUDA driver API version of each driver branch (what ``nvidia-smi`` prints as "CUDA Version").
CUDA_OF_BRANCH = {
    "470": "11.4",
    "525": "12.0",
    "535": "12.2",
    "545": "12.3",
    "550": "12.4",
    "555": "12.5",
    "560": "12.6",
    "565": "12.7",
    "570": "12.8",
    "575": "12.9",
    "580": "13.0",
}
DEFAULT_CONFIG_MAP = "device-plugin-config"

# Link states of the simulated truth (the doctor never sees these, only the objects they produce).
OK = "ok"
OFF = "off"  # not deployed on this node: disabled in the policy or opted out by a deploy label
LINK_PAUSED = "paused"  # a link state, not a label value: not scheduled while the MIG manager changes the layout
BLOCKED = "blocked"  # waiting behind a broken lower link
KERNEL_MISMATCH = "kernel-mismatch"
HOST_CONFLICT = "host-conflict"
HOST = "host"  # a pre-installed host driver serves the node
MISSING = "missing"  # no driver at all
RUNTIME_MISSING = "runtime-missing"
CONFIG_MISSING = "config-missing"
MIG_INVALID = "mig-invalid"  # MIG layout does not fit mig.strategy=single: the plugin refuses to start
NO_NVML = "no-nvml"  # the plugin runs without the NVIDIA runtime: NVML not found, announces nothing
DOWN = "down"
SECURE_BOOT = "secure-boot"  # the driver container built nvidia.ko, the kernel refuses an unsigned module
SOCKET_MISSING = "socket-missing"  # the toolkit signals a containerd socket this node does not have
INOTIFY = "inotify"  # the device plugin cannot create its FS watcher: inotify instances used up
IMAGE_MISSING = "image-missing"  # the image reference does not exist: ImagePullBackOff
#: Operand states whose pod crash-loops with the log that says why.
CRASHING = frozenset(
    {KERNEL_MISMATCH, HOST_CONFLICT, CONFIG_MISSING, DOWN, MIG_INVALID, SECURE_BOOT, SOCKET_MISSING, INOTIFY}
)


@dataclass(frozen=True, kw_only=True)
class NodePlan:
    """One node's chain as the simulator decided it; the objects are rendered from this."""

    name: str
    group: NodeGroup
    gpu: bool
    opted_out: frozenset[str]  #: deploy suffixes switched off ("operands" = all)
    paused: frozenset[str]  #: deploy suffixes paused for a MIG change
    driver: str
    driver_version: str | None
    toolkit: str
    plugin: str
    gfd: str
    exporter: str
    mig_manager: str
    config_key: str | None
    resources: tuple[Resource, ...] = ()
    lost: frozenset[int] = frozenset()
    labels: dict[str, str] = field(default_factory=dict)  #: feature-discovery labels (may be stale)
    mig_misfit: str = ""  #: why the MIG layout does not fit the strategy, when it does not
    registered: bool = True  #: the kubelet keeps the plugin's registration (False: capacity reads 0)
    images: dict[str, str] = field(default_factory=dict)  #: operand state -> image reference its pod runs

    @property
    def capacity(self) -> dict[str, int]:
        """Extended resources the kubelet reports: every announced device, healthy or not (0 once the
        kubelet dropped the plugin's registration)."""
        return {r.name: len(r.devices) if self.registered else 0 for r in self.resources}

    @property
    def allocatable(self) -> dict[str, int]:
        """Healthy devices: the ones not on a GPU that fell off the bus."""
        if not self.registered:
            return {r.name: 0 for r in self.resources}
        return {r.name: sum(d.gpu_index not in self.lost for d in r.devices) for r in self.resources}

    def deployed(self, operand: Operand) -> bool:
        """Does the operand's DaemonSet put a pod on this node?"""
        return self.state_of(operand) not in (OFF, LINK_PAUSED)

    def state_of(self, operand: Operand) -> str:
        """The simulated state of an operand's pod on this node."""
        states = {
            DRIVER.state: self.driver if self.driver not in (HOST, MISSING) else OFF,
            DEVICE_PLUGIN.state: self.plugin,
            GFD.state: self.gfd,
            DCGM_EXPORTER.state: self.exporter,
            MIG_MANAGER.state: self.mig_manager,
        }
        if operand.state in states:
            return states[operand.state]
        # A node-agent opt-out only exists in the node agent's layout (the scenario says), where it
        # takes the validator role off as well.
        agent_off = NODE_AGENT.deploy in self.opted_out and operand is VALIDATOR
        if not self.gpu or "operands" in self.opted_out or operand.deploy in self.opted_out or agent_off:
            return OFF
        return self.toolkit if operand.state == "container-toolkit" else self._validator()

    def _validator(self) -> str:
        if self.driver not in (OK, HOST):
            return BLOCKED
        return self.toolkit


def policy_of(scenario: Scenario) -> ClusterPolicySpec:
    """The scenario's ClusterPolicy spec, with the device plugin ConfigMap wired in when configs are given."""
    spec = {**PER_OPERAND, **scenario.policy}
    if scenario.stack in HOST_STACKS:
        # The node image brings driver and runtime; only the device plugin is deployed.
        for key in ("driver", "toolkit", "validator", "dcgmExporter", "gfd", "migManager"):
            spec[key] = {**dict(spec.get(key) or {}), "enabled": False}
    if scenario.stack == "none":
        # Nothing is installed: no operand of any link runs.
        for key in ("driver", "toolkit", "validator", "devicePlugin", "dcgmExporter", "gfd", "migManager"):
            spec[key] = {**dict(spec.get(key) or {}), "enabled": False}
    if scenario.device_plugin_configs:
        dp = dict(spec.get("devicePlugin") or {})
        cfg = dict(dp.get("config") or {})
        cfg.setdefault("name", DEFAULT_CONFIG_MAP)
        if "default" in scenario.device_plugin_configs:
            cfg.setdefault("default", "default")
        dp["config"] = cfg
        spec["devicePlugin"] = dp
    parsed = parse_policy(spec)
    if isinstance(parsed, list):  # the scenario validator already refused these
        raise ValueError("; ".join(str(p) for p in parsed))
    return parsed


def cuda_for(driver_version: str, fallback: str = "12.8") -> str:
    """The CUDA version a driver branch supports (its first number), ``fallback`` if unknown."""
    return CUDA_OF_BRANCH.get(driver_version.split(".", 1)[0], fallback)


def backend_for(preset: str, *, node: str, driver_version: str | None, mig_layout: str | None) -> SimBackend:
    """A SimBackend for one node: the preset, the node's driver version, its MIG layout applied."""
    topo = load_preset(preset, node)
    if driver_version:
        driver = DriverSpec(version=driver_version, cuda_version=cuda_for(driver_version))
        topo = dataclasses.replace(topo, driver=driver)
    backend = SimBackend(topo)
    if mig_layout:
        mig_apply(backend, config=default_config(), name=mig_layout)
    return backend


@functools.lru_cache(maxsize=256)
def _inventory(preset: str, seed: str, driver_version: str | None, mig_layout: str | None) -> Inventory:
    """One inventory per distinct node shape, so a 1,000-node scenario builds in well under a second."""
    backend = backend_for(preset, node=seed, driver_version=driver_version, mig_layout=mig_layout)
    inv = backend.inventory()
    backend.close()
    return inv


def plugin_config(scenario: Scenario, *, policy: ClusterPolicySpec, key: str | None) -> DevicePluginConfig | None:
    """The device plugin config one node gets (None: its label names a key that does not exist).

    As the operator runs it: the ConfigMap key named by the node label (else the policy's
    default), with ``MIG_STRATEGY`` from the policy overriding the file.
    """
    env = {"MIG_STRATEGY": policy.mig.strategy}
    if key is None:
        return apply_env(DevicePluginConfig(), env=env)
    body = scenario.device_plugin_configs.get(key)
    if body is None:
        return None
    return apply_env(validate(DevicePluginConfig, body), env=env)


def _mig_invalid_labels(inventory: Inventory, config: DevicePluginConfig) -> dict[str, str]:
    """GFD's labels when strategy single meets a non-uniform layout (NVIDIA/k8s-device-plugin
    internal/lm/mig-strategy.go newInvalidMigStrategyLabeler): product ``<model>-MIG-INVALID``
    and count, replicas and memory 0."""
    mixed = dataclasses.replace(config, flags=dataclasses.replace(config.flags, mig_strategy=MigStrategy.MIXED))
    labels = dict(gfd_labels(inventory, config=mixed))
    model = labels.get("nvidia.com/gpu.product", "NVIDIA-GPU").split("-MIG-")[0]
    labels.update(
        {
            "nvidia.com/gpu.product": f"{model}-MIG-INVALID",
            "nvidia.com/gpu.count": "0",
            "nvidia.com/gpu.replicas": "0",
            "nvidia.com/gpu.memory": "0",
            "nvidia.com/gpu.sharing-strategy": "",
        }
    )
    return labels


def config_key(scenario: Scenario, *, policy: ClusterPolicySpec, group: NodeGroup) -> str | None:
    """Which ConfigMap key the node's device plugin reads: its label, else the policy default."""
    if group.device_plugin_config:
        return group.device_plugin_config
    if policy.device_plugin.config.default:
        return policy.device_plugin.config.default
    # As NVIDIA's plugin: with no label and no default, a ConfigMap of exactly one config is used.
    return next(iter(scenario.device_plugin_configs)) if len(scenario.device_plugin_configs) == 1 else None


def untolerated(policy: ClusterPolicySpec, *, group: NodeGroup, stack: str) -> dict[str, str] | None:
    """The first NoSchedule/NoExecute taint of the group that the operand DaemonSets of ``stack`` do not tolerate."""
    tolerations = (
        host_tolerations(stack) if stack in HOST_STACKS else [t.to_dict() for t in policy.daemonsets.tolerations]
    )
    return next(
        (t for t in group.taints if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, t)),
        None,
    )


def _off(
    policy: ClusterPolicySpec, group: NodeGroup, operand: Operand, opted: frozenset[str], tainted: bool = False
) -> bool:
    """Not deployed here: no GPU, disabled, opted out (the node agent's label for its roles), or kept
    off by a taint it does not tolerate."""
    label = NODE_AGENT.deploy if operand in agent_operands(policy) else operand.deploy
    return not group.gpu or not enabled(policy, operand) or "operands" in opted or label in opted or tainted


def toolkit_socket(policy: ClusterPolicySpec) -> str:
    """The containerd socket NVIDIA's toolkit signals: its CONTAINERD_SOCKET (or RUNTIME_SOCKET) env,
    else containerd's default."""
    env = {e.name: e.value for e in policy.toolkit.env}
    return env.get("CONTAINERD_SOCKET") or env.get("RUNTIME_SOCKET") or KUBEADM.containerd_socket


def distribution(group: NodeGroup) -> Distribution:
    """The node's distribution (where its containerd listens)."""
    return next(d for d in DISTRIBUTIONS if d.name == group.distribution)


def plan_node(scenario: Scenario, *, policy: ClusterPolicySpec, group: NodeGroup, name: str) -> NodePlan:
    """Derive every link's state on node ``name`` from the facts of its group."""
    opted = frozenset(group.opt_out) | container_opt_out(group)  # a VM node runs no container operand
    if scenario.stack in HOST_STACKS and group.host_driver is None and group.gpu:
        group = group.model_copy(update={"host_driver": HOST_DRIVER})
    # A taint the DaemonSets do not tolerate, or (operator stacks) no GPU label to select on: NFD's
    # PCI label, or nvidia.com/gpu.present set by hand.
    tainted = untolerated(policy, group=group, stack=scenario.stack) is not None or (
        scenario.stack not in HOST_STACKS and not group.nfd and group.labels.get(GPU_PRESENT) != "true"
    )
    images = {
        op.state: operand_image(scenario.stack, raw_policy=scenario.policy, policy=policy, operand=op)
        for op in OPERANDS
    }
    missing = {state for state, ref in images.items() if ref in scenario.missing_images}
    mig = group.mig
    pausing = mig is not None and mig.state in (MigState.PENDING, MigState.REBOOTING)
    paused = frozenset(("device-plugin", "gpu-feature-discovery", "dcgm-exporter")) if pausing else frozenset()

    # 1. driver
    container = not _off(policy, group, DRIVER, opted, tainted)
    if not group.gpu:
        driver, version = OFF, None
    elif container and DRIVER.state in missing:
        driver, version = IMAGE_MISSING, None
    elif container and group.host_driver:
        driver, version = HOST_CONFLICT, group.host_driver
    elif container and scenario.driver_builds is not None and group.kernel not in scenario.driver_builds:
        driver, version = KERNEL_MISMATCH, None
    elif container and group.secure_boot:
        driver, version = SECURE_BOOT, None
    elif container:
        driver, version = OK, group.driver_version or policy.driver.version
    elif group.host_driver:
        driver, version = HOST, group.host_driver
    else:
        driver, version = MISSING, None
    driver_ok = driver in (OK, HOST)

    # 2. toolkit
    if _off(policy, group, TOOLKIT, opted, tainted):
        toolkit = OFF
    elif not driver_ok:
        toolkit = BLOCKED
    elif TOOLKIT.state in missing:
        toolkit = IMAGE_MISSING
    elif toolkit_socket(policy) != distribution(group).containerd_socket:
        # NVIDIA/gpu-operator#406: it writes the config, cannot signal containerd, and exits.
        toolkit = SOCKET_MISSING
    elif group.container_runtime and group.container_runtime.partition("://")[0] not in RECOGNISED_RUNTIMES:
        # A runtime the toolkit cannot configure: the nvidia handler never appears in it.
        toolkit = RUNTIME_MISSING
    else:
        toolkit = OK if group.runtime_configured else RUNTIME_MISSING
    runtime_ok = driver_ok and (toolkit == OK or (toolkit == OFF and group.runtime_configured))

    def above(operand: Operand) -> str:
        if _off(policy, group, operand, opted, tainted):
            return OFF
        if operand.deploy in paused:
            return LINK_PAUSED
        if runtime_ok and operand.state in missing:
            return IMAGE_MISSING
        return OK if runtime_ok else BLOCKED

    # 3. device plugin, 4. GFD / exporter / MIG manager
    key = config_key(scenario, policy=policy, group=group)
    plugin = above(DEVICE_PLUGIN)
    if plugin == BLOCKED and scenario.stack in HOST_STACKS and driver_ok and not group.runtime_configured:
        # No operator gates it: the plugin starts under runc and finds no NVML library.
        plugin = NO_NVML
    dp_config = plugin_config(scenario, policy=policy, key=key)
    if plugin == OK and dp_config is None:
        plugin = CONFIG_MISSING
    if plugin == OK and group.inotify_exhausted:
        plugin = INOTIFY
    gfd = above(GFD)
    exporter = above(DCGM_EXPORTER)
    if exporter == OK and group.exporter_down:
        exporter = DOWN
    layout = mig.config if mig is not None and mig.state == MigState.SUCCESS else None
    inventory = _inventory(group.preset, group.name, version, layout) if driver_ok else None
    resources: tuple[Resource, ...] = ()
    mig_misfit = ""
    if plugin == OK and inventory is not None and dp_config is not None:
        try:
            resources = tuple(map_resources(inventory, dp_config))
        except ResourceMappingError as exc:
            # As NVIDIA's plugin: a MIG layout that does not fit strategy single stops it.
            plugin, mig_misfit = MIG_INVALID, str(exc)
    labels: dict[str, str] = {}
    # NVIDIA's GFD hands its labels to Node Feature Discovery (a features.d file or a NodeFeature
    # object): without NFD on the node they never reach it. gpuchain's GFD can patch the node itself.
    through_nfd = scenario.stack != "gpuchain"
    if gfd in (OK, LINK_PAUSED) and inventory is not None and (group.nfd or not through_nfd):
        gfd_config = dp_config or DevicePluginConfig()
        try:
            labels = gfd_labels(inventory, config=gfd_config)
        except ResourceMappingError:
            labels = _mig_invalid_labels(inventory, gfd_config)
    # The MIG manager's DaemonSet selects nvidia.com/mig.capable=true, a label only GFD writes.
    mig_manager = above(MIG_MANAGER) if labels.get(MIG_CAPABLE) == "true" else OFF
    lost = frozenset(group.lost_gpus) if plugin == OK else frozenset()
    return NodePlan(
        name=name,
        group=group,
        gpu=group.gpu,
        opted_out=opted,
        paused=paused,
        driver=driver,
        driver_version=version if driver_ok else None,
        toolkit=toolkit,
        plugin=plugin,
        gfd=gfd,
        exporter=exporter,
        mig_manager=mig_manager,
        config_key=key,
        resources=resources,
        lost=lost,
        labels=labels,
        mig_misfit=mig_misfit,
        registered=not (group.registration_lost and plugin == OK),
        images=images,
    )
