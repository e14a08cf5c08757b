"""The ClusterPolicy spec's model: NVIDIA gpu-operator's keys with NVIDIA's spelling and defaults.

Every key of NVIDIA gpu-operator's ``nvidia.com/v1`` ClusterPolicy is a field here (``driver.enabled``,
``devicePlugin.config.name``, ``mig.strategy``, ``daemonsets.tolerations``, ``vgpuManager``,
``psp``, ...), so a policy written for NVIDIA's operator reads the same. The model and
:class:`Problem` are the types both `policy` (the parser) and `compat` (what each key does in
gpuchain) speak of; they live here, below both, so the parser can consult `compat` without a circle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from gpuchain import __version__
from gpuchain.operator.manifests import toleration_problem

GPUCHAIN_REPOSITORY = "ghcr.io/gpuchain"
#: Pod labels the operator sets and selects on; a policy may not set them.
RESERVED_LABELS = ("app", "app.kubernetes.io/managed-by")
GPUCHAIN_IMAGE = "gpuchain"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, extra="forbid")


class EnvVar(_Model):
    """One environment variable of an operand container (NVIDIA's schema: name and value only)."""

    name: str
    value: str = ""


class Toleration(_Model):
    """A pod toleration, checked as the API server checks it (types, operator, effect, key)."""

    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: StrictInt | None = None

    @model_validator(mode="after")
    def _valid(self) -> Toleration:
        why = toleration_problem(self.to_dict())
        if why:
            raise ValueError(why)
        return self

    def to_dict(self) -> dict[str, Any]:
        """The toleration as it goes into a pod spec (only the keys that are set)."""
        return self.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)


class Resources(_Model):
    """Container resource limits and requests (quantities as Kubernetes writes them)."""

    limits: dict[str, int | str] = Field(default_factory=dict)
    requests: dict[str, int | str] = Field(default_factory=dict)


class ImageSpec(_Model):
    """An operand's image and container settings: ``{repository}/{image}:{version}`` (or ``@sha256:...``)."""

    enabled: bool = True
    repository: str = GPUCHAIN_REPOSITORY
    image: str = GPUCHAIN_IMAGE
    version: str = __version__
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    image_pull_secrets: list[str] = Field(default_factory=list)
    env: list[EnvVar] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    resources: Resources | None = None
    host_network: bool = False

    def image_ref(self) -> str:
        """The full image reference the container uses."""
        base = f"{self.repository.rstrip('/')}/{self.image}" if self.repository else self.image
        if self.version.startswith("sha256:"):
            return f"{base}@{self.version}"
        return f"{base}:{self.version}" if self.version else base


class DrainSpec(_Model):
    """How a node is drained before its driver restarts (gpu-operator's upgradePolicy.drain)."""

    enable: bool = False
    force: bool = False
    pod_selector: str = ""
    timeout_seconds: int = Field(300, ge=0)
    delete_empty_dir: bool = False


class PodDeletionSpec(_Model):
    """How GPU pods are evicted before a driver restart (upgradePolicy.podDeletion)."""

    force: bool = False
    timeout_seconds: int = Field(300, ge=0)
    delete_empty_dir: bool = False


class WaitForCompletionSpec(_Model):
    """NVIDIA's wait for selected jobs before a driver restart; 0 seconds means no wait."""

    pod_selector: str = ""
    timeout_seconds: int = Field(0, ge=0)


class UpgradePolicy(_Model):
    """Node-by-node driver upgrades: how many at once and how many nodes may be unavailable."""

    auto_upgrade: bool = True
    max_parallel_upgrades: int = Field(1, ge=0)
    max_unavailable: int | str = "25%"
    pod_deletion: PodDeletionSpec = Field(default_factory=PodDeletionSpec)
    drain: DrainSpec = Field(default_factory=DrainSpec)
    wait_for_completion: WaitForCompletionSpec = Field(default_factory=WaitForCompletionSpec)


class PlainImage(_Model):
    """An image without defaults: NVIDIA's helper images gpuchain does not run."""

    repository: str = ""
    image: str = ""
    version: str = ""
    image_pull_policy: str = ""
    image_pull_secrets: list[str] = Field(default_factory=list)


