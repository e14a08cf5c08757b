"""Operands as pure functions: ``desired(policy, facts) -> [objects]``.

Every object the operator owns is computed here from the ClusterPolicy and a few cluster facts,
with no I/O, so a test can assert on manifests and validate them against Kubernetes schemas.

Node selection: NVIDIA's operator writes ``nvidia.com/gpu.deploy.<operand>=true`` on every GPU
node and selects on it. We select with node affinity instead - GPU node (NFD PCI label or
``nvidia.com/gpu.present=true``) AND the deploy label not ``false``/``paused-for-mig-change``
AND ``nvidia.com/gpu.deploy.operands`` not ``false`` - so the same labels keep their meaning
(opt a node or one operand out, pause for a MIG change) while a reconcile writes O(operands)
objects, never one patch per node.

On-node ordering is gpuchain's: init containers wait for ready files under
``/run/gpuchain/validations/`` that the validator's init containers write, link by link.

GPU access: the gpuchain image sets ``NVIDIA_VISIBLE_DEVICES=void`` so nothing built on it sees a
GPU by accident. Every operand container that talks to NVML sets ``NVIDIA_VISIBLE_DEVICES=all``
and ``NVIDIA_DRIVER_CAPABILITIES`` (``utility`` for NVML, ``compute,utility`` for CUDA) and its pod
names ``runtimeClassName: nvidia``, so the NVIDIA runtime injects the devices and libraries, as
gpu-operator does.

MPS: when the device plugin's config (``devicePlugin.config``) shares a resource with MPS, the
device plugin runs the MPS control daemons itself (`gpuchain.deviceplugin.mps`), so its pod gets
what NVIDIA gives its separate ``mps-control-daemon`` pod (k8s-device-plugin v0.18.0,
``daemonset-mps-control-daemon.yml``; gpu-operator ``state-mps-control-daemon``): the host's MPS
root (``devicePlugin.mps.root``, ``/run/nvidia/mps``) with ``MPS_ROOT`` naming it, a tmpfs at
``<root>/shm`` mounted by an init container and seen as the pod's ``/dev/shm``, the host PID
namespace (the MPS server checks its clients' PIDs as the driver reports them) and the ``compute``
driver capability, through which the NVIDIA runtime injects ``nvidia-cuda-mps-control`` and
``nvidia-cuda-mps-server`` from the node's driver (as it does for NVIDIA's daemon). The root is
mounted at its own path: the plugin creates the pipe directories there and gives Allocate's
containers the same host paths.

Layout: by default (``nodeAgent.enabled``) the operands of `AGENT_ROLES` are roles of one
``gpuchain node-agent`` DaemonSet (`node_agent_daemonset`), its pod built from what their own
DaemonSets would be, merged; ``nodeAgent.enabled: false`` gives each its own DaemonSet, NVIDIA's
layout. Driver and toolkit are NVIDIA's images and always have their own.

Identity: each operand runs as its own ServiceAccount (``gpuchain-<deploy suffix>``), which the
chart binds to only what that operand does with the API; operands that do nothing with it get
no token mounted.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuchain.api.config.v1.config import parse_config
from gpuchain.common.labels import DEPLOY_PREFIX, GPU_PRESENT, MIG_CAPABLE, OPERANDS_LABEL, PAUSED_FOR_MIG_CHANGE
from gpuchain.common.quantity import add_quantities
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.gpu.nvmlrelease import DEFAULT_DIR as NVML_RELEASE_DIR
from gpuchain.operator.drivertag import driver_image
from gpuchain.operator.policy import ClusterPolicySpec, EnvVar, ImageSpec

NFD_GPU_LABELS = (
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)
VALIDATIONS_DIR = "/run/gpuchain/validations"
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


@dataclass(frozen=True)
class Operand:
    """One link of the chain as the operator deploys it."""

    state: str  #: gpu-operator's state name, used in status
    spec_key: str  #: ClusterPolicy spec key (camelCase)
    deploy: str  #: suffix of the nvidia.com/gpu.deploy.<x> label
    name: str  #: DaemonSet name
    needs: tuple[str, ...]  #: states that must be ready before this one can be
    waits_for: str | None  #: ready file its init container waits for
    command: tuple[str, ...]  #: main container command (gpuchain image operands)


DRIVER = Operand("driver", "driver", "driver", "nvidia-driver-daemonset", (), None, ())
TOOLKIT = Operand(
    "container-toolkit",
    "toolkit",
    "container-toolkit",
    "nvidia-container-toolkit-daemonset",
    ("driver",),
    "driver",
    (),
)
VALIDATOR = Operand(
    "operator-validation",
    "validator",
    "operator-validator",
    "nvidia-operator-validator",
    ("driver", "container-toolkit", "device-plugin"),
    None,
    ("sleep", "infinity"),
)
DEVICE_PLUGIN = Operand(
    "device-plugin",
    "devicePlugin",
    "device-plugin",
    "nvidia-device-plugin-daemonset",
    ("driver", "container-toolkit"),
    "toolkit",
    ("gpuchain", "device-plugin"),
)
DCGM_EXPORTER = Operand(
    "dcgm-exporter",
    "dcgmExporter",
    "dcgm-exporter",
    "nvidia-dcgm-exporter",
    ("driver", "container-toolkit"),
    "toolkit",
    ("gpuchain", "exporter"),
)
GFD = Operand(
    "gpu-feature-discovery",
    "gfd",
    "gpu-feature-discovery",
    "gpu-feature-discovery",
    ("driver", "container-toolkit"),
    "toolkit",
    ("gpuchain", "gfd"),
)
MIG_MANAGER = Operand(
    "mig-manager",
    "migManager",
    "mig-manager",
    "nvidia-mig-manager",
    ("driver", "container-toolkit"),
    "toolkit",
    ("gpuchain", "mig-manager"),
)

#: In gpu-operator's state order (the roll-out order; status uses `status.dependency_order`).
OPERANDS = (DRIVER, TOOLKIT, VALIDATOR, DEVICE_PLUGIN, DCGM_EXPORTER, GFD, MIG_MANAGER)

#: The one DaemonSet (``nodeAgent.enabled``) that serves the operands of `AGENT_ROLES` as roles of
#: ``gpuchain node-agent``. Not an operand of its own: status stays per operand, each read from it.
NODE_AGENT = Operand(
    "node-agent",
    "nodeAgent",
    "node-agent",
    "gpuchain-node-agent",
    ("driver", "container-toolkit"),
    "toolkit",
    ("gpuchain", "node-agent"),
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


@dataclass(frozen=True)
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


def _runs_mps(operand: Operand, facts: Facts) -> bool:
    return operand is DEVICE_PLUGIN and facts.mps


def image_of(policy: ClusterPolicySpec, operand: Operand) -> ImageSpec:
    """The image settings block of an operand (``policy.devicePlugin`` for the device plugin)."""
    return {
        "driver": policy.driver,
        "toolkit": policy.toolkit,
        "validator": policy.validator,
        "devicePlugin": policy.device_plugin,
        "dcgmExporter": policy.dcgm_exporter,
        "gfd": policy.gfd,
        "migManager": policy.mig_manager,
    }[operand.spec_key]


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


def _owner(facts: Facts) -> list[dict[str, Any]]:
    if not facts.policy_uid:
        return []
    return [
        {
            "apiVersion": "gpuchain.io/v1",
            "kind": "ClusterPolicy",
            "name": facts.policy_name,
            "uid": facts.policy_uid,
            "controller": True,
        }
    ]


def _meta(name: str, facts: Facts, labels: dict[str, str] | None = None, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {**MANAGED_BY, "app.kubernetes.io/part-of": "gpuchain", **(labels or {})},
    }
    if namespaced:
        meta["namespace"] = facts.namespace
    owners = _owner(facts)
    if owners:
        meta["ownerReferences"] = owners
    return meta


def _host_path(name: str, path: str, kind: str = "") -> dict[str, Any]:
    hp: dict[str, Any] = {"path": path}
    if kind:
        hp["type"] = kind
    return {"name": name, "hostPath": hp}


def _validation_mount() -> dict[str, Any]:
    return {"name": "run-gpuchain", "mountPath": "/run/gpuchain", "mountPropagation": "HostToContainer"}


def _container(name: str, image: ImageSpec, command: list[str], **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": image.image_ref(), "imagePullPolicy": image.image_pull_policy}
    if command:
        c["command"] = command
    c.update(extra)
    return c


def _resources(image: ImageSpec) -> dict[str, Any]:
    res = image.resources
    if res is None or not (res.limits or res.requests):
        return {}
    out: dict[str, Any] = {}
    if res.limits:
        out["limits"] = dict(res.limits)
    if res.requests:
        out["requests"] = dict(res.requests)
    return {"resources": out}


def _wait_init(policy: ClusterPolicySpec, link: str) -> dict[str, Any]:
    """An init container that blocks until the validator wrote ``<link>-ready``."""
    return _container(
        f"{link}-validation",
        policy.validator,
        ["gpuchain", "validate", "wait", link],
        volumeMounts=[_validation_mount()],
        securityContext={"privileged": False},
    )


def _env(image: ImageSpec, base: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [*base, *env_list(image.env)]


def env_list(env: list[EnvVar]) -> list[dict[str, str]]:
    """Policy env entries as container env."""
    return [{"name": e.name, "value": e.value} for e in env]


def _kernel_module_env(policy: ClusterPolicySpec) -> list[dict[str, Any]]:
    """KERNEL_MODULE_TYPE for NVIDIA's driver container (``useOpenKernelModules`` is the old spelling of open)."""
    kind = policy.driver.kernel_module_type
    if kind == "auto" and policy.driver.use_open_kernel_modules:
        kind = "open"
    return [] if kind == "auto" else [{"name": "KERNEL_MODULE_TYPE", "value": kind}]


