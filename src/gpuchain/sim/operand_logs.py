"""The container log each operand prints on a simulated node: the evidence the doctor quotes.

Each failure the chain planner derives (`sim.chain`) has the lines the real component prints for
it, quoted from the upstream report or source named beside it; a healthy operand prints its usual
start-up lines. Kept apart from the pod rendering because it is the one part that is upstream text.
"""

from __future__ import annotations

from gpuchain.api.config.v1.selection import ConfigKeyError
from gpuchain.common.labels import DEVICE_PLUGIN_CONFIG
from gpuchain.operator.operands import (
    DRIVER,
    TOOLKIT,
    Operand,
)
from gpuchain.operator.policy import ClusterPolicySpec
from gpuchain.sim import chain
from gpuchain.sim.chain import NodePlan
from gpuchain.sim.scenario import Scenario
from gpuchain.sim.shapes import STAMP


def _config_missing_log(scenario: Scenario, key: str, args: list[str]) -> str:
    """What the plugin pod prints when the node's config label names a key its ConfigMap lacks.

    gpuchain's own plugin exits with its ConfigKeyError naming the mounted ``--config-dir``.
    NVIDIA's plugin pods (GPU Operator, standalone chart, EKS/AKS images) hand the label to the
    config-manager, which exits 1 after these klog lines (NVIDIA/k8s-device-plugin
    cmd/config-manager/main.go at 1b826acc: lines 247, 249, and the error of updateConfigName
    logged at line 209); the report behind the scenarios is nebuly-ai/nos#16, on a fork of it.
    """
    if scenario.stack == "gpuchain":
        directory = args[args.index("--config-dir") + 1] if "--config-dir" in args else "/config"
        err = ConfigKeyError(directory, field=DEVICE_PLUGIN_CONFIG, key=key, available=scenario.device_plugin_configs)
        return f"error: {err}"
    stamp = "0605 18:00:00.000000       1 main.go"  # klog's header at STAMP
    return (
        f"I{stamp}:247] Waiting for change to '{DEVICE_PLUGIN_CONFIG}' label\n"
        f"I{stamp}:249] Label change detected: {DEVICE_PLUGIN_CONFIG}={key}\n"
        f"E{stamp}:209] specified config {key} does not exist"
    )