class ImageWithEnv(PlainImage):
    """A helper image with env (NVIDIA's k8s-driver-manager)."""

    env: list[EnvVar] = Field(default_factory=list)


class NamedConfig(_Model):
    """A reference to a ConfigMap or Secret by name."""

    name: str = ""


class RepoConfig(_Model):
    """NVIDIA's ConfigMap of package repository files for the driver container."""

    config_map_name: str = ""


class LicensingConfig(_Model):
    """NVIDIA's vGPU guest driver licensing."""

    config_map_name: str = ""
    secret_name: str = ""
    nls_enabled: bool = False


class VirtualTopology(_Model):
    """NVIDIA's vGPU topology daemon configuration."""

    config: str = ""


class Probe(_Model):
    """A container probe's timing (NVIDIA's driver container probes)."""

    failure_threshold: int | None = Field(None, ge=1)
    initial_delay_seconds: int | None = None
    period_seconds: int | None = Field(None, ge=1)
    success_threshold: int | None = Field(None, ge=1)
    timeout_seconds: int | None = Field(None, ge=1)


class RdmaSpec(_Model):
    """GPUDirect RDMA (nvidia-peermem) in the driver container."""

    enabled: bool = False
    use_host_mofed: bool = False


class DriverSpec(ImageSpec):
    """The NVIDIA driver container (NVIDIA's published image); disable it for pre-installed drivers."""

    repository: str = "nvcr.io/nvidia"
    image: str = "driver"
    version: str = "570.124.06"
    upgrade_policy: UpgradePolicy = Field(default_factory=UpgradePolicy)
    kernel_module_type: Literal["auto", "open", "proprietary"] = "auto"
    use_open_kernel_modules: bool = False
    use_precompiled: bool = False
    use_nvidia_driver_crd: bool = Field(False, alias="useNvidiaDriverCRD")
    manager: ImageWithEnv = Field(default_factory=ImageWithEnv)
    rdma: RdmaSpec = Field(default_factory=RdmaSpec)
    repo_config: RepoConfig = Field(default_factory=RepoConfig)
    cert_config: NamedConfig = Field(default_factory=NamedConfig)
    licensing_config: LicensingConfig = Field(default_factory=LicensingConfig)
    virtual_topology: VirtualTopology = Field(default_factory=VirtualTopology)
    kernel_module_config: NamedConfig = Field(default_factory=NamedConfig)
    secret_env: str = ""
    liveness_probe: Probe | None = None
    readiness_probe: Probe | None = None
    startup_probe: Probe | None = None


class ToolkitSpec(ImageSpec):
    """The NVIDIA container toolkit (NVIDIA's published image)."""

    repository: str = "nvcr.io/nvidia/k8s"
    image: str = "container-toolkit"
    version: str = "v1.17.5-ubuntu20.04"
    install_dir: str = "/usr/local/nvidia"


class ConfigRef(_Model):
    """A ConfigMap of named configs and the key nodes use unless their label picks another."""

    name: str = ""
    default: str = ""


class MpsSpec(_Model):
    """Where the MPS control daemons keep their pipes, logs and shared memory on the host."""

    root: str = "/run/nvidia/mps"

    @field_validator("root")
    @classmethod
    def _absolute(cls, v: str) -> str:
        """A hostPath must be absolute; the API server would refuse the device plugin's DaemonSet."""
        if not v.startswith("/"):
            raise ValueError(f"{v!r} is not an absolute host path; give one such as /run/nvidia/mps")
        return v


class DevicePluginSpec(ImageSpec):
    """The gpuchain device plugin; ``config`` works as NVIDIA's (per-node label picks a key)."""

    config: ConfigRef = Field(default_factory=ConfigRef)
    mps: MpsSpec = Field(default_factory=MpsSpec)


class MigConfigRef(ConfigRef):
    """The MIG manager's ConfigMap of mig-parted layouts and the default layout."""

    default: str = "all-disabled"


class MigManagerSpec(ImageSpec):
    """The gpuchain MIG manager; ``config.default`` is the layout nodes get without a label."""

    config: MigConfigRef = Field(default_factory=MigConfigRef)
    gpu_clients_config: NamedConfig = Field(default_factory=NamedConfig)


