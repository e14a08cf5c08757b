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


@dataclass(frozen=True, kw_only=True)
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
        key="operator.runtimeClass",
        support="implemented",
        what="RuntimeClass of the operand pods",
        note="the RuntimeClass gpuchain creates and names in its operand pods",
    ),
    Feature(
        key="operator.defaultRuntime",
        support="ignored",
        what="container runtime",
        note="deprecated by NVIDIA and ignored by its operator; gpuchain's operator, like NVIDIA's, sets the toolkit's "
        "RUNTIME from the GPU nodes' containerRuntimeVersion (containerd if any node runs it)",
    ),
    Feature(
        key="daemonsets",
        support="implemented",
        what="settings of every operand DaemonSet",
        note="tolerations, priorityClassName, updateStrategy, rollingUpdate, labels, annotations, podSecurityContext",
    ),
    Feature(
        key="driver",
        support="implemented",
        what="NVIDIA driver container",
        note="NVIDIA's driver image; enabled, image keys, env, args, imagePullSecrets, resources, hostNetwork, "
        "kernelModuleType, useOpenKernelModules",
    ),
    Feature(
        key="driver.upgradePolicy",
        support="implemented",
        what="node-by-node driver upgrades",
        note="autoUpgrade, maxParallelUpgrades, maxUnavailable, podDeletion",
    ),
    Feature(key="toolkit", support="implemented", what="NVIDIA container toolkit", note="NVIDIA's toolkit image"),
    Feature(
        key="validator",
        support="implemented",
        what="validator",
        note="gpuchain validate; driver, toolkit, cuda and plugin env",
    ),
    Feature(
        key="devicePlugin",
        support="implemented",
        what="device plugin",
        note="gpuchain device-plugin; config.name and config.default",
    ),
    Feature(
        key="devicePlugin.mps",
        support="implemented",
        what="host directory of the MPS control daemons",
        note="root: when the device plugin's ConfigMap has sharing.mps, the device plugin runs the daemons there "
        "(MPS_ROOT, the root and its shm tmpfs mounted, host PID, the compute capability)",
    ),
    Feature(
        key="dcgmExporter",
        support="implemented",
        what="metrics exporter",
        note="gpuchain exporter; config.name (dcgm-metrics.csv), annotations, hostPID",
    ),
    Feature(
        key="dcgmExporter.service",
        support="implemented",
        what="Service of the exporter",
        note="nvidia-dcgm-exporter, port gpu-metrics (9400), as NVIDIA's; type and internalTrafficPolicy",
    ),
    Feature(
        key="gfd",
        support="implemented",
        what="GPU feature discovery",
        note="gpuchain gfd; the device plugin's config.name",
    ),
    Feature(
        key="migManager",
        support="implemented",
        what="MIG manager",
        note="gpuchain mig-manager; config.name and config.default",
    ),
    Feature(key="mig", support="implemented", what="MIG strategy", note="none, single or mixed"),
    Feature(key="hostPaths.rootFS", support="implemented", what="host root", note="mounted by driver and toolkit"),
    Feature(
        key="hostPaths.kubeletRootDir",
        support="implemented",
        what="kubelet directory",
        note="device-plugins and pod-resources sockets under it",
    ),
    # Accepted and ignored
    Feature(
        key="psp",
        support="ignored",
        what="PodSecurityPolicy",
        note="removed from Kubernetes in 1.25; NVIDIA's operator no longer reads it either",
        on=lambda p: p.psp.enabled,
    ),
    Feature(
        key="cdi",
        support="ignored",
        what="CDI settings of NVIDIA's toolkit",
        note="gpuchain's device plugin takes its device list strategy (cdi-annotations, cdi-cri) from its own config",
        on=lambda p: p.cdi.enabled or p.cdi.default,
    ),
    Feature(
        key="operator.initContainer",
        support="ignored",
        what="image of NVIDIA's init containers",
        note="gpuchain's init containers run the validator image",
    ),
    Feature(
        key="operator.use_ocp_driver_toolkit",
        support="ignored",
        what="OpenShift Driver Toolkit",
        note="gpuchain's driver DaemonSet runs driver.* on every distribution",
        on=lambda p: p.operator.use_ocp_driver_toolkit,
        switch="operator.use_ocp_driver_toolkit",
    ),
    Feature(
        key="operator.labels",
        support="ignored",
        what="labels of NVIDIA's operator objects",
        note="use daemonsets.labels for operand pods",
        on=lambda p: bool(p.operator.labels),
        switch="operator.labels",
    ),
    Feature(
        key="operator.annotations",
        support="ignored",
        what="annotations of NVIDIA's operator objects",
        note="use daemonsets.annotations for operand pods",
        on=lambda p: bool(p.operator.annotations),
        switch="operator.annotations",
    ),
    Feature(
        key="dcgm",
        support="ignored",
        what="standalone DCGM host engine",
        note="gpuchain's exporter reads NVML itself and needs no host engine",
        on=lambda p: p.dcgm.enabled,
    ),
    Feature(
        key="driver.manager",
        support="ignored",
        what="NVIDIA's k8s-driver-manager",
        note="gpuchain's operator evicts GPU pods and restarts drivers itself (upgradePolicy)",
    ),
    Feature(
        key="driver.startupProbe",
        support="ignored",
        what="driver container probes",
        note="the validator's driver check gates the chain instead",
        on=lambda p: p.driver.startup_probe is not None,
        switch="driver.startupProbe",
    ),
    Feature(
        key="driver.livenessProbe",
        support="ignored",
        what="driver container probes",
        note="see startupProbe",
        on=lambda p: p.driver.liveness_probe is not None,
        switch="driver.livenessProbe",
    ),
    Feature(
        key="driver.readinessProbe",
        support="ignored",
        what="driver container probes",
        note="see startupProbe",
        on=lambda p: p.driver.readiness_probe is not None,
        switch="driver.readinessProbe",
    ),
    Feature(
        key="driver.upgradePolicy.drain",
        support="ignored",
        what="node drain before a driver upgrade",
        note="gpuchain evicts the node's GPU pods (podDeletion) instead of draining it",
        on=lambda p: p.driver.upgrade_policy.drain.enable,
        switch="driver.upgradePolicy.drain.enable",
    ),
    Feature(
        key="driver.upgradePolicy.waitForCompletion",
        support="ignored",
        what="wait for jobs before a driver upgrade",
        note="gpuchain goes straight to evicting GPU pods, which their PodDisruptionBudgets can hold",
        on=lambda p: (
            p.driver.upgrade_policy.wait_for_completion.timeout_seconds > 0
            or bool(p.driver.upgrade_policy.wait_for_completion.pod_selector)
        ),
        switch="driver.upgradePolicy.waitForCompletion.timeoutSeconds",
    ),
    Feature(
        key="driver.licensingConfig.nlsEnabled",
        support="ignored",
        what="NLS licensing switch",
        note="only in effect with a licensing ConfigMap or Secret (refused)",
    ),
    Feature(
        key="dcgmExporter.serviceMonitor",
        support="ignored",
        what="ServiceMonitor of the exporter",
        note="gpuchain creates no ServiceMonitor; keep your own on the nvidia-dcgm-exporter Service (port gpu-metrics)",
        on=lambda p: p.dcgm_exporter.service_monitor.enabled,
    ),
    Feature(
        key="dcgmExporter.podLabelAllowlistRegex",
        support="ignored",
        what="pod label allowlist",
        note="only in effect with enablePodLabels (refused)",
    ),
    Feature(
        key="validator.vfioPCI", support="ignored", what="sandbox validation env", note="sandbox workloads are refused"
    ),
    Feature(
        key="validator.vgpuDevices",
        support="ignored",
        what="sandbox validation env",
        note="sandbox workloads are refused",
    ),
    Feature(
        key="validator.vgpuManager",
        support="ignored",
        what="sandbox validation env",
        note="sandbox workloads are refused",
    ),
    Feature(
        key="sandboxWorkloads.defaultWorkload",
        support="ignored",
        what="default sandbox workload",
        note="only in effect with sandboxWorkloads.enabled (refused)",
    ),
    Feature(
        key="sandboxWorkloads.mode",
        support="ignored",
        what="sandbox mode",
        note="only in effect with sandboxWorkloads.enabled (refused)",
    ),
    Feature(
        key="kataManager",
        support="ignored",
        what="Kata manager",
        note="deprecated; NVIDIA's operator never deploys it",
        on=lambda p: p.kata_manager.enabled,
    ),
    # Refused when on
    Feature(
        key="sandboxWorkloads",
        support="refused",
        what="sandbox workloads (GPUs for virtual machines)",
        on=lambda p: p.sandbox_workloads.enabled,
    ),
    Feature(
        key="vgpuManager",
        support="refused",
        what="vGPU manager",
        note="counts only with sandboxWorkloads.enabled, as in NVIDIA's operator",
        on=lambda p: _sandbox(p) and p.vgpu_manager.enabled,
    ),
    Feature(
        key="vgpuDeviceManager",
        support="refused",
        what="vGPU device manager",
        note="counts only with sandboxWorkloads.enabled, as in NVIDIA's operator",
        on=lambda p: _sandbox(p) and p.vgpu_device_manager.enabled,
    ),
    Feature(
        key="vfioManager",
        support="refused",
        what="VFIO manager",
        note="counts only with sandboxWorkloads.enabled, as in NVIDIA's operator",
        on=lambda p: _sandbox(p) and p.vfio_manager.enabled,
    ),
    Feature(
        key="sandboxDevicePlugin",
        support="refused",
        what="KubeVirt sandbox device plugin",
        note="counts only with sandboxWorkloads.enabled and mode kubevirt, as in NVIDIA's operator",
        on=lambda p: _sandbox(p, "kubevirt") and p.sandbox_device_plugin.enabled,
    ),
    Feature(
        key="kataSandboxDevicePlugin",
        support="refused",
        what="Kata sandbox device plugin",
        note="counts only with sandboxWorkloads.enabled and mode kata, as in NVIDIA's operator",
        on=lambda p: _sandbox(p, "kata") and p.kata_sandbox_device_plugin.enabled,
    ),
    Feature(
        key="ccManager",
        support="refused",
        what="confidential computing manager",
        note="counts only with sandboxWorkloads.enabled and mode kata, as in NVIDIA's operator",
        on=lambda p: _sandbox(p, "kata") and p.cc_manager.enabled,
    ),
    Feature(
        key="nodeStatusExporter",
        support="refused",
        what="node status exporter",
        on=lambda p: p.node_status_exporter.enabled,
    ),
    Feature(key="gds", support="refused", what="GPUDirect Storage (nvidia-fs)", on=lambda p: p.gds.enabled),
    Feature(key="gdrcopy", support="refused", what="GDRCopy driver", on=lambda p: p.gdrcopy.enabled),
    Feature(
        key="psa",
        support="refused",
        what="Pod Security Admission labelling of the namespace",
        on=lambda p: p.psa.enabled,
    ),
    Feature(
        key="cdi.nriPluginEnabled",
        support="refused",
        what="NRI plugin for CDI injection",
        on=lambda p: p.cdi.nri_plugin_enabled,
        switch="cdi.nriPluginEnabled",
    ),
    Feature(
        key="operator.metrics.serviceMonitor",
        support="refused",
        what="ServiceMonitor for operator metrics",
        on=lambda p: p.operator.metrics.service_monitor.enabled,
    ),
    Feature(
        key="driver.usePrecompiled",
        support="refused",
        what="precompiled driver images",
        on=lambda p: p.driver.use_precompiled,
        switch="driver.usePrecompiled",
    ),
    Feature(
        key="driver.useNvidiaDriverCRD",
        support="refused",
        what="NVIDIADriver custom resources",
        on=lambda p: p.driver.use_nvidia_driver_crd,
        switch="driver.useNvidiaDriverCRD",
    ),
    Feature(
        key="driver.rdma", support="refused", what="GPUDirect RDMA (nvidia-peermem)", on=lambda p: p.driver.rdma.enabled
    ),
    Feature(
        key="driver.repoConfig",
        support="refused",
        what="package repository ConfigMap for the driver container",
        note="on when configMapName is set",
        on=lambda p: bool(p.driver.repo_config.config_map_name),
        switch="driver.repoConfig.configMapName",
    ),
    Feature(
        key="driver.certConfig",
        support="refused",
        what="certificate ConfigMap for the driver container",
        note="on when name is set",
        on=lambda p: bool(p.driver.cert_config.name),
        switch="driver.certConfig.name",
    ),
    Feature(
        key="driver.licensingConfig.secretName",
        support="refused",
        what="vGPU guest driver licensing",
        note="on when set",
        on=lambda p: bool(p.driver.licensing_config.secret_name),
        switch="driver.licensingConfig.secretName",
    ),
    Feature(
        key="driver.licensingConfig.configMapName",
        support="refused",
        what="vGPU guest driver licensing",
        note="on when set",
        on=lambda p: bool(p.driver.licensing_config.config_map_name),
        switch="driver.licensingConfig.configMapName",
    ),
    Feature(
        key="driver.virtualTopology",
        support="refused",
        what="vGPU topology daemon configuration",
        note="on when config is set",
        on=lambda p: bool(p.driver.virtual_topology.config),
        switch="driver.virtualTopology.config",
    ),
    Feature(
        key="driver.kernelModuleConfig",
        support="refused",
        what="kernel module parameters ConfigMap",
        note="on when name is set",
        on=lambda p: bool(p.driver.kernel_module_config.name),
        switch="driver.kernelModuleConfig.name",
    ),
    Feature(
        key="driver.secretEnv",
        support="refused",
        what="driver container env from a Secret",
        on=lambda p: bool(p.driver.secret_env),
        switch="driver.secretEnv",
    ),
    Feature(
        key="dcgmExporter.enablePodLabels",
        support="refused",
        what="pod label enrichment of metrics",
        on=lambda p: p.dcgm_exporter.enable_pod_labels,
        switch="dcgmExporter.enablePodLabels",
    ),
    Feature(
        key="dcgmExporter.enablePodUID",
        support="refused",
        what="pod UID enrichment of metrics",
        on=lambda p: p.dcgm_exporter.enable_pod_uid,
        switch="dcgmExporter.enablePodUID",
    ),
    Feature(
        key="dcgmExporter.hpcJobMapping",
        support="refused",
        what="HPC job mapping of metrics",
        on=lambda p: p.dcgm_exporter.hpc_job_mapping.enabled,
    ),
    Feature(
        key="migManager.gpuClientsConfig",
        support="refused",
        what="host GPU clients stopped around MIG changes",
        note="on when name is set",
        on=lambda p: bool(p.mig_manager.gpu_clients_config.name),
        switch="migManager.gpuClientsConfig.name",
    ),
    Feature(
        key="toolkit.installDir",
        support="refused",
        what="toolkit install directory other than /usr/local/nvidia",
        note="on when it differs",
        on=lambda p: p.toolkit.install_dir != "/usr/local/nvidia",
        switch="toolkit.installDir",
    ),
    Feature(
        key="hostPaths.driverInstallDir",
        support="refused",
        what="driver install directory other than /run/nvidia/driver",
        note="on when it differs",
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