def operand_log(
    plan: NodePlan, *, operand: Operand, scenario: Scenario, policy: ClusterPolicySpec, args: list[str]
) -> str:
    """The container log the operand would print on this node (the evidence the doctor quotes);
    ``args`` are the operand container's arguments."""
    g = plan.group
    if operand is DRIVER:
        if plan.driver == chain.KERNEL_MISMATCH:
            # The driver container's own lines, as quoted in NVIDIA/gpu-operator#85.
            return (
                "========== NVIDIA Software Installer ==========\n\n"
                f"Starting installation of NVIDIA driver version {policy.driver.version} for Linux kernel version "
                f"{g.kernel}\n\nStopping NVIDIA persistence daemon...\nUnloading NVIDIA driver kernel modules...\n"
                "Unmounting NVIDIA driver rootfs...\nChecking NVIDIA driver packages...\n"
                "Updating the package cache...\n"
                "Resolving Linux kernel version...\nCould not resolve Linux kernel version\n"
                "Stopping NVIDIA persistence daemon...\nUnloading NVIDIA driver kernel modules...\n"
                "Unmounting NVIDIA driver rootfs..."
            )
        if plan.driver == chain.SECURE_BOOT:
            # The driver container's lines on a Secure Boot node, as quoted in NVIDIA/gpu-operator#266.
            return (
                "========== NVIDIA Software Installer ==========\n\n"
                f"Starting installation of NVIDIA driver version {policy.driver.version} for Linux kernel version "
                f"{g.kernel}\n\nBuilding kernel modules\n  : [##############################] 100%\n\n"
                "ERROR: The kernel module failed to load, because it was not signed by a key that is trusted by the "
                "kernel. Please try installing the driver again, and sign the kernel module when prompted to do so.\n\n"
                "ERROR: Unable to load the kernel module 'nvidia.ko'."
            )
        if plan.driver == chain.HOST_CONFLICT:
            # As quoted in NVIDIA/gpu-operator#126.
            return (
                "========== NVIDIA Software Installer ==========\n\n"
                f"Starting installation of NVIDIA driver version {policy.driver.version} for Linux kernel version "
                f"{g.kernel}\n\nStopping NVIDIA persistence daemon...\nUnloading NVIDIA driver kernel modules...\n"
                "Could not unload NVIDIA driver kernel modules, driver is in use"
            )
        # The first and the last lines of NVIDIA's driver container script (NVIDIA/gpu-driver-container
        # ubuntu22.04/nvidia-driver: the installer banner, _load_driver, _mount_rootfs, _load).
        return (
            f"Starting installation of NVIDIA driver version {plan.driver_version} for Linux kernel version "
            f"{g.kernel}\nLoading NVIDIA driver kernel modules...\nStarting NVIDIA persistence daemon...\n"
            "Mounting NVIDIA driver rootfs...\nDone, now waiting for signal"
        )
    if operand is TOOLKIT:
        if plan.toolkit == chain.SOCKET_MISSING:
            # NVIDIA's toolkit on a node whose containerd listens elsewhere (k3s, RKE2), as quoted in
            # NVIDIA/gpu-operator#522 and #406: it writes the config, cannot signal containerd, exits.
            sock = "/runtime/sock-dir/containerd.sock"
            dial = f"unable to dial: dial unix {sock}: connect: no such file or directory"
            return "\n".join(
                [
                    f'time="{STAMP}" level=info msg="Starting \'setup\' for containerd"',
                    *(
                        f'time="{STAMP}" level=warning msg="Error signaling containerd, attempt {i}/6: {dial}"'
                        for i in range(1, 7)
                    ),
                    f'time="{STAMP}" level=warning msg="Max retries reached 6/6, aborting"',
                    f'time="{STAMP}" level=fatal msg="Error: unable to restart containerd: unable to signal '
                    f'containerd: {dial}"',
                    f'time="{STAMP}" level=info msg="Shutting Down"',
                    f'time="{STAMP}" level=error msg="error running nvidia-toolkit: unable to setup runtime: error '
                    'running containerd command: exit status 1"',
                ]
            )
        # NVIDIA's toolkit installer (NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk-installer) logs the
        # same lines whether or not containerd reads the file it wrote: on a node whose containerd
        # reads another config (chain.RUNTIME_MISSING) the log shows nothing wrong; the kubelet's
        # FailedCreatePodSandBox Events do.
        return "\n".join(
            f'time="{STAMP}" level=info msg="{m}"'
            for m in (
                "Flushing config to /runtime/config-dir/config.toml",
                "Sending SIGHUP signal to containerd",
                "Successfully signaled containerd",
                "Completed 'setup' for containerd",
                "Waiting for signal",
            )
        )
    if operand.state == "device-plugin":
        if plan.plugin == chain.CONFIG_MISSING:
            return _config_missing_log(scenario, plan.config_key or "", args)
        if plan.plugin == chain.MIG_INVALID:
            # NVIDIA/k8s-device-plugin cmd/nvidia-device-plugin/main.go and internal/rm/device_map.go.
            return (
                "Starting Plugins.\nLoading configuration.\n"
                "error starting plugins: error building device map: error building device map from "
                "config.resources: invalid MIG configuration: "
                + (
                    "more than one MIG device type present on node"
                    if "more than one" in plan.mig_misfit
                    else "at least one device with migEnabled=true was not configured correctly"
                )
            )
        if plan.plugin == chain.INOTIFY:
            # NVIDIA's plugin when the node's inotify instances are used up (NVIDIA/gpu-operator#441).
            return "Starting FS watcher.\nError: failed to create FS watcher: too many open files"
        if plan.plugin == chain.NO_NVML:
            # As quoted in NVIDIA/k8s-device-plugin#478 (v0.14, failOnInitError false).
            return (
                "Starting Plugins.\nLoading configuration.\nRetreiving plugins.\n"
                "Detected non-NVML platform: could not load NVML library: libnvidia-ml.so.1: cannot open shared "
                "object file: No such file or directory\n"
                "Incompatible platform detected\n"
                "If this is a GPU node, did you configure the NVIDIA Container Toolkit?\n"
                "No devices found. Waiting indefinitely."
            )
        uuids = {d.gpu_index: d.gpu_uuid for r in plan.resources for d in r.devices}
        if scenario.stack == "gke":
            # Google's plugin (GoogleCloudPlatform/container-engine-accelerators, pkg/gpu/nvidia:
            # manager.go, health_check/health_checker.go) names devices by their /dev file and
            # withdraws one only for an XID listed in its xid-config ConfigMap (HealthCriticalXid;
            # 48 by default), which the simulated cluster lists 79 in.
            gke = ["device-plugin registered with the kubelet"]
            gke += [
                f"XidCriticalError: Xid=79 on Device=nvidia{i}, uuid={uuids.get(i, i)}, the device will go unhealthy."
                for i in sorted(plan.lost)
            ]
            return "\n".join(gke)
        lines = [f"Registered device plugin for '{r.name}' with Kubelet" for r in plan.resources]
        for i in sorted(plan.lost):
            # k8s-device-plugin internal/rm/health.go: the device ID is the GPU's UUID.
            lines.append(f"XidCriticalError: Xid=79 on Device={uuids.get(i, i)}; marking device as unhealthy.")
        return "\n".join(lines)
    if operand.state == "dcgm-exporter" and plan.exporter == chain.DOWN:
        # As reported in NVIDIA/dcgm-exporter#636.
        return "Starting dcgm-exporter\nthe libdcgm.so.4 library was not found"
    return ""