class MigSpec(_Model):
    """How MIG devices are advertised: none, single or mixed (NVIDIA's strategies)."""

    strategy: Literal["none", "single", "mixed"] = "single"


class NodeAgentSpec(_Model):
    """gpuchain's layout switch (not in NVIDIA's ClusterPolicy): with ``enabled`` the validator,
    device plugin, exporter, GFD and MIG manager run as roles of one ``gpuchain node-agent``
    DaemonSet (one process, one NVML session per node), each role on while its own section's
    ``enabled`` is; ``false`` deploys one DaemonSet per operand, NVIDIA's layout."""

    enabled: bool = True


class RollingUpdate(_Model):
    """DaemonSet rolling update budget."""

    max_unavailable: int | str = "1"


class SecurityProfile(_Model):
    """A seccomp or AppArmor profile."""

    type: str
    localhost_profile: str | None = None


class SELinuxOptions(_Model):
    """SELinux labels of a pod."""

    level: str | None = None
    role: str | None = None
    type: str | None = None
    user: str | None = None


class Sysctl(_Model):
    """One namespaced sysctl of a pod."""

    name: str
    value: str


class WindowsOptions(_Model):
    """Windows-specific pod settings (kept for completeness of NVIDIA's schema)."""

    gmsa_credential_spec: str | None = None
    gmsa_credential_spec_name: str | None = None
    host_process: bool | None = None
    run_as_user_name: str | None = None


class PodSecurityContext(_Model):
    """The pod-level securityContext of every operand pod (core/v1 PodSecurityContext)."""

    app_armor_profile: SecurityProfile | None = None
    fs_group: int | None = None
    fs_group_change_policy: str | None = None
    run_as_group: int | None = None
    run_as_non_root: bool | None = None
    run_as_user: int | None = None
    se_linux_change_policy: str | None = None
    se_linux_options: SELinuxOptions | None = Field(None, alias="seLinuxOptions")
    seccomp_profile: SecurityProfile | None = None
    supplemental_groups: list[int] | None = None
    supplemental_groups_policy: str | None = None
    sysctls: list[Sysctl] | None = None
    windows_options: WindowsOptions | None = None

    def to_dict(self) -> dict[str, Any]:
        """The securityContext as it goes into a pod spec (only what is set)."""
        return self.model_dump(by_alias=True, exclude_none=True)


class DaemonsetsSpec(_Model):
    """Settings shared by every operand DaemonSet."""

    tolerations: list[Toleration] = Field(
        default_factory=lambda: [Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")]
    )
    priority_class_name: str = "system-node-critical"
    update_strategy: Literal["RollingUpdate", "OnDelete"] = "RollingUpdate"
    rolling_update: RollingUpdate = Field(default_factory=RollingUpdate)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    pod_security_context: PodSecurityContext | None = None


class RelabelConfig(_Model):
    """One Prometheus relabeling rule of a ServiceMonitor."""

    action: str = "replace"
    modulus: int | None = Field(None, ge=0)
    regex: str = ""
    replacement: str = ""
    separator: str = ""
    source_labels: list[str] = Field(default_factory=list)
    target_label: str = ""


class ServiceMonitorSpec(_Model):
    """NVIDIA's Prometheus Operator ServiceMonitor settings."""

    enabled: bool = False
    additional_labels: dict[str, str] = Field(default_factory=dict)
    honor_labels: bool = False
    interval: str = ""
    scrape_timeout: str = ""
    relabelings: list[RelabelConfig] = Field(default_factory=list)


class MetricsSpec(_Model):
    """NVIDIA's operator metrics settings."""

    service_monitor: ServiceMonitorSpec = Field(default_factory=ServiceMonitorSpec)


class OperatorSpec(_Model):
    """Cluster-wide operator settings."""

    default_runtime: Literal["containerd", "crio", "docker"] = "containerd"
    runtime_class: str = "nvidia"
    init_container: PlainImage = Field(default_factory=PlainImage)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)
    use_ocp_driver_toolkit: bool = Field(False, alias="use_ocp_driver_toolkit")


