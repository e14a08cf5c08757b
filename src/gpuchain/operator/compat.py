"""What gpuchain does with each section of NVIDIA's ClusterPolicy: implemented, ignored, refused.

Every key of NVIDIA's ``nvidia.com/v1`` ClusterPolicy is a known key of gpuchain's (see
`spec.ClusterPolicySpec`), so a policy written for NVIDIA's operator parses. What gpuchain then
does with a key is decided here, in one table that the parser, `operator import` and the docs
all read:

- implemented: the operands are deployed accordingly;
- ignored: accepted and without effect, because it is harmless or gpuchain does the job another
  way (the note says which);
- refused: a feature gpuchain does not have. Accepted while off; when on, the policy is refused
  with one line naming the key and the feature, so nobody believes it is running.

"On" follows NVIDIA's operator: the sandbox operands (vGPU, VFIO, KubeVirt/Kata device plugins,
confidential computing) count only when ``sandboxWorkloads.enabled`` is true, because NVIDIA's
operator deploys them only then (its sample sets ``vgpuManager.enabled: true`` with sandbox
workloads off); ``kataManager`` is deprecated upstream and never deployed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from gpuchain.operator.spec import GPUCHAIN_IMAGE, ClusterPolicySpec, Problem, to_snake

Support = Literal["implemented", "ignored", "refused"]

#: NVIDIA's images for the operands gpuchain runs from its own image.
NVIDIA_OPERAND_IMAGES = frozenset(
    {
        "gpu-operator",
        "gpu-operator-validator",
        "k8s-device-plugin",
        "gpu-feature-discovery",
        "dcgm-exporter",
        "k8s-mig-manager",
    }
)
#: Operands whose containers run gpuchain commands, so their image must be gpuchain's.
GPUCHAIN_IMAGE_OPERANDS = ("validator", "devicePlugin", "dcgmExporter", "gfd", "migManager")


@dataclass(frozen=True)
class Feature:
    """One row of the table: a spec key (dotted, NVIDIA's spelling), what it is, what gpuchain does."""

    key: str
    support: Support
    what: str
    note: str = ""
    #: When the key is in effect (refused: when it is refused; ignored: when import reports it).
    on: Callable[[ClusterPolicySpec], bool] | None = None
    #: The key whose value turns the feature on (for the message); default ``<key>.enabled``.
    switch: str = ""

    def switch_key(self) -> str:
        """The dotted key a refusal names."""
        return self.switch or f"{self.key}.enabled"


def value_at(policy: ClusterPolicySpec, key: str) -> Any:
    """The parsed value of a dotted spec key (NVIDIA's camelCase spelling)."""
    node: Any = policy
    for part in key.split("."):
        model = type(node)
        name = next((n for n, f in model.model_fields.items() if f.alias == part), to_snake(part))
        node = getattr(node, name)
    return node


def _sandbox(policy: ClusterPolicySpec, mode: str | None = None) -> bool:
    sw = policy.sandbox_workloads
    return sw.enabled and (mode is None or sw.mode == mode)


FEATURES: tuple[Feature, ...] = (
    # Implemented
    Feature(
        "operator.runtimeClass",
        "implemented",
        "RuntimeClass of the operand pods",
        "the RuntimeClass gpuchain creates and names in its operand pods",
    ),
    Feature(
        "operator.defaultRuntime",
        "ignored",
        "container runtime",
        "deprecated by NVIDIA and ignored by its operator; gpuchain's operator, like NVIDIA's, sets the toolkit's "
        "RUNTIME from the GPU nodes' containerRuntimeVersion (containerd if any node runs it)",
    ),
    Feature(
        "daemonsets",
        "implemented",
        "settings of every operand DaemonSet",
        "tolerations, priorityClassName, updateStrategy, rollingUpdate, labels, annotations, podSecurityContext",
    ),
    Feature(
        "driver",
        "implemented",
        "NVIDIA driver container",
        "NVIDIA's driver image; enabled, image keys, env, args, imagePullSecrets, resources, hostNetwork, "
        "kernelModuleType, useOpenKernelModules",
    ),
    Feature(
        "driver.upgradePolicy",
        "implemented",
        "node-by-node driver upgrades",
        "autoUpgrade, maxParallelUpgrades, maxUnavailable, podDeletion",
    ),
    Feature("toolkit", "implemented", "NVIDIA container toolkit", "NVIDIA's toolkit image"),
    Feature("validator", "implemented", "validator", "gpuchain validate; driver, toolkit, cuda and plugin env"),
    Feature("devicePlugin", "implemented", "device plugin", "gpuchain device-plugin; config.name and config.default"),
    Feature(
        "devicePlugin.mps",
        "implemented",
        "host directory of the MPS control daemons",
        "root: when the device plugin's ConfigMap has sharing.mps, the device plugin runs the daemons there "
        "(MPS_ROOT, the root and its shm tmpfs mounted, host PID, the compute capability)",
    ),
    Feature(
        "dcgmExporter",
        "implemented",
        "metrics exporter",
        "gpuchain exporter; config.name (dcgm-metrics.csv), annotations, hostPID",
    ),
    Feature(
        "dcgmExporter.service",
        "implemented",
        "Service of the exporter",
        "nvidia-dcgm-exporter, port gpu-metrics (9400), as NVIDIA's; type and internalTrafficPolicy",
    ),
    Feature("gfd", "implemented", "GPU feature discovery", "gpuchain gfd; the device plugin's config.name"),
    Feature("migManager", "implemented", "MIG manager", "gpuchain mig-manager; config.name and config.default"),
    Feature("mig", "implemented", "MIG strategy", "none, single or mixed"),
    Feature("hostPaths.rootFS", "implemented", "host root", "mounted by driver and toolkit"),
    Feature(
        "hostPaths.kubeletRootDir",
        "implemented",
        "kubelet directory",
        "device-plugins and pod-resources sockets under it",
    ),
    # Accepted and ignored
    Feature(
        "psp",
        "ignored",
        "PodSecurityPolicy",
        "removed from Kubernetes in 1.25; NVIDIA's operator no longer reads it either",
        on=lambda p: p.psp.enabled,
    ),
    Feature(
        "cdi",
        "ignored",
        "CDI settings of NVIDIA's toolkit",
        "gpuchain's device plugin takes its device list strategy (cdi-annotations, cdi-cri) from its own config",
        on=lambda p: p.cdi.enabled or p.cdi.default,
    ),
    Feature(
        "operator.initContainer",
        "ignored",
        "image of NVIDIA's init containers",
        "gpuchain's init containers run the validator image",
    ),
    Feature(
        "operator.use_ocp_driver_toolkit",
        "ignored",
        "OpenShift Driver Toolkit",
        "gpuchain's driver DaemonSet runs driver.* on every distribution",
        on=lambda p: p.operator.use_ocp_driver_toolkit,
        switch="operator.use_ocp_driver_toolkit",
    ),
    Feature(
        "operator.labels",
        "ignored",
        "labels of NVIDIA's operator objects",
        "use daemonsets.labels for operand pods",
        on=lambda p: bool(p.operator.labels),
        switch="operator.labels",
    ),
    Feature(
        "operator.annotations",
        "ignored",
        "annotations of NVIDIA's operator objects",
        "use daemonsets.annotations for operand pods",
        on=lambda p: bool(p.operator.annotations),
        switch="operator.annotations",
    ),
    Feature(
        "dcgm",
        "ignored",
        "standalone DCGM host engine",
        "gpuchain's exporter reads NVML itself and needs no host engine",
        on=lambda p: p.dcgm.enabled,
    ),
    Feature(
        "driver.manager",
        "ignored",
        "NVIDIA's k8s-driver-manager",
        "gpuchain's operator evicts GPU pods and restarts drivers itself (upgradePolicy)",
    ),
    Feature(
        "driver.startupProbe",
        "ignored",
        "driver container probes",
        "the validator's driver check gates the chain instead",
        on=lambda p: p.driver.startup_probe is not None,
        switch="driver.startupProbe",
    ),
    Feature(
        "driver.livenessProbe",
        "ignored",
        "driver container probes",
        "see startupProbe",
        on=lambda p: p.driver.liveness_probe is not None,
        switch="driver.livenessProbe",
    ),
    Feature(
        "driver.readinessProbe",
        "ignored",
        "driver container probes",
        "see startupProbe",
        on=lambda p: p.driver.readiness_probe is not None,
        switch="driver.readinessProbe",
    ),
    Feature(
        "driver.upgradePolicy.drain",
        "ignored",
        "node drain before a driver upgrade",
        "gpuchain evicts the node's GPU pods (podDeletion) instead of draining it",
        on=lambda p: p.driver.upgrade_policy.drain.enable,
        switch="driver.upgradePolicy.drain.enable",
    ),
    Feature(
        "driver.upgradePolicy.waitForCompletion",
        "ignored",
        "wait for jobs before a driver upgrade",
        "gpuchain goes straight to evicting GPU pods, which their PodDisruptionBudgets can hold",
        on=lambda p: (
            p.driver.upgrade_policy.wait_for_completion.timeout_seconds > 0
            or bool(p.driver.upgrade_policy.wait_for_completion.pod_selector)
        ),
        switch="driver.upgradePolicy.waitForCompletion.timeoutSeconds",
    ),
    Feature(
        "driver.licensingConfig.nlsEnabled",
        "ignored",
        "NLS licensing switch",
        "only in effect with a licensing ConfigMap or Secret (refused)",
    ),
    Feature(
        "dcgmExporter.serviceMonitor",
        "ignored",
        "ServiceMonitor of the exporter",
        "gpuchain creates no ServiceMonitor; keep your own on the nvidia-dcgm-exporter Service (port gpu-metrics)",
        on=lambda p: p.dcgm_exporter.service_monitor.enabled,
    ),
    Feature(
        "dcgmExporter.podLabelAllowlistRegex",
        "ignored",
        "pod label allowlist",
        "only in effect with enablePodLabels (refused)",
    ),
    Feature("validator.vfioPCI", "ignored", "sandbox validation env", "sandbox workloads are refused"),
    Feature("validator.vgpuDevices", "ignored", "sandbox validation env", "sandbox workloads are refused"),
    Feature("validator.vgpuManager", "ignored", "sandbox validation env", "sandbox workloads are refused"),
    Feature(
        "sandboxWorkloads.defaultWorkload",
        "ignored",
        "default sandbox workload",
        "only in effect with sandboxWorkloads.enabled (refused)",
    ),
    Feature(
        "sandboxWorkloads.mode", "ignored", "sandbox mode", "only in effect with sandboxWorkloads.enabled (refused)"
    ),
    Feature(
        "kataManager",
        "ignored",
        "Kata manager",
        "deprecated; NVIDIA's operator never deploys it",
        on=lambda p: p.kata_manager.enabled,
    ),
    # Refused when on
    Feature(
        "sandboxWorkloads",
        "refused",
        "sandbox workloads (GPUs for virtual machines)",
        on=lambda p: p.sandbox_workloads.enabled,
    ),
    Feature(
        "vgpuManager",
        "refused",
        "vGPU manager",
        "counts only with sandboxWorkloads.enabled, as in NVIDIA's operator",
        on=lambda p: _sandbox(p) and p.vgpu_manager.enabled,
    ),
    Feature(
        "vgpuDeviceManager",
        "refused",
        "vGPU device manager",
        "counts only with sandboxWorkloads.enabled, as in NVIDIA's operator",
        on=lambda p: _sandbox(p) and p.vgpu_device_manager.enabled,
    ),
    Feature(
        "vfioManager",
        "refused",
        "VFIO manager",
        "counts only with sandboxWorkloads.enabled, as in NVIDIA's operator",
        on=lambda p: _sandbox(p) and p.vfio_manager.enabled,
    ),
    Feature(
        "sandboxDevicePlugin",
        "refused",
        "KubeVirt sandbox device plugin",
        "counts only with sandboxWorkloads.enabled and mode kubevirt, as in NVIDIA's operator",
        on=lambda p: _sandbox(p, "kubevirt") and p.sandbox_device_plugin.enabled,
    ),
    Feature(
        "kataSandboxDevicePlugin",
        "refused",
        "Kata sandbox device plugin",
        "counts only with sandboxWorkloads.enabled and mode kata, as in NVIDIA's operator",
        on=lambda p: _sandbox(p, "kata") and p.kata_sandbox_device_plugin.enabled,
    ),
    Feature(
        "ccManager",
        "refused",
        "confidential computing manager",
        "counts only with sandboxWorkloads.enabled and mode kata, as in NVIDIA's operator",
        on=lambda p: _sandbox(p, "kata") and p.cc_manager.enabled,
    ),
    Feature("nodeStatusExporter", "refused", "node status exporter", on=lambda p: p.node_status_exporter.enabled),
    Feature("gds", "refused", "GPUDirect Storage (nvidia-fs)", on=lambda p: p.gds.enabled),
    Feature("gdrcopy", "refused", "GDRCopy driver", on=lambda p: p.gdrcopy.enabled),
    Feature("psa", "refused", "Pod Security Admission labelling of the namespace", on=lambda p: p.psa.enabled),
    Feature(
        "cdi.nriPluginEnabled",
        "refused",
        "NRI plugin for CDI injection",
        on=lambda p: p.cdi.nri_plugin_enabled,
        switch="cdi.nriPluginEnabled",
    ),
    Feature(
        "operator.metrics.serviceMonitor",
        "refused",
        "ServiceMonitor for operator metrics",
        on=lambda p: p.operator.metrics.service_monitor.enabled,
    ),
    Feature(
        "driver.usePrecompiled",
        "refused",
        "precompiled driver images",
        on=lambda p: p.driver.use_precompiled,
        switch="driver.usePrecompiled",
    ),
    Feature(
        "driver.useNvidiaDriverCRD",
        "refused",
        "NVIDIADriver custom resources",
        on=lambda p: p.driver.use_nvidia_driver_crd,
        switch="driver.useNvidiaDriverCRD",
    ),
    Feature("driver.rdma", "refused", "GPUDirect RDMA (nvidia-peermem)", on=lambda p: p.driver.rdma.enabled),
    Feature(
        "driver.repoConfig",
        "refused",
        "package repository ConfigMap for the driver container",
        "on when configMapName is set",
        on=lambda p: bool(p.driver.repo_config.config_map_name),
        switch="driver.repoConfig.configMapName",
    ),
    Feature(
        "driver.certConfig",
        "refused",
        "certificate ConfigMap for the driver container",
        "on when name is set",
        on=lambda p: bool(p.driver.cert_config.name),
        switch="driver.certConfig.name",
    ),
    Feature(
        "driver.licensingConfig.secretName",
        "refused",
        "vGPU guest driver licensing",
        "on when set",
        on=lambda p: bool(p.driver.licensing_config.secret_name),
        switch="driver.licensingConfig.secretName",
    ),
    Feature(
        "driver.licensingConfig.configMapName",
        "refused",
        "vGPU guest driver licensing",
        "on when set",
        on=lambda p: bool(p.driver.licensing_config.config_map_name),
        switch="driver.licensingConfig.configMapName",
    ),
    Feature(
        "driver.virtualTopology",
        "refused",
        "vGPU topology daemon configuration",
        "on when config is set",
        on=lambda p: bool(p.driver.virtual_topology.config),
        switch="driver.virtualTopology.config",
    ),
    Feature(
        "driver.kernelModuleConfig",
        "refused",
        "kernel module parameters ConfigMap",
        "on when name is set",
        on=lambda p: bool(p.driver.kernel_module_config.name),
        switch="driver.kernelModuleConfig.name",
    ),
    Feature(
        "driver.secretEnv",
        "refused",
        "driver container env from a Secret",
        on=lambda p: bool(p.driver.secret_env),
        switch="driver.secretEnv",
    ),
    Feature(
        "dcgmExporter.enablePodLabels",
        "refused",
        "pod label enrichment of metrics",
        on=lambda p: p.dcgm_exporter.enable_pod_labels,
        switch="dcgmExporter.enablePodLabels",
    ),
    Feature(
        "dcgmExporter.enablePodUID",
        "refused",
        "pod UID enrichment of metrics",
        on=lambda p: p.dcgm_exporter.enable_pod_uid,
        switch="dcgmExporter.enablePodUID",
    ),
    Feature(
        "dcgmExporter.hpcJobMapping",
        "refused",
        "HPC job mapping of metrics",
        on=lambda p: p.dcgm_exporter.hpc_job_mapping.enabled,
    ),
    Feature(
        "migManager.gpuClientsConfig",
        "refused",
        "host GPU clients stopped around MIG changes",
        "on when name is set",
        on=lambda p: bool(p.mig_manager.gpu_clients_config.name),
        switch="migManager.gpuClientsConfig.name",
    ),
    Feature(
        "toolkit.installDir",
        "refused",
        "toolkit install directory other than /usr/local/nvidia",
        "on when it differs",
        on=lambda p: p.toolkit.install_dir != "/usr/local/nvidia",
        switch="toolkit.installDir",
    ),
    Feature(
        "hostPaths.driverInstallDir",
        "refused",
        "driver install directory other than /run/nvidia/driver",
        "on when it differs",
        on=lambda p: p.host_paths.driver_install_dir != "/run/nvidia/driver",
        switch="hostPaths.driverInstallDir",
    ),
)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def refusals(policy: ClusterPolicySpec) -> list[Problem]:
    """One problem per feature that is on and that gpuchain does not have."""
    out = []
    for f in FEATURES:
        if f.support == "refused" and f.on is not None and f.on(policy):
            key = f.switch_key()
            out.append(
                Problem(
                    key,
                    f"{f.what} is not supported by gpuchain (set it off or remove it)",
                    _show(value_at(policy, key)),
                )
            )
    return out


def nvidia_image_problems(policy: ClusterPolicySpec) -> list[Problem]:
    """Operands that run gpuchain commands but name one of NVIDIA's images: their pods could not start."""
    out = []
    for key in GPUCHAIN_IMAGE_OPERANDS:
        image = value_at(policy, key)
        if image.enabled and image.image != GPUCHAIN_IMAGE and image.image in NVIDIA_OPERAND_IMAGES:
            out.append(
                Problem(
                    f"{key}.image",
                    f"{image.image!r} is NVIDIA's image; gpuchain runs this operand from its own image "
                    "(remove repository, image and version, or convert the policy with `gpuchain operator import`)",
                )
            )
    return out


def in_effect(policy: ClusterPolicySpec, support: Support) -> list[Feature]:
    """The features of one kind that this policy turns on (for `operator import`'s report)."""
    return [f for f in FEATURES if f.support == support and f.on is not None and f.on(policy)]
