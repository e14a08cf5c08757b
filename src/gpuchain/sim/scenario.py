"""Scenario files: a simulated cluster described as facts, from which every symptom follows.

A scenario says what the nodes *are* (GPU preset, kernel, a pre-installed host driver, whether
containerd got its ``nvidia`` runtime, node labels, MIG layout and state, GPUs that fell off the
bus) and what the operator was told (the ClusterPolicy, the device plugin ConfigMap, which
kernels have a driver build). It does not say "driver CrashLoopBackOff": the builder derives
each link's state from the facts, the way the real chain would, so a scenario cannot describe a
symptom without its cause. Files are strict (unknown keys are errors naming file:line:field).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpuchain.api.config.v1.config import Config as DevicePluginConfig
from gpuchain.common.schema import validate
from gpuchain.common.yamlfile import ConfigFileError, load_yaml_file, load_yaml_model
from gpuchain.gpu.topology import preset_names
from gpuchain.mig.agent import State as MigState
from gpuchain.mig.config import default_config
from gpuchain.operator.operands import NODE_AGENT, OPERANDS
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
#: Node problems the kubelet (or the node lifecycle controller) reports as conditions and taints.
NodeProblem = Literal["kubelet-stopped", "memory-pressure", "disk-pressure", "pid-pressure", "network-unavailable"]
NODE_PROBLEMS: tuple[str, ...] = get_args(NodeProblem)
#: Suffixes allowed after ``nvidia.com/gpu.deploy.`` in ``optOut`` ("operands" means all of them;
#: "node-agent" the node agent's roles, in its layout).
OPT_OUT_KEYS = ("operands", *(o.deploy for o in OPERANDS), NODE_AGENT.deploy)
#: The layout every simulated stack renders unless its policy says ``nodeAgent: {enabled: true}``
#: (gpuchain's stack only): one DaemonSet per operand, the names the scenarios' evidence knows.
PER_OPERAND = {"nodeAgent": {"enabled": False}}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


def _dns_name(value: str) -> str:
    if not _NAME.match(value) or len(value) > 63:
        raise ValueError("must be a lower-case DNS name (letters, digits, '-', '.'), at most 63 characters")
    return value


@cache
def _known_layouts() -> frozenset[str]:
    """The MIG manager's named layouts, read once: building its default config checks every layout
    against every GPU model, a third of a second that each MIG scenario would otherwise pay."""
    return frozenset(default_config().mig_configs)


class MigFacts(_Strict):
    """The node's MIG request (``nvidia.com/mig.config``) and how far the MIG manager got."""

    config: str = Field(description="a layout name of the MIG manager's config, e.g. all-1g.10gb")
    state: MigState = MigState.SUCCESS
    reason: str = Field("", description="what the MIG manager wrote in nvidia.com/mig.config.state.reason")

    @field_validator("config")
    @classmethod
    def _known_layout(cls, value: str) -> str:
        known = _known_layouts()
        if value not in known:
            raise ValueError(f"unknown MIG layout; use one of {', '.join(sorted(known))}")
        return value


