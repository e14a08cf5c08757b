"""Kubernetes objects for a planned cluster (pure): what ``kubectl get`` would show.

The DaemonSets and the RuntimeClass come from the operator's own ``desired()``; each operand pod
is its DaemonSet's template placed on a node, with a status that tells the node's story in the
shapes the kubelet uses (``CrashLoopBackOff`` with the last log lines in
``lastState.terminated.message``, ``Init:0/1`` as a running init container, ``ContainerCreating``
with a ``FailedCreatePodSandBox`` Event). Node status carries the kernel in ``nodeInfo`` and the
device plugin's resources in capacity/allocatable; GFD's labels are on the node.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpuchain.api.config.v1.selection import ConfigKeyError
from gpuchain.common.inputfile import ConfigFileError
from gpuchain.common.labels import (
    DEPLOY_PREFIX,
    DEVICE_PLUGIN_CONFIG,
    GPU_PRESENT,
    MIG_CONFIG,
    MIG_CONFIG_STATE,
    MIG_CONFIG_STATE_REASON,
    PAUSED_FOR_MIG_CHANGE,
)
from gpuchain.kube.objects import Obj, name_of
from gpuchain.operator.operands import (
    DRIVER,
    NFD_GPU_LABELS,
    NODE_AGENT,
    OPERANDS,
    TOOLKIT,
    VALIDATOR,
    Facts,
    Operand,
    agent_operands,
    desired,
    enabled,
    served_by,
)
from gpuchain.operator.policy import ClusterPolicySpec
from gpuchain.operator.status import chain_status, policy_status
from gpuchain.remediation.model import (
    CONDITION_TYPE,
    FAULTS_ANNOTATION,
    PODS_ANNOTATION,
    Fault,
    condition_for,
    encode_faults,
    encode_pods,
)
from gpuchain.sim import chain
from gpuchain.sim.chain import NodePlan
from gpuchain.sim.scenario import Scenario
from gpuchain.sim.stacks import HOST_STACKS, namespace_for, node_extras, policy_api, restyle_daemonset

RUNTIME_ERROR = 'failed to get sandbox runtime: no runtime for "nvidia" is configured'
STAMP = "2026-06-05T18:00:00Z"

LogKey = tuple[str, str, str]  #: (namespace, pod, container)


@dataclass
class Rendered:
    """Everything the simulated API server holds: objects, and container logs (which ``build`` hands to
    ``MemoryCluster.set_logs``, so the doctor reads them through the port as on a live cluster)."""

    objects: list[Obj] = field(default_factory=list)
    logs: dict[LogKey, str] = field(default_factory=dict)
    placements: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    """(namespace, pod) -> (node, device ids) of every workload pod that got devices."""


#: The alphabet of generateName suffixes (k8s.io/apimachinery/pkg/util/rand: no vowels, no 0/1/3).
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"


def pod_name(ds_name: str, node: str, attempt: int = 0) -> str:
    """A stable pod name like the DaemonSet controller's (name + 5 generateName characters); a
    later ``attempt`` gives another suffix, as the API server's retry on a taken name does."""
    n = int.from_bytes(hashlib.sha1(f"{node}/{attempt}".encode()).digest()[:8], "big")
    suffix = ""
    for _ in range(5):
        n, i = divmod(n, len(_SUFFIX))
        suffix += _SUFFIX[i]
    return f"{ds_name}-{suffix}"


def unique_pod_name(ds_name: str, node: str, taken: set[str]) -> str:
    """``pod_name``, drawn again while the name is ``taken`` (then recorded there): a cluster of
    thousands of nodes has colliding 5-character suffixes (27^5 names: a collision is more likely
    than not among 5,000 pods of one DaemonSet), which the real controller meets as AlreadyExists
    and retries with a fresh random suffix. The same nodes in the same order always get the same names."""
    attempt = 0
    name = pod_name(ds_name, node)
    while name in taken:
        attempt += 1
        name = pod_name(ds_name, node, attempt)
    taken.add(name)
    return name


def _running(name: str, ready: bool = True, restarts: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "ready": ready,
        "started": True,
        "restartCount": restarts,
        "state": {"running": {"startedAt": STAMP}},
    }


def _done(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "ready": True,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": STAMP}},
    }


def _waiting(name: str, reason: str, message: str = "") -> dict[str, Any]:
    waiting = {"reason": reason, **({"message": message} if message else {})}
    return {"name": name, "ready": False, "restartCount": 0, "state": {"waiting": waiting}}


