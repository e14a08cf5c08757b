"""The ClusterPolicy spec: NVIDIA gpu-operator's keys, parsed into a model or a list of problems.

Every key of NVIDIA gpu-operator's ``nvidia.com/v1`` ClusterPolicy is a key here, with NVIDIA's
spelling and defaults (``driver.enabled``, ``devicePlugin.config.name``, ``mig.strategy``,
``daemonsets.tolerations``, ``vgpuManager``, ``psp``, ...), so a policy written for NVIDIA's
operator reads the same; `compat` decides what each key does in gpuchain. Unknown keys are
problems, like known keys with bad values: a typo such as ``driver: {enabld: true}`` would
otherwise be dropped silently and the operand deployed with the default. The reconciler reports
problems as a status condition instead of acting.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from gpuchain import __version__
from gpuchain.common.quantity import parse_quantity
from gpuchain.operator.manifests import label_key_problem, label_value_problem, name_problem, toleration_problem

GPUCHAIN_REPOSITORY = "ghcr.io/gpuchain"
#: Pod labels the operator sets and selects on; a policy may not set them.
RESERVED_LABELS = ("app", "app.kubernetes.io/managed-by")
GPUCHAIN_IMAGE = "gpuchain"

# Docker reference grammar (distribution/reference), enough to catch what users get wrong:
# upper case in the repository, spaces, a tag with illegal characters or over 128 chars.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REF = re.compile(rf"^{_NAME}(?::{_TAG})?(?:@{_DIGEST})?$")


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


def _percent_or_int(value: int | str, field: str) -> list[Problem]:
    if isinstance(value, int):
        return [] if value >= 0 else [Problem(field, "must be >= 0")]
    if re.fullmatch(r"\d+%?", value):
        return []
    return [Problem(field, f"{value!r} is not an integer or a percentage such as '25%'")]


def _unknown_key(loc: tuple[str | int, ...]) -> str:
    """Reason for an unknown key: the closest known key at that place, when there is one."""
    model: type[BaseModel] | None = ClusterPolicySpec
    for part in loc[:-1]:
        field = _field_by_key(model, str(part)) if model is not None else None
        annotation = field.annotation if field is not None else None
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    if model is None:
        return "unknown key"
    known = [f.alias or name for name, f in model.model_fields.items()]
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    return f"unknown key; did you mean {close[0]!r}?" if close else f"unknown key (known: {', '.join(known)})"


def _field_by_key(model: type[BaseModel], key: str) -> Any:
    return next((f for name, f in model.model_fields.items() if key in (f.alias, name)), None)


def _schema_problems(exc: ValidationError) -> list[Problem]:
    problems = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        reason = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "literal_error":
            reason = f"{err['input']!r} is not one of {err['ctx']['expected']}"
        elif err["type"] == "extra_forbidden":
            reason = _unknown_key(err["loc"])
        problems.append(Problem(field, reason))
    return problems


#: The keys of an operand block that make up its image reference.
#: The sections served as roles of the one node agent DaemonSet under ``nodeAgent.enabled``.
AGENT_KEYS = ("validator", "devicePlugin", "dcgmExporter", "gfd", "migManager")


def _node_agent_problems(policy: ClusterPolicySpec) -> list[Problem]:
    """The node agent is one container: the sections it serves must name one image and pull policy."""
    if not policy.node_agent.enabled:
        return []
    seen: dict[tuple[str, str], str] = {}
    for key in AGENT_KEYS:
        block: ImageSpec = getattr(policy, to_snake(key))
        if block.enabled:
            seen.setdefault((block.image_ref(), block.image_pull_policy), key)
    problems = []
    for key in AGENT_KEYS:
        block = getattr(policy, to_snake(key))
        if block.enabled and block.resources is not None:
            for kind, quantities in (("limits", block.resources.limits), ("requests", block.resources.requests)):
                for resource, quantity in quantities.items():
                    try:
                        parse_quantity(quantity)
                    except ValueError as exc:
                        # the node agent's resources are the sum of its roles' (operands.agent_resources)
                        problems.append(Problem(f"{key}.resources.{kind}.{resource}", str(exc)))
    if len(seen) < 2:
        return problems
    named = "; ".join(f"{key}: {ref} ({pull})" for (ref, pull), key in seen.items())
    return [
        *problems,
        Problem(
            "nodeAgent.enabled",
            f"the node agent runs its roles in one container, but they name different images ({named}): "
            "give them one repository, image, version and imagePullPolicy, or set nodeAgent.enabled=false "
            "for one DaemonSet per operand",
        ),
    ]


_IMAGE_FIELDS = ("enabled", "repository", "image", "version")


def _image_problems(spec: dict[str, Any]) -> list[Problem]:
    """Image references that are not valid, checked per operand even when other keys are wrong."""
    problems = []
    for key in IMAGE_KEYS:
        block = spec.get(key, {})
        if not isinstance(block, dict):
            continue  # a schema problem already
        kind = ClusterPolicySpec.model_fields[to_snake(key)].annotation
        if not (isinstance(kind, type) and issubclass(kind, ImageSpec)):
            continue
        try:
            img = kind.model_validate({k: v for k, v in block.items() if k in _IMAGE_FIELDS})
        except ValidationError:
            continue  # a wrong type: reported by the schema
        if img.enabled and not IMAGE_REF.match(img.image_ref()):
            problems.append(
                Problem(
                    f"{key}.version" if img.version and not re.fullmatch(_TAG, img.version) else f"{key}.repository",
                    f"image reference {img.image_ref()!r} is not valid "
                    "(lower-case repository, tag of letters, digits, '.', '_' or '-')",
                )
            )
    return problems


def drop_nulls(value: Any) -> Any:
    """``value`` without null map entries: a null key means "not set", as for NVIDIA's operator.

    Go decodes ``plugin:`` (null) to an absent pointer and the API server prunes nulls from custom
    resources, so NVIDIA's sample (``validator.plugin:``) means the same as leaving the key out.
    """
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def _name_problems(policy: ClusterPolicySpec) -> list[Problem]:
    """Fields that become Kubernetes names, label keys or values, checked where the user wrote them."""
    out: list[Problem] = []
    names = {
        "operator.runtimeClass": policy.operator.runtime_class,
        "daemonsets.priorityClassName": policy.daemonsets.priority_class_name,
        "devicePlugin.config.name": policy.device_plugin.config.name,
        "migManager.config.name": policy.mig_manager.config.name,
        "dcgmExporter.config.name": policy.dcgm_exporter.config.name,
    }
    for key in IMAGE_KEYS:
        block = getattr(policy, to_snake(key))
        names.update({f"{key}.imagePullSecrets.{i}": s for i, s in enumerate(block.image_pull_secrets)})
    for field, value in names.items():
        if value and (why := name_problem(value)):
            out.append(Problem(field, why))
    maps = {
        "daemonsets.labels": (policy.daemonsets.labels, True),
        "daemonsets.annotations": (policy.daemonsets.annotations, False),
        "dcgmExporter.annotations": (policy.dcgm_exporter.annotations, False),
    }
    for field, (items, is_label) in maps.items():
        for k, v in items.items():
            why = label_key_problem(k) or (label_value_problem(v) if is_label else None)
            if why:
                out.append(Problem(field, why))
    out += [
        Problem("daemonsets.labels", f"key {k!r} is gpuchain's own (it finds its pods by it): remove it")
        for k in policy.daemonsets.labels
        if k in RESERVED_LABELS
    ]
    return out


def schema_problems(spec: dict[str, Any]) -> list[Problem]:
    """Unknown keys and wrong types only: what NVIDIA's own CRD schema would refuse as well."""
    try:
        ClusterPolicySpec.model_validate(drop_nulls(spec))
    except ValidationError as exc:
        return _schema_problems(exc)
    return []