class NodeGroup(_Strict):
    """One node, or ``count`` identical nodes named ``<name>-0`` .. ``<name>-<count-1>``."""

    name: str
    count: int = Field(1, ge=1, le=5000)
    gpu: bool = True
    preset: str = "h100-80gb-x8"
    kernel: str = "5.15.0-105-generic"
    os_image: str = Field("Ubuntu 22.04.4 LTS", alias="osImage")
    labels: dict[str, str] = Field(default_factory=dict)
    host_driver: str | None = Field(None, alias="hostDriver", description="version of a pre-installed host driver")
    driver_version: str | None = Field(
        None, alias="driverVersion", description="driver container version on this node (default: the policy's)"
    )
    runtime_configured: bool = Field(True, alias="runtimeConfigured")
    device_plugin_config: str | None = Field(None, alias="devicePluginConfig")
    mig: MigFacts | None = None
    lost_gpus: list[int] = Field(default_factory=list, alias="lostGpus")
    opt_out: list[str] = Field(default_factory=list, alias="optOut")
    exporter_down: bool = Field(False, alias="exporterDown")
    lost_device_rules: bool = Field(
        False,
        alias="lostDeviceRules",
        description="systemd reloaded its units on a node without /dev/char symlinks for the NVIDIA devices: "
        "running GPU containers lost their device cgroup rules (NVIDIA/nvidia-container-toolkit#48)",
    )
    taints: list[dict[str, str]] = Field(default_factory=list, description="node taints (key, value, effect)")
    nfd: bool = Field(True, description="Node Feature Discovery labelled the node's PCI devices (pci-10de)")
    stale_allocations: bool = Field(
        False,
        alias="staleAllocations",
        description="the kubelet's device manager still counts GPUs of deleted pods as allocated "
        "(kubernetes/kubernetes#130145): GPU pods placed here fail admission",
    )
    distribution: Literal["kubeadm", "k3s", "rke2"] = Field(
        "kubeadm", description="the Kubernetes distribution: where its containerd keeps socket and config"
    )
    container_runtime: str | None = Field(
        None,
        alias="containerRuntime",
        description="status.nodeInfo.containerRuntimeVersion (default: the distribution's containerd)",
    )
    secure_boot: bool = Field(
        False, alias="secureBoot", description="UEFI Secure Boot on: the kernel loads only signed modules"
    )
    inotify_exhausted: bool = Field(
        False,
        alias="inotifyExhausted",
        description="fs.inotify.max_user_instances is used up on the node (NVIDIA/gpu-operator#441)",
    )
    registration_lost: bool = Field(
        False,
        alias="registrationLost",
        description="the kubelet dropped the running device plugin's registration: capacity reads 0 "
        "(NVIDIA/k8s-device-plugin#1228)",
    )
    node_problems: list[NodeProblem] = Field(
        default_factory=list,
        alias="nodeProblems",
        description="what the kubelet reports on the node: " + ", ".join(NODE_PROBLEMS),
    )
    workload: Literal["container", "vm-passthrough", "vm-vgpu"] = Field(
        "container",
        description="the GPU Operator's nvidia.com/gpu.workload.config: vm-passthrough or vm-vgpu nodes run the "
        "sandbox operands (sim/sandbox.py) instead of the container operands",
    )
    vgpu_type: str = Field("", alias="vgpuType", description="vm-vgpu: the vGPU type (nvidia.com/vgpu.config)")
    pci_device_name: str = Field(
        "",
        alias="pciDeviceName",
        description="vm-passthrough: the GPUs' PCI device name the KubeVirt plugin announces (e.g. GA102GL_A10); "
        "default: the preset's model name",
    )

    @field_validator("name")
    @classmethod
    def _dns(cls, value: str) -> str:
        return _dns_name(value)

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str) -> str:
        if value not in preset_names():
            raise ValueError(f"unknown preset; use one of {', '.join(preset_names())}")
        return value

    @field_validator("opt_out")
    @classmethod
    def _known_operands(cls, value: list[str]) -> list[str]:
        bad = [v for v in value if v not in OPT_OUT_KEYS]
        if bad:
            raise ValueError(f"{', '.join(bad)}: not an operand; use {', '.join(OPT_OUT_KEYS)}")
        return value

    @model_validator(mode="after")
    def _vgpu_type(self) -> NodeGroup:
        if self.workload == "vm-vgpu" and not self.vgpu_type:
            raise ValueError("workload vm-vgpu needs vgpuType (the vGPU type, e.g. A100-4C)")
        return self

    @field_validator("lost_gpus")
    @classmethod
    def _distinct(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value) or any(i < 0 for i in value):
            raise ValueError("GPU indexes must be distinct and >= 0")
        return value

    def node_names(self) -> list[str]:
        """The names of the nodes this group stands for."""
        return [self.name] if self.count == 1 else [f"{self.name}-{i}" for i in range(self.count)]


class Workload(_Strict):
    """``count`` pods asking for ``gpus`` of ``resource``, placed first-fit (or on ``node``)."""

    name: str
    namespace: str = "default"
    count: int = Field(1, ge=1, le=100_000)
    gpus: int = Field(1, ge=0, le=64, description="0: asks for no GPU (then ``node`` places it)")
    resource: str = "nvidia.com/gpu"
    node: str | None = None
    visible_devices: str | None = Field(
        None, alias="visibleDevices", description="NVIDIA_VISIBLE_DEVICES in the container's env (e.g. all)"
    )
    memory_mib: int = Field(
        0, ge=0, alias="memoryMib", description="framebuffer each pod's process holds on each of its GPUs (MiB)"
    )
    sm_percent: int = Field(0, ge=0, le=100, alias="smPercent", description="share of the GPU's SMs it keeps busy")

    @field_validator("name", "namespace")
    @classmethod
    def _dns(cls, value: str) -> str:
        return _dns_name(value)