def _crashloop(name: str, log: str, restarts: int = 37) -> dict[str, Any]:
    return {
        "name": name,
        "ready": False,
        "restartCount": restarts,
        "state": {
            "waiting": {"reason": "CrashLoopBackOff", "message": f"back-off 5m0s restarting failed container={name}"}
        },
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": log, "finishedAt": STAMP}},
    }


def _status(phase: str, inits: list[dict[str, Any]], mains: list[dict[str, Any]], node_ip: str) -> dict[str, Any]:
    ready = phase == "Running" and all(c["ready"] for c in mains)
    st: dict[str, Any] = {
        "phase": phase,
        "hostIP": node_ip,
        "conditions": [
            {"type": "Initialized", "status": "True" if all(c["ready"] for c in inits) else "False"},
            {"type": "Ready", "status": "True" if ready else "False"},
            {"type": "PodScheduled", "status": "True"},
        ],
        "containerStatuses": mains,
    }
    if inits:
        st["initContainerStatuses"] = inits
    return st


def _init_waits(done: int, inits: list[str], mains: list[str], ip: str) -> dict[str, Any]:
    """Init:<done>/N: the first ``done`` init containers finished, the next one waits (for a ready
    file that never comes), the rest and the main containers have not started."""
    return _status(
        "Pending",
        [
            *(_done(n) for n in inits[:done]),
            _running(inits[done], ready=False),
            *(_waiting(n, "PodInitializing") for n in inits[done + 1 :]),
        ],
        [_waiting(n, "PodInitializing") for n in mains],
        ip,
    )


def _no_sandbox(inits: list[str], mains: list[str], ip: str) -> dict[str, Any]:
    """A pod of the nvidia RuntimeClass on a node whose runtime lacks that handler: no sandbox, so
    ContainerCreating (the kubelet's FailedCreatePodSandBox Event says why)."""
    return _status(
        "Pending",
        [_waiting(n, "PodInitializing") for n in inits],
        [_waiting(n, "ContainerCreating") for n in mains],
        ip,
    )


def _unschedulable(message: str) -> dict[str, Any]:
    """A pod's status as kube-scheduler leaves one it places on no node: Pending, PodScheduled False
    (Unschedulable) with its "0/N nodes are available: ..." message."""
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    return {"phase": "Pending", "conditions": [condition]}


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
        err = ConfigKeyError(directory, DEVICE_PLUGIN_CONFIG, key, scenario.device_plugin_configs)
        return f"error: {err}"
    stamp = "0605 18:00:00.000000       1 main.go"  # klog's header at STAMP
    return (
        f"I{stamp}:247] Waiting for change to '{DEVICE_PLUGIN_CONFIG}' label\n"
        f"I{stamp}:249] Label change detected: {DEVICE_PLUGIN_CONFIG}={key}\n"
        f"E{stamp}:209] specified config {key} does not exist"
    )


def _logs_for(plan: NodePlan, operand: Operand, scenario: Scenario, policy: ClusterPolicySpec, args: list[str]) -> str:
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


def _operand_pod(ds: Obj, plan: NodePlan, operand: Operand, log: str, name: str) -> Obj:
    """The DaemonSet's pod ``name`` on this node, with the status the node's story implies."""
    spec = _placed_spec(ds, plan)
    inits = [c["name"] for c in spec.get("initContainers", [])]
    mains = [c["name"] for c in spec["containers"]]
    state = plan.state_of(operand)
    ip = "10.0.0.1"
    needs_runtime = spec.get("runtimeClassName") is not None
    if state == chain.BLOCKED or (operand is VALIDATOR and plan.driver not in (chain.OK, chain.HOST)):
        # Init:0/N - the first init container waits for a ready file that never comes.
        status = _init_waits(0, inits, mains, ip)
    elif operand is VALIDATOR and plan.toolkit in (chain.SOCKET_MISSING, chain.IMAGE_MISSING):
        # driver validated; toolkit-validation waits for the toolkit's ready file.
        status = _init_waits(1, inits, mains, ip)
    elif needs_runtime and plan.toolkit == chain.RUNTIME_MISSING:
        status = _no_sandbox(inits, mains, ip)
    elif state == chain.IMAGE_MISSING:
        # The kubelet cannot pull the image (containerd answers NotFound): ImagePullBackOff.
        pulling = _waiting(mains[0], "ImagePullBackOff", f'Back-off pulling image "{spec["containers"][0]["image"]}"')
        status = _status("Pending", [_done(n) for n in inits], [pulling], ip)
    elif state in chain.CRASHING:
        status = _status("Running", [_done(n) for n in inits], [_crashloop(mains[0], log)], ip)
    elif operand is VALIDATOR and plan.plugin != chain.OK:
        # driver, toolkit and cuda validated; plugin-validation polls node capacity forever.
        status = _status(
            "Pending",
            [*(_done(n) for n in inits[:-1]), _running(inits[-1], ready=False)],
            [_waiting(n, "PodInitializing") for n in mains],
            ip,
        )
    else:
        status = _status("Running", [_done(n) for n in inits], [_running(n) for n in mains], ip)
    return _pod_object(ds, name, spec, status)