class ServiceSpec(_Model):
    """NVIDIA's Service settings for the exporter."""

    type: str = ""
    internal_traffic_policy: str = ""


class HpcJobMapping(_Model):
    """NVIDIA dcgm-exporter's HPC job to GPU mapping."""

    enabled: bool = False
    directory: str = ""


class DcgmExporterSpec(ImageSpec):
    """The gpuchain exporter; ``config.name`` is a ConfigMap whose dcgm-metrics.csv picks the metrics."""

    config: NamedConfig = Field(default_factory=NamedConfig)
    annotations: dict[str, str] = Field(default_factory=dict)
    host_pid: bool = Field(False, alias="hostPID")
    enable_pod_labels: bool = False
    enable_pod_uid: bool = Field(False, alias="enablePodUID")
    pod_label_allowlist_regex: list[str] = Field(default_factory=list)
    hpc_job_mapping: HpcJobMapping = Field(default_factory=HpcJobMapping)
    service: ServiceSpec = Field(default_factory=ServiceSpec)
    service_monitor: ServiceMonitorSpec = Field(default_factory=ServiceMonitorSpec)


class CheckEnv(_Model):
    """Extra env for one validator check."""

    env: list[EnvVar] = Field(default_factory=list)


class ValidatorSpec(ImageSpec):
    """The gpuchain validator; ``<check>.env`` adds env to that check's init container."""

    driver: CheckEnv = Field(default_factory=CheckEnv)
    toolkit: CheckEnv = Field(default_factory=CheckEnv)
    cuda: CheckEnv = Field(default_factory=CheckEnv)
    plugin: CheckEnv = Field(default_factory=CheckEnv)
    vfio_pci: CheckEnv = Field(default_factory=CheckEnv, alias="vfioPCI")
    vgpu_devices: CheckEnv = Field(default_factory=CheckEnv)
    vgpu_manager: CheckEnv = Field(default_factory=CheckEnv)


class Component(PlainImage):
    """A component of NVIDIA's operator that gpuchain does not deploy: off unless enabled."""

    enabled: bool = False
    env: list[EnvVar] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)


class DaemonComponent(Component):
    """Such a component that runs as a DaemonSet."""

    resources: Resources | None = None
    host_network: bool = False


class DcgmSpec(DaemonComponent):
    """NVIDIA's standalone DCGM host engine (on unless disabled, as upstream)."""

    enabled: bool = True
    host_port: int | None = None


class VgpuManagerSpec(DaemonComponent):
    """NVIDIA's vGPU host driver manager."""

    driver_manager: ImageWithEnv = Field(default_factory=ImageWithEnv)
    kernel_module_config: NamedConfig = Field(default_factory=NamedConfig)


class VfioManagerSpec(DaemonComponent):
    """NVIDIA's vfio-pci binder for GPU passthrough."""

    driver_manager: ImageWithEnv = Field(default_factory=ImageWithEnv)


class VgpuDeviceManagerSpec(DaemonComponent):
    """NVIDIA's vGPU device manager."""

    config: ConfigRef = Field(default_factory=lambda: ConfigRef(default="default"))


class KataArtifacts(_Model):
    """Where a Kata runtime class's artifacts come from."""

    url: str
    pull_secret: str = ""


class KataRuntimeClass(_Model):
    """One Kata runtime class of NVIDIA's kata manager."""

    name: str
    artifacts: KataArtifacts
    node_selector: dict[str, str] = Field(default_factory=dict)


class KataConfig(_Model):
    """NVIDIA's kata manager configuration."""

    artifacts_dir: str = "/opt/nvidia-gpu-operator/artifacts/runtimeclasses"
    runtime_classes: list[KataRuntimeClass] = Field(default_factory=list)


class KataManagerSpec(DaemonComponent):
    """NVIDIA's kata manager (deprecated upstream: never deployed)."""

    config: KataConfig = Field(default_factory=KataConfig)


class CcManagerSpec(DaemonComponent):
    """NVIDIA's confidential computing mode manager."""

    default_mode: Literal["on", "off", "devtools"] | None = None