def parse_policy(spec: dict[str, Any] | None) -> ClusterPolicySpec | list[Problem]:
    """Validate a ClusterPolicy spec; a model when usable, otherwise every problem found.

    Schema problems (unknown keys, wrong types), image references, names and features gpuchain
    does not have (`compat.FEATURES`) are reported together, so one round of fixes is enough.
    """
    # compat reads the parsed model, so it comes after it (and imports this module).
    from gpuchain.operator.compat import nvidia_image_problems, refusals

    raw = drop_nulls(spec or {})
    problems: list[Problem] = []
    policy: ClusterPolicySpec | None = None
    try:
        policy = ClusterPolicySpec.model_validate(raw)
    except ValidationError as exc:
        problems += _schema_problems(exc)
    problems += _image_problems(raw)
    if policy is None:
        return problems
    problems += _percent_or_int(policy.driver.upgrade_policy.max_unavailable, "driver.upgradePolicy.maxUnavailable")
    problems += _percent_or_int(
        policy.daemonsets.rolling_update.max_unavailable, "daemonsets.rollingUpdate.maxUnavailable"
    )
    if policy.mig_manager.enabled and not policy.mig_manager.config.default:
        problems.append(Problem("migManager.config.default", "name the layout nodes get without a label"))
    problems += _name_problems(policy) + refusals(policy) + nvidia_image_problems(policy)
    if not problems:  # images of different operands disagree only once each is a usable image
        problems += _node_agent_problems(policy)
    return problems or policy