def _placed_spec(ds: Obj, plan: NodePlan) -> dict[str, Any]:
    """The DaemonSet's pod spec placed on the plan's node."""
    # A shallow copy: pods share the template's containers (MemoryCluster copies what it stores).
    spec = {k: v for k, v in ds["spec"]["template"]["spec"].items() if k != "affinity"}
    spec["nodeName"] = plan.name
    return spec


def _pod_object(ds: Obj, name: str, spec: dict[str, Any], status: dict[str, Any]) -> Obj:
    """Pod ``name`` of the DaemonSet, with its spec and status."""
    labels = dict(ds["spec"]["template"]["metadata"]["labels"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ds["metadata"]["namespace"],
            "labels": labels,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name_of(ds), "uid": "", "controller": True}
            ],
        },
        "spec": spec,
        "status": status,
    }


def _agent_pod(ds: Obj, plan: NodePlan, roles: list[Operand], name: str, source: str) -> Obj:
    """The node agent's pod on this node, serving ``roles``: its init containers validate driver,
    toolkit and CUDA (``driver-validation`` waits while the node has no working driver,
    ``toolkit-validation`` while the toolkit has not configured the runtime), it cannot start
    without the NVIDIA runtime handler, and otherwise its one container runs every role.

    A role that fails alone is restarted by the agent's supervisor while the others serve
    (`gpuchain.agent.supervisor`); the simulator does not model that, and refuses a node that
    would need it rather than render it as something it is not."""
    failing = [
        op.state for op in roles if plan.state_of(op) in chain.CRASHING or plan.state_of(op) == chain.IMAGE_MISSING
    ]
    if failing:
        why = f"node {plan.name}: the node agent layout does not simulate a role failing alone ({', '.join(failing)})"
        raise ConfigFileError(source, None, "policy.nodeAgent", why)
    spec = _placed_spec(ds, plan)
    inits = [c["name"] for c in spec.get("initContainers", [])]
    mains = [c["name"] for c in spec["containers"]]
    ip = "10.0.0.1"
    if inits and plan.driver not in (chain.OK, chain.HOST):
        status = _init_waits(0, inits, mains, ip)
    elif inits and plan.toolkit in (chain.SOCKET_MISSING, chain.IMAGE_MISSING):
        status = _init_waits(1, inits, mains, ip)
    elif spec.get("runtimeClassName") and plan.toolkit == chain.RUNTIME_MISSING:
        status = _no_sandbox(inits, mains, ip)
    else:
        status = _status("Running", [_done(n) for n in inits], [_running(n) for n in mains], ip)
    return _pod_object(ds, name, spec, status)


def _node_labels(plan: NodePlan) -> dict[str, str]:
    g = plan.group
    labels = {"kubernetes.io/hostname": plan.name, "kubernetes.io/os": "linux", **g.labels}
    if not plan.gpu:
        return labels
    if g.nfd:
        labels[NFD_GPU_LABELS[0]] = "true"
        labels[GPU_PRESENT] = "true"
    labels.update(plan.labels)
    for suffix in sorted(plan.opted_out):
        labels[DEPLOY_PREFIX + suffix] = "false"
    for suffix in sorted(plan.paused):
        labels[DEPLOY_PREFIX + suffix] = PAUSED_FOR_MIG_CHANGE
    if g.device_plugin_config:
        labels[DEVICE_PLUGIN_CONFIG] = g.device_plugin_config
    if g.mig is not None:
        labels[MIG_CONFIG] = g.mig.config
        labels[MIG_CONFIG_STATE] = g.mig.state.value
    return labels