class SandboxWorkloadsSpec(_Model):
    """NVIDIA's GPUs for virtual machines (KubeVirt or Kata)."""

    enabled: bool = False
    default_workload: Literal["container", "vm-passthrough", "vm-vgpu"] = "container"
    mode: Literal["kubevirt", "kata"] = "kubevirt"


class CdiSpec(_Model):
    """NVIDIA's Container Device Interface settings."""

    enabled: bool = True
    default: bool = False
    nri_plugin_enabled: bool = Field(False, alias="nriPluginEnabled")


class Switch(_Model):
    """A section that is only an on/off switch (psp, psa)."""

    enabled: bool = False


class HostPathsSpec(_Model):
    """Host paths: the host's root and the kubelet's directory as the operands mount them."""

    root_fs: str = Field("/", alias="rootFS")
    driver_install_dir: str = "/run/nvidia/driver"
    kubelet_root_dir: str = "/var/lib/kubelet"


class ClusterPolicySpec(_Model):
    """ClusterPolicy.spec (gpuchain.io/v1): every key of NVIDIA's nvidia.com/v1 ClusterPolicy."""

    operator: OperatorSpec = Field(default_factory=OperatorSpec)
    daemonsets: DaemonsetsSpec = Field(default_factory=DaemonsetsSpec)
    driver: DriverSpec = Field(default_factory=DriverSpec)
    toolkit: ToolkitSpec = Field(default_factory=ToolkitSpec)
    validator: ValidatorSpec = Field(default_factory=ValidatorSpec)
    device_plugin: DevicePluginSpec = Field(default_factory=DevicePluginSpec)
    dcgm_exporter: DcgmExporterSpec = Field(default_factory=DcgmExporterSpec)
    gfd: ImageSpec = Field(default_factory=ImageSpec)
    mig_manager: MigManagerSpec = Field(default_factory=MigManagerSpec)
    mig: MigSpec = Field(default_factory=MigSpec)
    node_agent: NodeAgentSpec = Field(default_factory=NodeAgentSpec)
    host_paths: HostPathsSpec = Field(default_factory=HostPathsSpec)
    cdi: CdiSpec = Field(default_factory=CdiSpec)
    psp: Switch = Field(default_factory=Switch)
    psa: Switch = Field(default_factory=Switch)
    dcgm: DcgmSpec = Field(default_factory=DcgmSpec)
    node_status_exporter: DaemonComponent = Field(default_factory=DaemonComponent)
    gds: Component = Field(default_factory=Component)
    gdrcopy: Component = Field(default_factory=Component)
    sandbox_workloads: SandboxWorkloadsSpec = Field(default_factory=SandboxWorkloadsSpec)
    sandbox_device_plugin: DaemonComponent = Field(default_factory=DaemonComponent)
    kata_sandbox_device_plugin: DaemonComponent = Field(default_factory=DaemonComponent)
    vgpu_manager: VgpuManagerSpec = Field(default_factory=VgpuManagerSpec)
    vgpu_device_manager: VgpuDeviceManagerSpec = Field(default_factory=VgpuDeviceManagerSpec)
    vfio_manager: VfioManagerSpec = Field(default_factory=VfioManagerSpec)
    kata_manager: KataManagerSpec = Field(default_factory=KataManagerSpec)
    cc_manager: CcManagerSpec = Field(default_factory=CcManagerSpec)


#: spec keys of the operands that carry an image, in roll-out order.
IMAGE_KEYS = ("driver", "toolkit", "validator", "devicePlugin", "dcgmExporter", "gfd", "migManager")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a ClusterPolicy: the dotted spec field and what to do about it."""

    field: str
    reason: str
    value: str = ""  #: the offending value, shown as ``spec.<field>=<value>`` (refused features)

    def __str__(self) -> str:
        where = f"spec.{self.field}={self.value}" if self.value else f"spec.{self.field}"
        return f"{where}: {self.reason}"

    def loc(self) -> tuple[str | int, ...]:
        """Where in the ClusterPolicy document the problem is (``spec``, keys and list indexes)."""
        return ("spec", *(int(p) if p.isdigit() else p for p in self.field.split(".")))


def to_snake(key: str) -> str:
    """camelCase spec key -> model attribute name."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()