def _main_container(policy: ClusterPolicySpec, operand: Operand, facts: Facts) -> dict[str, Any]:
    image = image_of(policy, operand)
    node_name = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    mounts = [_validation_mount()]
    if operand is DRIVER:
        return _container(
            "nvidia-driver-ctr",
            image,
            ["nvidia-driver", "init"],
            args=list(image.args),
            env=_env(image, _kernel_module_env(policy)),
            **_resources(image),
            securityContext={"privileged": True, "seLinuxOptions": {"level": "s0"}},
            volumeMounts=[
                {"name": "run-nvidia", "mountPath": "/run/nvidia", "mountPropagation": "Bidirectional"},
                _validation_mount(),
                {"name": "host-root", "mountPath": "/host", "readOnly": True},
            ],
        )
    if operand is TOOLKIT:
        return _container(
            "nvidia-container-toolkit-ctr",
            image,
            [],
            args=list(image.args),
            env=_env(
                image,
                [
                    {"name": "RUNTIME", "value": facts.runtime},
                    {"name": "NVIDIA_RUNTIME_SET_AS_DEFAULT", "value": "false"},
                    {"name": "RUNTIME_CLASS", "value": policy.operator.runtime_class},
                ],
            ),
            securityContext={"privileged": True},
            volumeMounts=[*mounts, {"name": "host-root", "mountPath": "/host", "readOnly": True}],
            **_resources(image),
        )
    env: list[dict[str, Any]] = [node_name]
    if operand.state in USES_NVML:
        # compute: the NVIDIA runtime then injects the MPS control and server binaries as well.
        env += gpu_env("compute,utility" if _runs_mps(operand, facts) else "utility")
    # gpuchain commands default to simulated GPUs; on a node they talk to NVML.
    args: list[str] = [] if operand is VALIDATOR else ["--backend", "nvml"]
    if operand is DEVICE_PLUGIN:
        env += [{"name": "MIG_STRATEGY", "value": policy.mig.strategy}]
    if operand in SHARES_PLUGIN_CONFIG and policy.device_plugin.config.name:
        # A ConfigMap of named configs, for the plugin and (as NVIDIA's operator does) GFD alike, so
        # the sharing labels follow the plugin's config: each reads its node's
        # nvidia.com/device-plugin.config label (node from NODE_NAME) and falls back to
        # NODE_CONFIG_KEY, the policy default.
        args += ["--config-dir", "/config"]
        if policy.device_plugin.config.default:
            env += [{"name": "NODE_CONFIG_KEY", "value": policy.device_plugin.config.default}]
        mounts.append({"name": "config", "mountPath": "/config", "readOnly": True})
    if operand.state in USES_NVML:  # the NVML release board: it lets go of NVML while gpu-health resets a GPU
        mounts.append({"name": "nvml-release", "mountPath": str(NVML_RELEASE_DIR)})
    if operand is DEVICE_PLUGIN:
        mounts.append({"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"})
    if _runs_mps(operand, facts):
        env += [{"name": "MPS_ROOT", "value": mps_root(policy)}]
        mounts += [
            {"name": "mps-root", "mountPath": mps_root(policy), "mountPropagation": "HostToContainer"},
            {"name": "mps-shm", "mountPath": MPS_SHM_MOUNT},
        ]
    if operand is GFD:
        args += ["--mig-strategy", policy.mig.strategy]
        mounts.append({"name": "nfd-features", "mountPath": "/etc/kubernetes/node-feature-discovery/features.d"})
    if operand is DCGM_EXPORTER:
        mounts.append({"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True})
        if policy.dcgm_exporter.config.name:
            # NVIDIA's layout: the ConfigMap's dcgm-metrics.csv is the metric set.
            args += ["--collectors", METRICS_CONFIG_PATH]
            mounts.append(
                {
                    "name": "metrics-config",
                    "mountPath": METRICS_CONFIG_PATH,
                    "subPath": METRICS_CONFIG_KEY,
                    "readOnly": True,
                }
            )
    if operand is MIG_MANAGER:
        # The layout a node gets while it has no nvidia.com/mig.config label.
        env += [{"name": "DEFAULT_MIG_CONFIG", "value": policy.mig_manager.config.default}]
    if operand is MIG_MANAGER and policy.mig_manager.config.name:
        env += [{"name": "CONFIG_FILE", "value": MIG_CONFIG_FILE}]
        mounts.append({"name": "mig-parted-config", "mountPath": "/mig-parted-config", "readOnly": True})
    extra: dict[str, Any] = {}
    if operand is DCGM_EXPORTER:
        extra["ports"] = [{"name": "metrics", "containerPort": EXPORTER_PORT, "protocol": "TCP"}]
    # The validator's main container only sleeps (its checks are the init containers).
    privileged = operand in (DEVICE_PLUGIN, MIG_MANAGER)
    return _container(
        operand.name.removeprefix("nvidia-").removesuffix("-daemonset"),
        image,
        list(operand.command),
        args=[*args, *image.args],
        env=_env(image, env),
        securityContext={"privileged": privileged},
        volumeMounts=mounts,
        **extra,
        **_resources(image),
    )


def _volumes(operand: Operand, policy: ClusterPolicySpec, facts: Facts) -> list[dict[str, Any]]:
    vols = [_host_path("run-gpuchain", "/run/gpuchain", "DirectoryOrCreate")]
    kubelet = policy.host_paths.kubelet_root_dir.rstrip("/")
    if operand in (DRIVER, TOOLKIT):
        vols.append(_host_path("host-root", policy.host_paths.root_fs))
    if operand is DRIVER:
        vols.append(_host_path("run-nvidia", "/run/nvidia", "DirectoryOrCreate"))
    if operand.state in USES_NVML:
        vols.append(_host_path("nvml-release", str(NVML_RELEASE_DIR), "DirectoryOrCreate"))
    if operand is DEVICE_PLUGIN:
        vols.append(_host_path("device-plugins", f"{kubelet}/device-plugins", "Directory"))
    if _runs_mps(operand, facts):
        vols.append(_host_path("mps-root", mps_root(policy), "DirectoryOrCreate"))
        vols.append(_host_path("mps-shm", _shm_dir(policy), "DirectoryOrCreate"))
    if operand in SHARES_PLUGIN_CONFIG and policy.device_plugin.config.name:
        vols.append({"name": "config", "configMap": {"name": policy.device_plugin.config.name}})
    if operand is GFD:
        vols.append(
            _host_path("nfd-features", "/etc/kubernetes/node-feature-discovery/features.d", "DirectoryOrCreate")
        )
    if operand is DCGM_EXPORTER:
        vols.append(_host_path("pod-resources", f"{kubelet}/pod-resources", "Directory"))
        if policy.dcgm_exporter.config.name:
            vols.append(
                {
                    "name": "metrics-config",
                    "configMap": {
                        "name": policy.dcgm_exporter.config.name,
                        "items": [{"key": METRICS_CONFIG_KEY, "path": METRICS_CONFIG_KEY}],
                    },
                }
            )
    if operand is MIG_MANAGER and policy.mig_manager.config.name:
        vols.append({"name": "mig-parted-config", "configMap": {"name": policy.mig_manager.config.name}})
    return vols


def _validation_init(policy: ClusterPolicySpec, check: str) -> dict[str, Any]:
    """One validator init container (``gpuchain validate <check>``) that writes ``<check>-ready``.

    Only the driver check is privileged (it inspects the host's driver install). The toolkit check
    must not be: it passes when the NVIDIA runtime injected ``/dev/nvidia*``, and a privileged
    container sees every host device anyway, so it could never fail. The CUDA check needs the
    compute libraries injected as well.
    """
    node_name = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    return _container(
        f"{check}-validation",
        policy.validator,
        ["gpuchain", "validate", check],
        args=["--backend", "nvml"] if check in ("driver", "toolkit") else [],
        env=[
            node_name,
            *gpu_env("compute,utility" if check == "cuda" else "utility"),
            *env_list(getattr(policy.validator, check).env),
        ],
        securityContext={"privileged": check == "driver"},
        volumeMounts=[_validation_mount()],
    )


def _shm_dir(policy: ClusterPolicySpec) -> str:
    return f"{mps_root(policy).rstrip('/')}/shm"


def _mps_shm_init(policy: ClusterPolicySpec) -> dict[str, Any]:
    """The init container that makes ``<root>/shm`` a fresh tmpfs of half the node's memory on the
    host (Bidirectional propagation), as NVIDIA's ``mps-control-daemon mount-shm`` does: the MPS
    daemon and its clients meet in that ``/dev/shm``, and the host's ``/run`` is too small for it."""
    shm = shlex.quote(_shm_dir(policy))  # the root is the policy's text, run by a privileged shell
    script = (
        f"umount {shm} 2>/dev/null; mkdir -p {shm} && "
        "size=$(awk '/^MemTotal:/ {print int($2 / 2) \"k\"}' /proc/meminfo) && "
        f'mount -t tmpfs -o "rw,nosuid,nodev,noexec,relatime,size=${{size:-65536k}}" shm {shm}'
    )
    return _container(
        "mps-shm",
        policy.device_plugin,
        ["sh", "-c", script],
        securityContext={"privileged": True},
        volumeMounts=[{"name": "mps-root", "mountPath": mps_root(policy), "mountPropagation": "Bidirectional"}],
    )


def _init_containers(policy: ClusterPolicySpec, operand: Operand, facts: Facts) -> list[dict[str, Any]]:
    if operand is VALIDATOR:
        return [_validation_init(policy, check) for check in VALIDATIONS]
    mps = [_mps_shm_init(policy)] if _runs_mps(operand, facts) else []
    if operand.waits_for is None or not policy.validator.enabled:
        # Without the validator nobody writes ready files: the links start unordered.
        return mps
    return [_wait_init(policy, operand.waits_for), *mps]


def daemonset(policy: ClusterPolicySpec, operand: Operand, facts: Facts) -> dict[str, Any]:
    """The DaemonSet of one operand."""
    ds = policy.daemonsets
    image = image_of(policy, operand)
    pod_spec: dict[str, Any] = {
        "serviceAccountName": service_account_name(operand),
        "tolerations": [t.to_dict() for t in ds.tolerations],
        "affinity": node_affinity(operand),
        "containers": [_main_container(policy, operand, facts)],
        "volumes": _volumes(operand, policy, facts),
    }
    if ds.priority_class_name:
        pod_spec["priorityClassName"] = ds.priority_class_name
    if image.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in image.image_pull_secrets]
    if image.host_network:
        pod_spec["hostNetwork"] = True
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if ds.pod_security_context:
        pod_spec["securityContext"] = ds.pod_security_context.to_dict()
    if operand is DCGM_EXPORTER and policy.dcgm_exporter.host_pid:
        pod_spec["hostPID"] = True
    if operand.state not in USES_API:
        pod_spec["automountServiceAccountToken"] = False
    if _runs_mps(operand, facts):
        pod_spec["hostPID"] = True
    inits = _init_containers(policy, operand, facts)
    if inits:
        pod_spec["initContainers"] = inits
    if operand not in (DRIVER, TOOLKIT):
        pod_spec["runtimeClassName"] = policy.operator.runtime_class
    if operand is DRIVER:
        pod_spec["hostPID"] = True
        d = policy.driver
        pod_spec["containers"][0]["image"] = driver_image(d.repository, d.image, d.version, facts.driver_os)
    return _daemonset_object(policy, operand, pod_spec, facts, exporter=operand is DCGM_EXPORTER)


def _daemonset_object(
    policy: ClusterPolicySpec, operand: Operand, pod_spec: dict[str, Any], facts: Facts, exporter: bool
) -> dict[str, Any]:
    """The DaemonSet around a pod spec: update strategy, labels, annotations (the exporter's with
    ``exporter``)."""
    ds = policy.daemonsets
    app = {"app": operand.name}
    # The driver restarts only when the upgrade state machine deletes its pod, node by node.
    strategy: dict[str, Any] = {"type": "OnDelete"} if operand is DRIVER else {"type": ds.update_strategy}
    if strategy["type"] == "RollingUpdate":
        mu = ds.rolling_update.max_unavailable
        strategy["rollingUpdate"] = {"maxUnavailable": int(mu) if isinstance(mu, str) and mu.isdigit() else mu}
    template_meta: dict[str, Any] = {"labels": {**app, **MANAGED_BY, **ds.labels}}
    annotations = {**ds.annotations, **(policy.dcgm_exporter.annotations if exporter else {})}
    if annotations:
        template_meta["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(operand.name, facts, app),
        "spec": {
            "selector": {"matchLabels": app},
            "updateStrategy": strategy,
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    }


def _merged(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries with a ``name`` (env, mounts, volumes) once each, first one kept, in order."""
    seen: dict[str, dict[str, Any]] = {}
    for item in items:
        seen.setdefault(item["name"], item)
    return list(seen.values())


def _capabilities(env: list[dict[str, Any]]) -> str:
    """The driver capabilities every role asked for, together (``compute,utility`` for MPS)."""
    asked = {c for e in env if e["name"] == "NVIDIA_DRIVER_CAPABILITIES" for c in e["value"].split(",")}
    return ",".join(sorted(asked | {"utility"}))


def agent_resources(policy: ClusterPolicySpec, roles: list[Operand]) -> dict[str, Any]:
    """The node agent's resources: each request the sum of its roles' requests, and a limit only
    for a resource every role limits (a role without a limit may take any amount), their sum.
    Quantities that do not parse are refused with the policy (``policy._node_agent_problems``)."""
    specs = [image_of(policy, op).resources for op in roles]
    given = [r for r in specs if r is not None]
    requests: dict[str, list[str | int]] = {}
    for res in given:
        for name, quantity in res.requests.items():
            requests.setdefault(name, []).append(quantity)
    limited = set.intersection(*(set(r.limits) for r in given)) if given and len(given) == len(specs) else set()
    out: dict[str, Any] = {}
    if limited:
        out["limits"] = {name: add_quantities(r.limits[name] for r in given) for name in sorted(limited)}
    if requests:
        out["requests"] = {name: add_quantities(q) for name, q in sorted(requests.items())}
    return {"resources": out} if out else {}


def _agent_container(policy: ClusterPolicySpec, roles: list[Operand], facts: Facts) -> dict[str, Any]:
    """``gpuchain node-agent --roles ...``: env and mounts the union of its roles' containers (see
    `_main_container`), privileged if one of them is, the flags each role's container is given."""
    alone = [_main_container(policy, op, facts) for op in roles]
    # CONFIG_FILE is the MIG manager's layouts alone, the node agent's the device plugin's config:
    # the agent is told the layouts by flag.
    every = [e for c in alone for e in c["env"] if e["name"] != "CONFIG_FILE"]
    gpu = {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}
    # Every role shares the agent's one NVML session, the validator's driver and toolkit checks too.
    env = _merged([every[0], *gpu_env(_capabilities(every)), *(e for e in every if e["name"] not in gpu)])
    if GFD in roles:  # GFD's own container is given --mig-strategy; the agent's GFD role reads the variable
        env = _merged([*env, {"name": "MIG_STRATEGY", "value": policy.mig.strategy}])
    args = ["--backend", "nvml", "--roles", ",".join(AGENT_ROLES[op] for op in roles)]
    config = policy.device_plugin.config
    if config.name and any(op in SHARES_PLUGIN_CONFIG for op in roles):
        args += ["--config-dir", "/config"]
    if DCGM_EXPORTER in roles and policy.dcgm_exporter.config.name:
        args += ["--collectors", METRICS_CONFIG_PATH]
    if MIG_MANAGER in roles and policy.mig_manager.config.name:
        args += ["--mig-config-file", MIG_CONFIG_FILE]
    extra: dict[str, Any] = {}
    if DCGM_EXPORTER in roles:  # every role's metrics are on this port, the exporter's
        extra["ports"] = [{"name": "metrics", "containerPort": EXPORTER_PORT, "protocol": "TCP"}]
    image = image_of(policy, roles[0])  # one image for all (policy._node_agent_problems)
    return _container(
        "node-agent",
        image,
        list(NODE_AGENT.command),
        # each role's own flags (the validator's container ran no command of its own to give them to)
        args=[*args, *(a for op in roles if op is not VALIDATOR for a in image_of(policy, op).args)],
        env=env,
        securityContext={"privileged": any(c["securityContext"]["privileged"] for c in alone)},
        volumeMounts=_merged([m for c in alone for m in c["volumeMounts"]]),
        **extra,
        **agent_resources(policy, roles),
    )


def node_agent_daemonset(policy: ClusterPolicySpec, facts: Facts) -> dict[str, Any] | None:
    """The one DaemonSet of the node agent, serving the enabled operands of `AGENT_ROLES` (None
    when it serves none): tolerations, pod settings and volumes the union of what its roles'
    own DaemonSets (`daemonset`) would have, no more."""
    roles = agent_operands(policy)
    if not roles:
        return None
    ds = policy.daemonsets
    images = [image_of(policy, op) for op in roles]
    mps = DEVICE_PLUGIN in roles and facts.mps
    pod_spec: dict[str, Any] = {
        "serviceAccountName": service_account_name(NODE_AGENT),
        "tolerations": [t.to_dict() for t in ds.tolerations],
        "affinity": node_affinity(NODE_AGENT, mig_only=roles == [MIG_MANAGER]),
        "containers": [_agent_container(policy, roles, facts)],
        "volumes": _merged([v for op in roles for v in _volumes(op, policy, facts)]),
    }
    if ds.priority_class_name:
        pod_spec["priorityClassName"] = ds.priority_class_name
    secrets = list(dict.fromkeys(s for image in images for s in image.image_pull_secrets))
    if secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in secrets]
    if any(image.host_network for image in images):
        pod_spec["hostNetwork"] = True
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if ds.pod_security_context:
        pod_spec["securityContext"] = ds.pod_security_context.to_dict()
    if mps or (DCGM_EXPORTER in roles and policy.dcgm_exporter.host_pid):
        pod_spec["hostPID"] = True
    if not any(op.state in USES_API for op in roles):
        pod_spec["automountServiceAccountToken"] = False
    inits = [_validation_init(policy, check) for check in AGENT_VALIDATIONS] if VALIDATOR in roles else []
    if mps:
        inits.append(_mps_shm_init(policy))
    if inits:
        pod_spec["initContainers"] = inits
    pod_spec["runtimeClassName"] = policy.operator.runtime_class
    return _daemonset_object(policy, NODE_AGENT, pod_spec, facts, exporter=DCGM_EXPORTER in roles)


def runtime_class(policy: ClusterPolicySpec, facts: Facts) -> dict[str, Any]:
    """RuntimeClass ``nvidia``: pods that name it get the NVIDIA container runtime handler."""
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": _meta(policy.operator.runtime_class, facts, namespaced=False),
        "handler": RUNTIME_CLASS_HANDLER,
    }