def node_object(plan: NodePlan, stack: str = "gpuchain") -> Obj:
    """The Node: labels, kernel and runtime in nodeInfo, GPU resources in capacity/allocatable."""
    g = plan.group
    base = {"cpu": "96", "memory": "2113373748Ki", "pods": "110", "ephemeral-storage": "3750000000Ki"}
    capacity = {**base, **{k: str(v) for k, v in plan.capacity.items()}}
    allocatable = {**base, **{k: str(v) for k, v in plan.allocatable.items()}}
    labels = _node_labels(plan)
    spec: dict[str, Any] = {}
    if plan.gpu:
        extra, provider, taints = node_extras(stack, plan.name)
        if stack in ("eks", "aks", "gke"):
            # Managed node images run no NFD: no PCI feature labels, no nvidia.com/gpu.present.
            labels = {k: v for k, v in labels.items() if k not in (NFD_GPU_LABELS[0], GPU_PRESENT)}
        labels.update(extra)
        if provider:
            spec["providerID"] = provider
        taints = [*taints, *(dict(t) for t in g.taints)]
        if taints:
            spec["taints"] = taints
    conditions, problem_taints = node_conditions(g.node_problems)
    if problem_taints:
        spec["taints"] = [*spec.get("taints", []), *problem_taints]
    meta: dict[str, Any] = {"name": plan.name, "labels": labels}
    if g.mig is not None and g.mig.reason:
        meta["annotations"] = {MIG_CONFIG_STATE_REASON: g.mig.reason}
    runtime, kubelet = NODE_VERSIONS[g.distribution]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": conditions,
            "nodeInfo": {
                "kernelVersion": g.kernel,
                "osImage": g.os_image,
                "containerRuntimeVersion": g.container_runtime or runtime,
                "kubeletVersion": kubelet,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


#: (containerRuntimeVersion, kubeletVersion) each distribution reports: k3s and RKE2 ship their
#: own containerd build and mark both versions (``+k3s1``, ``+rke2r1``).
NODE_VERSIONS = {
    "kubeadm": ("containerd://1.7.13", "v1.36.0"),
    "k3s": ("containerd://1.7.20-k3s1", "v1.36.0+k3s1"),
    "rke2": ("containerd://1.7.20-k3s1", "v1.36.0+rke2r1"),
}
#: What the kubelet writes for each problem (kubernetes/kubernetes pkg/kubelet/nodestatus/setters.go;
#: the node lifecycle controller's NodeStatusUnknown; the cloud route controller's NoRouteCreated),
#: and the taint TaintNodesByCondition adds for it (k8s.io/api/core/v1 well_known_taints.go).
PROBLEM_CONDITIONS: dict[str, tuple[dict[str, str], list[dict[str, str]]]] = {
    "kubelet-stopped": (
        {
            "type": "Ready",
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
        },
        [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
        ],
    ),
    "memory-pressure": (
        {
            "type": "MemoryPressure",
            "status": "True",
            "reason": "KubeletHasInsufficientMemory",
            "message": "kubelet has insufficient memory available",
        },
        [{"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}],
    ),
    "disk-pressure": (
        {
            "type": "DiskPressure",
            "status": "True",
            "reason": "KubeletHasDiskPressure",
            "message": "kubelet has disk pressure",
        },
        [{"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}],
    ),
    "pid-pressure": (
        {
            "type": "PIDPressure",
            "status": "True",
            "reason": "KubeletHasInsufficientPID",
            "message": "kubelet has insufficient PID available",
        },
        [{"key": "node.kubernetes.io/pid-pressure", "effect": "NoSchedule"}],
    ),
    "network-unavailable": (
        {
            "type": "NetworkUnavailable",
            "status": "True",
            "reason": "NoRouteCreated",
            "message": "RouteController failed to create a route",
        },
        [{"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}],
    ),
}


def node_conditions(problems: Iterable[str]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The node's conditions (Ready first) and the taints its problems add."""
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
    conditions = [ready]
    taints: list[dict[str, str]] = []
    for problem in problems:
        condition, added = PROBLEM_CONDITIONS[problem]
        if condition["type"] == "Ready":
            conditions[0] = dict(condition)
        else:
            conditions.append(dict(condition))
        taints += [dict(t) for t in added]
    return conditions, taints


def _event(namespace: str, involved: Obj, reason: str, message: str, component: str, n: int) -> Obj:
    meta = involved["metadata"]
    ref = {"apiVersion": involved["apiVersion"], "kind": involved["kind"], "name": meta["name"]}
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{n:016x}", "namespace": namespace},
        "involvedObject": ref,
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": component},
        "firstTimestamp": STAMP,
        "lastTimestamp": STAMP,
        "count": 12,
    }


def _sandbox_event(namespace: str, pod: Obj, n: int) -> Obj:
    """The kubelet's Event for a pod of the nvidia RuntimeClass whose runtime lacks the handler."""
    message = f"Failed to create pod sandbox: rpc error: code = Unknown desc = {RUNTIME_ERROR}"
    return _event(namespace, pod, "FailedCreatePodSandBox", message, "kubelet", n)


def _ds_status(pods: list[Obj]) -> dict[str, Any]:
    n = len(pods)
    ready = sum(any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"]) for p in pods)
    return {
        "observedGeneration": 1,
        "desiredNumberScheduled": n,
        "currentNumberScheduled": n,
        "updatedNumberScheduled": n,
        "numberReady": ready,
        "numberAvailable": ready,
        "numberUnavailable": n - ready,
        "numberMisscheduled": 0,
    }


def _workload_pod(namespace: str, name: str, resource: str, gpus: int, visible: str | None = None) -> Obj:
    container: dict[str, Any] = {"name": "main", "image": "nvcr.io/nvidia/cuda:12.6.0-base-ubuntu22.04"}
    if gpus:
        container["resources"] = {"limits": {resource: str(gpus)}}
    if visible is not None:
        container["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": visible}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name.rsplit("-", 1)[0]}},
        "spec": {
            "restartPolicy": "Always",
            "containers": [container],
        },
    }


def _place_workloads(scenario: Scenario, plans: list[NodePlan], out: Rendered) -> list[Obj]:
    """First-fit scheduling on capacity as it was before any GPU fell off the bus."""
    # A node whose kubelet dropped the plugin offers nothing; one under a problem taint takes no new pod.
    free: dict[str, dict[str, list[str]]] = {
        p.name: {r.name: [d.id for d in r.devices] for r in p.resources}
        if p.registered and not p.group.node_problems
        else {}
        for p in plans
    }
    tainted = {
        p.name: PROBLEM_CONDITIONS[p.group.node_problems[0]][1][0]["key"] for p in plans if p.group.node_problems
    }
    gpu_of = {p.name: {d.id: d.gpu_index for r in p.resources for d in r.devices} for p in plans}
    lost = {p.name: p.lost for p in plans}
    rules_lost = {p.name for p in plans if p.group.lost_device_rules}
    stale = {p.name for p in plans if p.group.stale_allocations}
    pods: list[Obj] = []
    for w in scenario.workloads:
        for i in range(w.count):
            name = f"{w.name}-{i}" if w.count > 1 else w.name
            pod = _workload_pod(w.namespace, name, w.resource, w.gpus, w.visible_devices)
            if w.gpus == 0:
                where = w.node or next((p.name for p in plans if p.gpu), plans[0].name)
                pod["spec"]["nodeName"] = where
                pod["status"] = _status("Running", [], [_running("main")], "10.0.0.1")
                pods.append(pod)
                continue
            candidates = [w.node] if w.node else [p.name for p in plans]
            node = next((n for n in candidates if len(free[n].get(w.resource, [])) >= w.gpus), None)
            if node is None:
                # The scheduler's message: untolerated taints first, then the resource (k8s scheduler's
                # "0/N nodes are available: ..." with its reasons counted).
                reasons = Counter(
                    f"node(s) had untolerated taint {{{tainted[p.name]}: }}"
                    if p.name in tainted
                    else f"Insufficient {w.resource}"
                    for p in plans
                    if p.name in tainted or len(free[p.name].get(w.resource, [])) < w.gpus
                )
                detail = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items()))
                pod["status"] = _unschedulable(f"0/{len(plans)} nodes are available: {detail}.")
            elif node in stale:
                # The scheduler placed it; the kubelet's admission refuses it (kubernetes/kubernetes#130145).
                pod["spec"]["nodeName"] = node
                message = (
                    f"Allocate failed due to requested number of devices unavailable for {w.resource}. "
                    f"Requested: {w.gpus}, Available: 0, which is unexpected"
                )
                pod["status"] = {"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": f"Pod {message}"}
                event = _event(w.namespace, pod, "UnexpectedAdmissionError", message, "kubelet", len(out.objects) + i)
                event["source"]["host"] = node
                out.objects.append(event)
            else:
                ids = tuple(free[node][w.resource][: w.gpus])
                del free[node][w.resource][: w.gpus]
                pod["spec"]["nodeName"] = node
                hung = any(gpu_of[node][d] in lost[node] for d in ids)
                detached = node in rules_lost
                pod["status"] = _status(
                    "Running",
                    [],
                    [_running("main", ready=not (hung or detached), restarts=3 if detached else 0)],
                    "10.0.0.1",
                )
                if detached:
                    # What the CUDA image's nvidia-smi prints once the device rules are gone
                    # (NVIDIA/nvidia-container-toolkit#48, NVIDIA/gpu-operator#485).
                    out.logs[(w.namespace, name, "main")] = "Failed to initialize NVML: Unknown Error"
                out.placements[(w.namespace, name)] = (node, ids)
            pods.append(pod)
    return pods


def render(scenario: Scenario, plans: list[NodePlan], policy: ClusterPolicySpec) -> Rendered:
    """Every object of the simulated cluster, and the operand containers' logs."""
    out = Rendered()
    stack = scenario.stack
    ns = namespace_for(stack, scenario.namespace)
    facts = Facts(ns, scenario.policy_name)
    # No stack installed, or its operator never ran: the GPU nodes and the workloads, nothing the operator makes.
    wanted = desired(policy, facts) if stack != "none" and not scenario.operator_pending else []
    if stack != "none":
        out.objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    others = [o for o in wanted if o["kind"] != "DaemonSet"]
    if stack in HOST_STACKS:
        others = [o for o in others if o["kind"] not in ("RuntimeClass", "ServiceAccount")]
    out.objects += others
    if policy.device_plugin.config.name and scenario.device_plugin_configs:
        out.objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": policy.device_plugin.config.name, "namespace": ns},
                "data": {k: yaml.safe_dump(v, sort_keys=False) for k, v in scenario.device_plugin_configs.items()},
            }
        )
    nodes = [node_object(p, stack) for p in plans]
    out.objects += nodes
    events: list[Obj] = []
    if scenario.operator_node_selector:
        out.objects.append(_operator_pod(ns, scenario, len(nodes), events))
    by_operand: dict[str, list[Obj]] = {}
    by_name = {o.name: o for o in OPERANDS}
    # Every node of a scenario runs the same images (they come from the policy), so the first plan says.
    images = plans[0].images if plans else {}
    daemonsets = {
        name_of(d): restyle_daemonset(stack, by_name[name_of(d)].state, d, images.get(by_name[name_of(d)].state, ""))
        for d in wanted
        if d["kind"] == "DaemonSet" and name_of(d) != NODE_AGENT.name
    }
    agent_ds = next((d for d in wanted if d["kind"] == "DaemonSet" and name_of(d) == NODE_AGENT.name), None)
    if scenario.policy_deleted:
        # kubectl delete --cascade=orphan: the DaemonSets lose their owner and keep running.
        for d in daemonsets.values():
            d["metadata"].pop("ownerReferences", None)
    taken: set[str] = set()
    for op in OPERANDS:
        ds = daemonsets.get(op.name)
        if ds is None:
            continue
        pods = []
        for plan in plans:
            if not plan.deployed(op):
                continue
            log = _logs_for(plan, op, scenario, policy, ds["spec"]["template"]["spec"]["containers"][0].get("args", []))
            name = unique_pod_name(name_of(ds), plan.name, taken)
            pod = _operand_pod(ds, plan, op, log, name)
            pods.append(pod)
            container = pod["spec"]["containers"][0]["name"]
            if log:
                out.logs[(ns, name_of(pod), container)] = log
            if plan.state_of(op) == chain.IMAGE_MISSING:
                ref = pod["spec"]["containers"][0]["image"]
                # containerd's answer for a tag the registry does not have, as the kubelet's Event shows it.
                events.append(
                    _event(
                        ns,
                        pod,
                        "Failed",
                        f'Failed to pull image "{ref}": rpc error: code = NotFound desc = failed to pull and unpack '
                        f'image "{ref}": failed to resolve reference "{ref}": {ref}: not found',
                        "kubelet",
                        len(events),
                    )
                )
            if pod["spec"].get("runtimeClassName") and plan.toolkit == chain.RUNTIME_MISSING:
                events.append(_sandbox_event(ns, pod, len(events)))
        ds = {**ds, "status": _ds_status(pods)}
        daemonsets[op.name] = ds
        by_operand[op.name] = pods
        out.objects.append(ds)
        out.objects += pods
    if agent_ds is not None:
        roles = agent_operands(policy)
        pods = []
        for plan in plans:
            if not any(plan.deployed(op) for op in roles):
                continue
            agent_pod_name = unique_pod_name(NODE_AGENT.name, plan.name, taken)
            pod = _agent_pod(agent_ds, plan, roles, agent_pod_name, scenario.name)
            pods.append(pod)
            if pod["spec"].get("runtimeClassName") and plan.toolkit == chain.RUNTIME_MISSING:
                events.append(_sandbox_event(ns, pod, len(events)))
        daemonsets[NODE_AGENT.name] = {**agent_ds, "status": _ds_status(pods)}
        by_operand[NODE_AGENT.name] = pods
        out.objects.append(daemonsets[NODE_AGENT.name])
        out.objects += pods
    workloads = _place_workloads(scenario, plans, out)
    out.objects += workloads
    node_by_name = {name_of(n): n for n in nodes}
    if stack == "gpuchain":
        # gpuchain's gpu-health publishes GPUHealthy and the faults on the Node; other stacks do not.
        for plan in plans:
            if plan.gpu and plan.plugin == chain.OK:
                _publish_health(node_by_name[plan.name], plan, out.placements)
    if stack == "gke":
        # Google's health checker records each XID on the Node (recordXIDEvent in
        # health_check/health_checker.go); NVIDIA's plugin and gpuchain's stack write no such Event.
        for plan in plans:
            if plan.gpu and plan.lost:
                event = _event(
                    "default",
                    node_by_name[plan.name],
                    "XIDError",
                    "Caught XID error, XID=79",
                    "nvidia-gpu-device-plugin",
                    len(events),
                )
                events.append(event)
    out.objects += events
    api = policy_api(stack)
    if api is not None and not scenario.policy_deleted:
        pods = [p for ps in by_operand.values() for p in ps]
        obj = {**_policy_object(scenario, policy, daemonsets, pods, plans), "apiVersion": api}
        if api != "gpuchain.io/v1":
            obj["spec"] = _without_empty(obj["spec"])
            obj["status"] = _nvidia_policy_status(policy, daemonsets, pods, plans, ns)
        if scenario.operator_pending:
            del obj["status"]  # the chart created the policy; no operator ever wrote its status
        out.objects.append(obj)
    return out


#: The GPU Operator's Deployment pod (chart nvidia/gpu-operator, Deployment gpu-operator) and its image.
OPERATOR_POD = "gpu-operator-7d6d75f67c-jsrbx"
OPERATOR_IMAGE = "nvcr.io/nvidia/gpu-operator:v24.9.0"


def _operator_pod(namespace: str, scenario: Scenario, nodes: int, events: list[Obj]) -> Obj:
    """The GPU Operator's pod with the scenario's nodeSelector: Running on the first node that has the
    labels, else Pending as kube-scheduler reports a nodeSelector no node matches (its PodScheduled
    condition and a FailedScheduling Event, in the words of NVIDIA/gpu-operator#371)."""
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": OPERATOR_POD,
            "namespace": namespace,
            # No ownerReferences: the simulator renders no Deployment or ReplicaSet for them to name.
            "labels": {"app": "gpu-operator", "app.kubernetes.io/component": "gpu-operator"},
        },
        "spec": {
            "containers": [{"name": "gpu-operator", "image": OPERATOR_IMAGE}],
            "nodeSelector": dict(scenario.operator_node_selector),
            "tolerations": [
                {"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "effect": "NoSchedule"}
            ],
        },
    }
    if scenario.operator_node is not None:
        pod["spec"]["nodeName"] = scenario.operator_node
        pod["status"] = _status("Running", [], [_running("gpu-operator")], "10.0.0.2")
        return pod
    said = (
        f"0/{nodes} nodes are available: {nodes} node(s) didn't match Pod's node affinity/selector. "
        f"preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling."
    )
    pod["status"] = _unschedulable(said)
    events.append(_event(namespace, pod, "FailedScheduling", said, "default-scheduler", len(events)))
    return pod


