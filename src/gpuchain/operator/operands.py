"""The operands the operator runs, and where: the catalog (`Operand`, `OPERANDS`, the node agent's
roles), the facts they depend on, and the node selection every operand's pod shares.

Node selection: NVIDIA's operator writes ``nvidia.com/gpu.deploy.<operand>=true`` on every GPU
node and selects on it. We select with node affinity instead - GPU node (NFD PCI label or
``nvidia.com/gpu.present=true``) AND the deploy label not ``false``/``paused-for-mig-change``
AND ``nvidia.com/gpu.deploy.operands`` not ``false`` - so the same labels keep their meaning
(opt a node or one operand out, pause for a MIG change) while a reconcile writes O(operands)
objects, never one patch per node.

The objects built from them are `gpuchain.operator.desired` (``desired(policy, facts) -> [objects]``)
and their pods' containers `gpuchain.operator.podspec`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from gpuchain.api.config.v1.config import parse_config
from gpuchain.common.labels import DEPLOY_PREFIX, GPU_PRESENT, MIG_CAPABLE, OPERANDS_LABEL, PAUSED_FOR_MIG_CHANGE
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.operator.policy import ClusterPolicySpec, ImageSpec

NFD_GPU_LABELS = (
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuchain-operator"}
MANAGED_SELECTOR = "app.kubernetes.io/managed-by=gpuchain-operator"
RUNTIME_CLASS_HANDLER = "nvidia"
#: NVIDIA's exporter Service (assets/state-dcgm-exporter/0400_service.yaml): its name, port name
#: and port, which scrape configs and ServiceMonitors written for NVIDIA's operator select on.
EXPORTER_SERVICE = "nvidia-dcgm-exporter"
EXPORTER_PORT_NAME = "gpu-metrics"
EXPORTER_PORT = 9400
#: NVIDIA's layout for dcgmExporter.config.name: the ConfigMap key and where the exporter reads it.
METRICS_CONFIG_KEY = "dcgm-metrics.csv"
METRICS_CONFIG_PATH = "/etc/dcgm-exporter/dcgm-metrics.csv"
#: Where the MIG manager reads its ConfigMap's mig-parted layouts (``migManager.config.name``).
MIG_CONFIG_FILE = "/mig-parted-config/config.yaml"
#: Where the MPS daemons' shared memory (the host's ``<mps root>/shm``) is in the device plugin's pod.
MPS_SHM_MOUNT = "/dev/shm"


@dataclass(frozen=True, kw_only=True)
class Operand:
    """One link of the chain as the operator deploys it."""

    state: str  #: gpu-operator's state name, used in status
    spec_key: str  #: ClusterPolicy spec key (camelCase)
    deploy: str  #: suffix of the nvidia.com/gpu.deploy.<x> label
    name: str  #: DaemonSet name
    needs: tuple[str, ...]  #: states that must be ready before this one can be
    waits_for: str | None  #: ready file its init container waits for
    command: tuple[str, ...]  #: main container command (gpuchain image operands)


DRIVER = Operand(
    state="driver",
    spec_key="driver",
    deploy="driver",
    name="nvidia-driver-daemonset",
    needs=(),
    waits_for=None,
    command=(),
)
TOOLKIT = Operand(
    state="container-toolkit",
    spec_key="toolkit",
    deploy="container-toolkit",
    name="nvidia-container-toolkit-daemonset",
    needs=("driver",),
    waits_for="driver",
    command=(),
)
VALIDATOR = Operand(
    state="operator-validation",
    spec_key="validator",
    deploy="operator-validator",
    name="nvidia-operator-validator",
    needs=("driver", "container-toolkit", "device-plugin"),
    waits_for=None,
    command=("sleep", "infinity"),
)
DEVICE_PLUGIN = Operand(
    state="device-plugin",
    spec_key="devicePlugin",
    deploy="device-plugin",
    name="nvidia-device-plugin-daemonset",
    needs=("driver", "container-toolkit"),
    waits_for="toolkit",
    command=("gpuchain", "device-plugin"),
)
DCGM_EXPORTER = Operand(
    state="dcgm-exporter",
    spec_key="dcgmExporter",
    deploy="dcgm-exporter",
    name="nvidia-dcgm-exporter",
    needs=("driver", "container-toolkit"),
    waits_for="toolkit",
    command=("gpuchain", "exporter"),
)
GFD = Operand(
    state="gpu-feature-discovery",
    spec_key="gfd",
    deploy="gpu-feature-discovery",
    name="gpu-feature-discovery",
    needs=("driver", "container-toolkit"),
    waits_for="toolkit",
    command=("gpuchain", "gfd"),
)
MIG_MANAGER = Operand(
    state="mig-manager",
    spec_key="migManager",
    deploy="mig-manager",
    name="nvidia-mig-manager",
    needs=("driver", "container-toolkit"),
    waits_for="toolkit",
    command=("gpuchain", "mig-manager"),
)

#: In gpu-operator's state order (the roll-out order; status uses `status.dependency_order`).
OPERANDS = (DRIVER, TOOLKIT, VALIDATOR, DEVICE_PLUGIN, DCGM_EXPORTER, GFD, MIG_MANAGER)

#: The one DaemonSet (``nodeAgent.enabled``) that serves the operands of `AGENT_ROLES` as roles of
#: ``gpuchain node-agent``. Not an operand of its own: status stays per operand, each read from it.
NODE_AGENT = Operand(
    state="node-agent",
    spec_key="nodeAgent",
    deploy="node-agent",
    name="gpuchain-node-agent",
    needs=("driver", "container-toolkit"),
    waits_for="toolkit",
    command=("gpuchain", "node-agent"),
)

#: The operands the node agent serves, each with its role (``gpuchain node-agent --roles``), in
#: roll-out order. The switch of each (``devicePlugin.enabled``, ...) turns its role on or off.
AGENT_ROLES: dict[Operand, str] = {
    VALIDATOR: "validator",
    DEVICE_PLUGIN: "device-plugin",
    DCGM_EXPORTER: "exporter",
    GFD: "gfd",
    MIG_MANAGER: "mig-manager",
}

#: The links the node agent's init containers validate before its roles start: the plugin link
#: is its own device plugin role, which its validator role checks once it serves.
AGENT_VALIDATIONS = ("driver", "toolkit", "cuda")

#: The validator init containers, in chain order: (check, file it writes).
VALIDATIONS = ("driver", "toolkit", "cuda", "plugin")


#: Operands that call the Kubernetes API (the others get no ServiceAccount token).
USES_API = frozenset({VALIDATOR.state, DEVICE_PLUGIN.state, GFD.state, MIG_MANAGER.state})

#: Operands on the gpuchain image that load NVML (env below, runtime class nvidia).
USES_NVML = frozenset({DEVICE_PLUGIN.state, DCGM_EXPORTER.state, GFD.state, MIG_MANAGER.state})

#: Operands that read the device plugin's ConfigMap (``devicePlugin.config``): NVIDIA's operator
#: gives it to GFD as well, so the sharing labels (``gpu.replicas``, ``<product>-SHARED``) match.
SHARES_PLUGIN_CONFIG = (DEVICE_PLUGIN, GFD)


@dataclass(frozen=True, kw_only=True)
class Facts:
    """What the operands depend on besides the policy: where they live and who owns them."""

    namespace: str
    policy_name: str
    policy_uid: str = ""
    runtime: str = "containerd"  #: the GPU nodes' container runtime (NVIDIA's default when none reports one)
    driver_os: str = ""  #: GPU nodes' OS tag (``ubuntu22.04``) for NVIDIA's driver image tag, see drivertag
    mps: bool = False  #: the device plugin's ConfigMap shares a resource with MPS (`config_uses_mps`)


def config_uses_mps(data: Mapping[str, str]) -> bool:
    """Whether any named config of the device plugin's ConfigMap (``data``: key -> config file)
    has ``sharing.mps``. Any one counts: one DaemonSet serves every node, whichever key a node's
    ``nvidia.com/device-plugin.config`` label picks. A config that does not parse counts as none:
    the device plugin refuses it at start and says why, which MPS mounts would not change."""
    for key, text in data.items():
        try:
            if parse_config(text, key).mps is not None:
                return True
        except ConfigFileError:
            continue
    return False


def mps_root(policy: ClusterPolicySpec) -> str:
    """The host's MPS root (``devicePlugin.mps.root``) without a trailing slash."""
    return policy.device_plugin.mps.root.rstrip("/") or "/"