def located(problems: list[Problem]) -> ValidationError:
    """The problems as one pydantic error with each problem's place in the document.

    Raised from a document model's validator, it reaches the common YAML reader, which turns
    the first into ``file:line: spec.field: reason`` with a count of the others.
    """
    return ValidationError.from_exception_data(
        "ClusterPolicy",
        [
            {
                "type": PydanticCustomError("clusterpolicy", "{reason}", {"reason": p.reason}),
                "loc": p.loc(),
                "input": p.value or {},
            }
            for p in problems
        ],
    )


#: What a file of another kind is, and what to do with it, for a command that wanted a ClusterPolicy.
_OTHER_KINDS = {
    "NVIDIADriver": (
        "this file is NVIDIA's NVIDIADriver, not a ClusterPolicy; gpuchain does not implement NVIDIADriver: "
        "put its repository, image and version under driver in the ClusterPolicy "
        "(`gpuchain operator import --from-cluster` reports each NVIDIADriver it finds)"
    ),
    "ClusterServiceVersion": (
        "this file is an OLM ClusterServiceVersion, not a ClusterPolicy; NVIDIA's ClusterPolicy is in its "
        "alm-examples annotation: save that object as YAML and run `gpuchain operator import -f FILE`"
    ),
    "ConfigMap": (
        "this file is a ConfigMap, not a ClusterPolicy; pass the ClusterPolicy "
        "(`kubectl get clusterpolicies.nvidia.com -o yaml` for NVIDIA's)"
    ),
}


def _cluster_policy_kind(kind: Any) -> Any:
    """A ClusterPolicy file's ``kind``: anything else is named with what to do instead."""
    if kind == "ClusterPolicy":
        return kind
    raise ValueError(_OTHER_KINDS.get(str(kind), f"expected ClusterPolicy (got {kind!r})"))


class PolicyDocument(BaseModel):
    """A ClusterPolicy manifest as read from a file: gpuchain's (gpuchain.io/v1) or NVIDIA's (nvidia.com/v1).

    Validating it validates the spec as the operator would, so a bad policy is named by file,
    line and field.
    """

    # kind first: a file of another kind is named as such, not as a wrong apiVersion.
    kind: str = "ClusterPolicy"
    apiVersion: str = "gpuchain.io/v1"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: dict[str, Any] | None = None
    _parsed: ClusterPolicySpec | None = PrivateAttr(None)

    _kind = field_validator("kind", mode="before")(_cluster_policy_kind)

    @field_validator("apiVersion")
    @classmethod
    def _api_version(cls, value: str, info: ValidationInfo) -> str:
        if "kind" in info.data and value not in ("gpuchain.io/v1", "nvidia.com/v1"):
            raise ValueError(f"expected gpuchain.io/v1 or NVIDIA's nvidia.com/v1 (got {value!r})")
        return value

    @model_validator(mode="after")
    def _valid_spec(self) -> PolicyDocument:
        parsed = parse_policy(self.spec)
        if isinstance(parsed, list):
            raise located(parsed)
        self._parsed = parsed
        return self

    @property
    def name(self) -> str:
        """metadata.name, ``cluster-policy`` when absent."""
        return str(self.metadata.get("name") or "cluster-policy")

    def policy(self) -> ClusterPolicySpec:
        """The parsed spec (valid: the document would not exist otherwise)."""
        assert self._parsed is not None
        return self._parsed


class NvidiaPolicyDocument(BaseModel):
    """NVIDIA's ClusterPolicy (nvidia.com/v1) as read for `operator import`: only its schema is checked.

    Features gpuchain refuses and NVIDIA's images are what the import converts, so they are not
    problems here; an unknown key or a wrong type is (NVIDIA's own CRD would refuse it too).
    """

    kind: str = "ClusterPolicy"
    apiVersion: str = "nvidia.com/v1"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: dict[str, Any] | None = None

    _kind = field_validator("kind", mode="before")(_cluster_policy_kind)

    @field_validator("apiVersion")
    @classmethod
    def _api_version(cls, value: str, info: ValidationInfo) -> str:
        if "kind" not in info.data or value == "nvidia.com/v1":
            return value
        if value == "gpuchain.io/v1":
            raise ValueError(
                "this is gpuchain's ClusterPolicy already: nothing to import "
                "(check it with `gpuchain operator render -f FILE`)"
            )
        raise ValueError(f"expected NVIDIA's nvidia.com/v1 (got {value!r})")

    @model_validator(mode="after")
    def _valid_schema(self) -> NvidiaPolicyDocument:
        problems = schema_problems(self.spec or {})
        if problems:
            raise located(problems)
        return self


def to_snake(key: str) -> str:
    """camelCase spec key -> model attribute name."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()