#: NVIDIA's operand states in the order its operator steps through them (the assets/ directory
#: names of NVIDIA/gpu-operator), by gpuchain operand state.
_NVIDIA_STATES = {
    "driver": "state-driver",
    "container-toolkit": "state-container-toolkit",
    "operator-validation": "state-operator-validation",
    "device-plugin": "state-device-plugin",
    "dcgm-exporter": "state-dcgm-exporter",
    "gpu-feature-discovery": "gpu-feature-discovery",
    "mig-manager": "state-mig-manager",
}


def _nvidia_policy_status(
    policy: ClusterPolicySpec, daemonsets: dict[str, Obj], pods: list[Obj], plans: list[NodePlan], namespace: str
) -> dict[str, Any]:
    """The status NVIDIA's operator writes on its ClusterPolicy: only ``state``, ``namespace`` and
    the Ready/Error conditions (api/nvidia/v1 ClusterPolicyStatus), with the reasons and messages
    of controllers/clusterpolicy_controller.go: operand states not ready first, then no NFD label
    on any node, then no GPU node, else reconciled."""
    operands = chain_status({op.state: enabled(policy, op) for op in OPERANDS}, daemonsets, pods)
    not_ready = [_NVIDIA_STATES[s] for s in _NVIDIA_STATES if operands[s].state == "notReady"]
    labelled = [p for p in plans if p.gpu and p.group.nfd]
    if not_ready:
        message = f"ClusterPolicy is not ready; states not ready: [{' '.join(not_ready)}]"
        conditions = [("Ready", "False", "Error", ""), ("Error", "True", "OperandNotReady", message)]
    elif not labelled:
        conditions = [("Ready", "True", "NFDLabelsMissing", "No NFD labels found"), ("Error", "False", "Ready", "")]
    else:
        message = "ClusterPolicy is ready as all resources have been successfully reconciled"
        conditions = [("Ready", "True", "Reconciled", message), ("Error", "False", "Ready", "")]
    return {
        "state": "notReady" if not_ready else "ready",
        "namespace": namespace,
        "conditions": [
            {"type": t, "status": st, "reason": r, "message": m, "lastTransitionTime": STAMP}
            for t, st, r, m in conditions
        ],
    }