def runs_mps(operand: Operand, facts: Facts) -> bool:
    return operand is DEVICE_PLUGIN and facts.mps


#: Each operand's image settings block: its key in the policy's spec -> ClusterPolicySpec's field.
_SPEC_FIELDS = {
    "driver": "driver",
    "toolkit": "toolkit",
    "validator": "validator",
    "devicePlugin": "device_plugin",
    "dcgmExporter": "dcgm_exporter",
    "gfd": "gfd",
    "migManager": "mig_manager",
}


def image_of(policy: ClusterPolicySpec, operand: Operand) -> ImageSpec:
    """The image settings block of an operand (``policy.devicePlugin`` for the device plugin): one field read, where
    a table of all seven was built for each call (the doctor asks whether an operand is enabled a few times a node)."""
    return cast(ImageSpec, getattr(policy, _SPEC_FIELDS[operand.spec_key]))


def enabled(policy: ClusterPolicySpec, operand: Operand) -> bool:
    """Is the operand switched on in the policy (``<key>.enabled``)?"""
    return image_of(policy, operand).enabled


def agent_operands(policy: ClusterPolicySpec) -> list[Operand]:
    """The operands the node agent serves as roles: the enabled ones of `AGENT_ROLES`, none in
    the per-operand layout (``nodeAgent.enabled: false``)."""
    if not policy.node_agent.enabled:
        return []
    return [op for op in AGENT_ROLES if enabled(policy, op)]