def service_account(operand: Operand, facts: Facts) -> dict[str, Any]:
    """The identity one operand's pods run as (the chart binds exactly what that operand needs)."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(service_account_name(operand), facts, {"app": operand.name}),
    }


def exporter_service(policy: ClusterPolicySpec, facts: Facts) -> dict[str, Any]:
    """The exporter's Service as NVIDIA's operator makes it (name, port name and number, the
    ``prometheus.io/scrape`` annotation, selector on the pods' ``app`` label), so Prometheus
    scrape configs and ServiceMonitors written for NVIDIA's stack keep finding the metrics; it
    selects the pods that serve them, the node agent's where its exporter role does (same port);
    ``dcgmExporter.service.type`` and ``internalTrafficPolicy`` apply as in NVIDIA's operator."""
    app = {"app": DCGM_EXPORTER.name}  # its own label stays NVIDIA's: ServiceMonitors select the Service by it
    spec: dict[str, Any] = {
        "selector": {"app": served_by(policy).get(DCGM_EXPORTER.state, DCGM_EXPORTER.name)},
        "ports": [{"name": EXPORTER_PORT_NAME, "port": EXPORTER_PORT, "targetPort": EXPORTER_PORT, "protocol": "TCP"}],
    }
    service = policy.dcgm_exporter.service
    if service.type:
        spec["type"] = service.type
    if service.internal_traffic_policy:
        spec["internalTrafficPolicy"] = service.internal_traffic_policy
    meta = _meta(EXPORTER_SERVICE, facts, app)
    meta["annotations"] = {"prometheus.io/scrape": "true"}
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def desired(policy: ClusterPolicySpec, facts: Facts) -> list[dict[str, Any]]:
    """Everything the operator should own for this policy, in roll-out order."""
    on = [op for op in OPERANDS if enabled(policy, op)]
    agent = agent_operands(policy)
    separate = [op for op in on if op not in agent]
    agent_ds = node_agent_daemonset(policy, facts)
    objs = [runtime_class(policy, facts)]
    objs += [service_account(op, facts) for op in (*separate, *([NODE_AGENT] if agent else []))]
    objs += [daemonset(policy, op, facts) for op in separate]
    if agent_ds is not None:
        objs.append(agent_ds)
    if DCGM_EXPORTER in on:
        objs.append(exporter_service(policy, facts))
    return objs


def is_gpu_node(labels: dict[str, str]) -> bool:
    """GPU node detection: an NFD NVIDIA PCI label or ``nvidia.com/gpu.present=true``."""
    return any(labels.get(k) == "true" for k in (*NFD_GPU_LABELS, GPU_PRESENT))


def has_nfd_labels(labels: dict[str, str]) -> bool:
    """Did NFD label this node at all (any feature.node.kubernetes.io/ key)?"""
    return any(k.startswith("feature.node.kubernetes.io/") for k in labels)