def _without_empty(value: Any) -> Any:
    """NVIDIA's ClusterPolicy CRD refuses an empty image name where gpuchain's model keeps "" for
    "the operator's default"; NVIDIA's chart leaves such keys out, so the simulated policy does too."""
    if isinstance(value, dict):
        return {k: _without_empty(v) for k, v in value.items() if v != ""}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


def _publish_health(node: Obj, plan: NodePlan, placements: dict[tuple[str, str], tuple[str, tuple[str, ...]]]) -> None:
    """What ``gpuchain gpu-health`` publishes on the Node: GPUHealthy, the faults and who holds each GPU."""
    devices = {d.id: d for r in plan.resources for d in r.devices}
    faults: dict[str, Fault] = {}
    for d in devices.values():
        if d.gpu_index in plan.lost and d.gpu_uuid not in faults:
            faults[d.gpu_uuid] = Fault(d.gpu_uuid, d.gpu_uuid, (79,), lost=True, covers=(d.gpu_uuid,))
    holders: dict[str, list[str]] = {}
    for (ns, pod), (where, ids) in sorted(placements.items()):
        if where == plan.name:
            for i in ids:
                holders.setdefault(devices[i].unit_uuid, []).append(f"{ns}/{pod}/main")
    status, reason, message = condition_for(faults)
    node["status"]["conditions"].append(
        {"type": CONDITION_TYPE, "status": status, "reason": reason, "message": message, "lastTransitionTime": STAMP}
    )
    annotations = node["metadata"].setdefault("annotations", {})
    annotations[FAULTS_ANNOTATION] = encode_faults(faults)
    annotations[PODS_ANNOTATION] = encode_pods({k: tuple(v) for k, v in holders.items()})


def _policy_object(
    scenario: Scenario,
    policy: ClusterPolicySpec,
    daemonsets: dict[str, Obj],
    pods: Iterable[Obj],
    plans: list[NodePlan],
) -> Obj:
    """The ClusterPolicy with the status the operator's own status functions compute."""
    switched = {op.state: enabled(policy, op) for op in OPERANDS}
    operands = chain_status(switched, daemonsets, list(pods), served_by(policy))
    status, conditions = policy_status(operands, sum(p.gpu for p in plans), True, scenario.namespace, 1)
    spec = policy.model_dump(mode="json", by_alias=True)
    return {
        "apiVersion": "gpuchain.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": scenario.policy_name},
        "spec": spec,
        "status": {**status, "conditions": [{**c, "lastTransitionTime": STAMP} for c in conditions]},
    }
