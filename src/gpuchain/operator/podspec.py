"""The containers, init containers and volumes of an operand's pod (pure).

Kept apart from the objects that carry them (`gpuchain.operator.desired`): this is where gpuchain
decides what runs inside each operand's pod on a node.

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
"""

from __future__ import annotations

import shlex
from typing import Any

from gpuchain.gpu.nvmlrelease import DEFAULT_DIR as NVML_RELEASE_DIR
from gpuchain.operator.operands import (
    DCGM_EXPORTER,
    DEVICE_PLUGIN,
    DRIVER,
    EXPORTER_PORT,
    GFD,
    METRICS_CONFIG_KEY,
    METRICS_CONFIG_PATH,
    MIG_CONFIG_FILE,
    MIG_MANAGER,
    MPS_SHM_MOUNT,
    SHARES_PLUGIN_CONFIG,
    TOOLKIT,
    USES_NVML,
    VALIDATIONS,
    VALIDATOR,
    Facts,
    Operand,
    gpu_env,
    image_of,
    mps_root,
    runs_mps,
)
from gpuchain.operator.policy import ClusterPolicySpec, EnvVar, ImageSpec


def _host_path(name: str, path: str, kind: str = "") -> dict[str, Any]:
    hp: dict[str, Any] = {"path": path}
    if kind:
        hp["type"] = kind
    return {"name": name, "hostPath": hp}


def _validation_mount() -> dict[str, Any]:
    return {"name": "run-gpuchain", "mountPath": "/run/gpuchain", "mountPropagation": "HostToContainer"}


def container_spec(name: str, *, image: ImageSpec, command: list[str], **extra: Any) -> dict[str, Any]:
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
    return container_spec(
        f"{link}-validation",
        image=policy.validator,
        command=["gpuchain", "validate", "wait", link],
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


def main_container(policy: ClusterPolicySpec, *, operand: Operand, facts: Facts) -> dict[str, Any]:
    image = image_of(policy, operand)
    node_name = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    mounts = [_validation_mount()]
    if operand is DRIVER:
        return container_spec(
            "nvidia-driver-ctr",
            image=image,
            command=["nvidia-driver", "init"],
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
        return container_spec(
            "nvidia-container-toolkit-ctr",
            image=image,
            command=[],
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
        env += gpu_env("compute,utility" if runs_mps(operand, facts) else "utility")
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
    if runs_mps(operand, facts):
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
    return container_spec(
        operand.name.removeprefix("nvidia-").removesuffix("-daemonset"),
        image=image,
        command=list(operand.command),
        args=[*args, *image.args],
        env=_env(image, env),
        securityContext={"privileged": privileged},
        volumeMounts=mounts,
        **extra,
        **_resources(image),
    )


def pod_volumes(operand: Operand, *, policy: ClusterPolicySpec, facts: Facts) -> list[dict[str, Any]]:
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
    if runs_mps(operand, facts):
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


def validation_init(policy: ClusterPolicySpec, check: str) -> dict[str, Any]:
    """One validator init container (``gpuchain validate <check>``) that writes ``<check>-ready``.

    Only the driver check is privileged (it inspects the host's driver install). The toolkit check
    must not be: it passes when the NVIDIA runtime injected ``/dev/nvidia*``, and a privileged
    container sees every host device anyway, so it could never fail. The CUDA check needs the
    compute libraries injected as well.
    """
    node_name = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    return container_spec(
        f"{check}-validation",
        image=policy.validator,
        command=["gpuchain", "validate", check],
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


def mps_shm_init(policy: ClusterPolicySpec) -> dict[str, Any]:
    """The init container that makes ``<root>/shm`` a fresh tmpfs of half the node's memory on the
    host (Bidirectional propagation), as NVIDIA's ``mps-control-daemon mount-shm`` does: the MPS
    daemon and its clients meet in that ``/dev/shm``, and the host's ``/run`` is too small for it."""
    shm = shlex.quote(_shm_dir(policy))  # the root is the policy's text, run by a privileged shell
    script = (
        f"umount {shm} 2>/dev/null; mkdir -p {shm} && "
        "size=$(awk '/^MemTotal:/ {print int($2 / 2) \"k\"}' /proc/meminfo) && "
        f'mount -t tmpfs -o "rw,nosuid,nodev,noexec,relatime,size=${{size:-65536k}}" shm {shm}'
    )
    return container_spec(
        "mps-shm",
        image=policy.device_plugin,
        command=["sh", "-c", script],
        securityContext={"privileged": True},
        volumeMounts=[{"name": "mps-root", "mountPath": mps_root(policy), "mountPropagation": "Bidirectional"}],
    )


def init_containers(policy: ClusterPolicySpec, *, operand: Operand, facts: Facts) -> list[dict[str, Any]]:
    if operand is VALIDATOR:
        return [validation_init(policy, check) for check in VALIDATIONS]
    mps = [mps_shm_init(policy)] if runs_mps(operand, facts) else []
    if operand.waits_for is None or not policy.validator.enabled:
        # Without the validator nobody writes ready files: the links start unordered.
        return mps
    return [_wait_init(policy, operand.waits_for), *mps]