_SOURCE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#[0-9]+$")
#: What ``source`` says of a failure scenario for which no public report was found: said plainly,
#: never an invented issue number.
NO_SOURCE = "none found"
#: What ``gpuchain sim list`` shows for a healthy baseline instead of a source.
BASELINE = "healthy baseline"


def is_upstream_source(value: str) -> bool:
    """Whether ``value`` names a public upstream report as ``owner/repo#number``."""
    return bool(_SOURCE.match(value))


def source_url(value: str) -> str | None:
    """The web address of an ``owner/repo#number`` report (GitHub sends an issue number that is a
    pull request on to it), None for anything else."""
    if not is_upstream_source(value):
        return None
    repo, number = value.split("#")
    return f"https://github.com/{repo}/issues/{number}"


class Scenario(_Strict):
    """A whole simulated cluster: nodes, operator settings, workloads and what the doctor should say."""

    name: str
    stack: Literal["gpuchain", "gpu-operator", "nvidia-device-plugin", "eks", "aks", "gke", "none"] = Field(
        "gpuchain",
        description="which GPU stack the cluster runs; the simulator renders its object names "
        "(none: GPU nodes and no stack installed)",
    )
    source: str = Field(
        "",
        description=f"the public upstream report the scenario comes from, owner/repo#number, or {NO_SOURCE!r} "
        "when no public report matches it",
    )
    baseline: bool = Field(
        False, description="a healthy baseline: nothing is wrong, so it has no source and the doctor must name nothing"
    )
    description: str = ""
    symptom: str = Field("", description="what a user sees, in the words of the error they meet")
    expect: list[str] = Field(default_factory=list, description="finding ids the doctor must name")
    namespace: str = "gpu-operator"
    policy_name: str = Field("cluster-policy", alias="policyName")
    policy: dict[str, Any] = Field(default_factory=dict, description="ClusterPolicy spec, NVIDIA keys")
    policy_deleted: bool = Field(
        False,
        alias="policyDeleted",
        description="the ClusterPolicy was deleted and its operand DaemonSets orphaned (they run, nothing "
        "reconciles them)",
    )
    operator_node_selector: dict[str, str] = Field(
        default_factory=dict,
        alias="operatorNodeSelector",
        description="the GPU Operator Deployment's nodeSelector (its chart's operator.nodeSelector); set, the "
        "operator's pod is rendered, and when no node carries these labels it stays Pending with the scheduler's "
        "words: the operator never runs, so no operand DaemonSet, RuntimeClass or ClusterPolicy status exists",
    )
    missing_images: list[str] = Field(
        default_factory=list,
        alias="missingImages",
        description="image references the registry does not have (a mistyped version in the policy)",
    )
    driver_builds: list[str] | None = Field(
        None, alias="driverBuilds", description="kernels the driver image has a build for (None: every kernel)"
    )
    device_plugin_configs: dict[str, dict[str, Any]] = Field(default_factory=dict, alias="devicePluginConfigs")
    nodes: list[NodeGroup] = Field(min_length=1)
    workloads: list[Workload] = Field(default_factory=list)

    @field_validator("name", "namespace", "policy_name")
    @classmethod
    def _dns(cls, value: str) -> str:
        return _dns_name(value)

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        if value and value != NO_SOURCE and not _SOURCE.match(value):
            raise ValueError(f"must be owner/repo#number, e.g. NVIDIA/gpu-operator#1234, or {NO_SOURCE!r}")
        return value

    @field_validator("policy")
    @classmethod
    def _valid_policy(cls, value: dict[str, Any]) -> dict[str, Any]:
        parsed = parse_policy({**PER_OPERAND, **value})
        if isinstance(parsed, list):
            raise ValueError("; ".join(str(p) for p in parsed))
        return value

    @field_validator("device_plugin_configs")
    @classmethod
    def _valid_configs(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for key, body in value.items():
            try:
                validate(DevicePluginConfig, body)
            except ValueError as exc:
                raise ValueError(f"config {key!r} is not a valid device plugin config: {exc}") from None
        return value

    @model_validator(mode="after")
    def _baseline_or_sourced(self) -> Scenario:
        if self.baseline and self.source:
            raise ValueError(f"a healthy baseline comes from no report: drop source {self.source!r} or baseline")
        if self.baseline and self.expect:
            raise ValueError(f"a healthy baseline expects no finding, not {', '.join(self.expect)}")
        return self

    @model_validator(mode="after")
    def _unique_nodes(self) -> Scenario:
        names = [n for g in self.nodes for n in g.node_names()]
        dup = sorted({n for n in names if names.count(n) > 1}) if len(set(names)) != len(names) else []
        if dup:
            raise ValueError(f"node names must be unique; repeated: {', '.join(dup[:5])}")
        unknown = [w.node for w in self.workloads if w.node and w.node not in set(names)]
        if unknown:
            raise ValueError(f"workloads name nodes that do not exist: {', '.join(str(u) for u in unknown)}")
        return self

    @model_validator(mode="after")
    def _node_agent_layout(self) -> Scenario:
        """The node agent layout only where the simulator renders it: gpuchain's stack with the
        validator role on (its init containers tell the lower links' story), and its opt-out label
        only there (elsewhere no DaemonSet reads it)."""
        spec = parse_policy({**PER_OPERAND, **self.policy})
        if not isinstance(spec, ClusterPolicySpec):
            return self  # `_valid_policy` refused it
        agent = spec.node_agent.enabled
        if agent and (self.stack != "gpuchain" or not spec.validator.enabled):
            raise ValueError("policy nodeAgent.enabled is simulated for stack gpuchain with its validator enabled")
        if not agent and any(NODE_AGENT.deploy in g.opt_out for g in self.nodes):
            raise ValueError(f"optOut {NODE_AGENT.deploy} needs the node agent layout (policy nodeAgent.enabled)")
        return self

    @model_validator(mode="after")
    def _vm_nodes_on_the_operator(self) -> Scenario:
        vms = [g.name for g in self.nodes if g.workload != "container"]
        if vms and self.stack != "gpu-operator":
            raise ValueError(f"workload vm-* is the GPU Operator's sandbox workloads; stack {self.stack!r} has none")
        return self

    @model_validator(mode="after")
    def _operator_selector_on_the_operator(self) -> Scenario:
        if self.operator_node_selector and self.stack != "gpu-operator":
            raise ValueError(f"operatorNodeSelector is the GPU Operator's; stack {self.stack!r} has no such Deployment")
        return self

    @property
    def operator_node(self) -> str | None:
        """The first node the operator's nodeSelector accepts (a node's own labels plus the kubelet's
        kubernetes.io/hostname and kubernetes.io/os), None when none does."""
        wanted = self.operator_node_selector.items()
        return next(
            (
                name
                for g in self.nodes
                for name in g.node_names()
                if wanted <= {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **g.labels}.items()
            ),
            None,
        )

    @property
    def operator_pending(self) -> bool:
        """The operator's pod (rendered only with an ``operatorNodeSelector``) finds no node."""
        return bool(self.operator_node_selector) and self.operator_node is None

    @property
    def origin(self) -> str:
        """Where the scenario comes from, as ``gpuchain sim list`` shows it: the upstream report,
        "healthy baseline", "none found", or "" for a scenario that says nothing."""
        return BASELINE if self.baseline else self.source

    @property
    def node_count(self) -> int:
        """How many nodes the scenario builds."""
        return sum(g.count for g in self.nodes)


def builtin_dir() -> Path:
    """Where the built-in scenarios live (inside the package)."""
    return Path(str(resources.files("gpuchain.sim").joinpath("scenarios")))


def scenario_names() -> list[str]:
    """Names of the built-in scenarios, sorted."""
    return sorted(p.stem for p in builtin_dir().glob("*.yaml"))


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A built-in scenario by name, or a scenario file by path; ConfigFileError on a bad one."""
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = builtin_dir() / f"{name_or_path}.yaml"
        if not path.exists():
            raise ConfigFileError(
                str(name_or_path),
                line=None,
                field="",
                reason=f"no such scenario; built-in ones: {', '.join(scenario_names())}",
            )
    return load_yaml_file(Scenario, path=path)


def parse_scenario(text: str, source: str = "<scenario>") -> Scenario:
    """Validate scenario text (tests, generated scenarios)."""
    return load_yaml_model(Scenario, text=text, source=source)