def served_by(policy: ClusterPolicySpec) -> dict[str, str]:
    """Operand state -> the DaemonSet that runs it, for every enabled operand."""
    agent = agent_operands(policy)
    return {op.state: NODE_AGENT.name if op in agent else op.name for op in OPERANDS if enabled(policy, op)}


def service_account_name(operand: Operand) -> str:
    """The operand's own ServiceAccount, e.g. ``gpuchain-device-plugin`` (bound by the chart)."""
    return f"gpuchain-{operand.deploy}"


def gpu_env(capabilities: str = "utility") -> list[dict[str, str]]:
    """Env that makes the NVIDIA runtime inject every GPU and the driver libraries named."""
    return [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": capabilities},
    ]


def deploy_label(operand: Operand) -> str:
    """The per-operand node label, e.g. ``nvidia.com/gpu.deploy.device-plugin``."""
    return DEPLOY_PREFIX + operand.deploy


def gpu_node_terms(extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Node affinity terms (ORed): any GPU detection label, each ANDed with ``extra``."""
    return [
        {"matchExpressions": [{"key": label, "operator": "In", "values": ["true"]}, *extra]}
        for label in (*NFD_GPU_LABELS, GPU_PRESENT)
    ]


def node_affinity(operand: Operand, mig_only: bool = False) -> dict[str, Any]:
    """Where an operand runs: GPU nodes that have not opted out of it (see module docstring);
    MIG-capable ones only for the MIG manager (``mig_only``: a node agent that serves it alone)."""
    extra: list[dict[str, Any]] = [
        {"key": deploy_label(operand), "operator": "NotIn", "values": ["false", PAUSED_FOR_MIG_CHANGE]},
        {"key": OPERANDS_LABEL, "operator": "NotIn", "values": ["false"]},
    ]
    if operand is MIG_MANAGER or mig_only:
        extra.append({"key": MIG_CAPABLE, "operator": "In", "values": ["true"]})
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": gpu_node_terms(extra)}}
    }


def is_gpu_node(labels: dict[str, str]) -> bool:
    """GPU node detection: an NFD NVIDIA PCI label or ``nvidia.com/gpu.present=true``."""
    return any(labels.get(k) == "true" for k in (*NFD_GPU_LABELS, GPU_PRESENT))


def has_nfd_labels(labels: dict[str, str]) -> bool:
    """Did NFD label this node at all (any feature.node.kubernetes.io/ key)?"""
    return any(k.startswith("feature.node.kubernetes.io/") for k in labels)
