"""Nine failures: two the catalog knew under other words: a runtime binary a containerd config names by its absolute path
and that is not on the node (Go's LookPath wording, not fork/exec's), and NVML refusing the handles of a GPU's MIG
devices (the MIG device walk, not the MIG profile walk); and the driver's GSP firmware timing out or faulting, as the kernel
log a node-problem monitor posts on the Node says; and an OOM-killed exporter, whose limit a raise must exceed
and whose own settings make it need less; and the nvidia runtime left as containerd's default where no GPU stack
runs; and GPUs a device plugin marks unhealthy with no Xid beside pods that lost their device access while running
(one systemd reload); and a plugin DaemonSet beside the device plugin Bottlerocket's NVIDIA variants run themselves;
and nvidia-runtime pods killed on a k3s containerd before k3s-io/k3s#8470; and
GPU pods stuck creating on a MIG node under a 570 driver before 570.172.08. Each is read on its own link, with its repair."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doctor.small_cluster import built, diagnosed, no_gpus, plugin_pod, refused_at_start

from gpuchain.doctor.diagnose import run_doctor
from gpuchain.doctor.model import Finding, Report, Severity
from gpuchain.kube import DAEMONSET, NODE
from gpuchain.sim.build import SimCluster


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def _cites(finding: Finding, entry: str) -> bool:
    return any(e.startswith(f"catalog: {entry} (") for e in finding.evidence)


def _start_error(message: str) -> dict[str, Any]:
    """A container the runtime could not start, as the kubelet shows it (containerd
    internal/cri/server/container_start.go@v2.0.5): CrashLoopBackOff, last terminated StartError, exit 128."""
    return {
        "name": "nvidia-device-plugin-ctr",
        "restarts": 4,
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "StartError", "exitCode": 128, "message": message},
    }


#: golang/go src/os/exec/exec.go@go1.22.0 Error() around lp_unix.go's os.Stat error, as the containerd shim quotes it.
LOOKPATH = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: unable to retrieve OCI "
    "runtime error (open /run/containerd/io.containerd.runtime.v2.task/k8s.io/77aa/log.json: no such file or "
    'directory): exec: "{path}": stat {path}: no such file or directory: unknown'
)


def test_a_runtime_binary_missing_at_its_configured_path_is_the_toolkit_with_its_package_to_install() -> None:
    message = LOOKPATH.format(path="/usr/bin/nvidia-container-runtime")
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: w1, hostDriver: 550.127.05}\n",
        plugin_pod("w1", _start_error(message)),
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("toolkit", "w1")
    assert _cites(root, "nvidia-container-runtime.binary-not-on-node")
    assert "nvidia-container-toolkit-base" in root.fix
    assert "log.unrecognised" not in report.ids


def test_another_binary_missing_at_its_path_is_not_read_as_the_nvidia_runtime() -> None:
    message = LOOKPATH.format(path="/usr/local/bin/crun")
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: w1, hostDriver: 550.127.05}\n",
        plugin_pod("w1", _start_error(message)),
    )
    assert not any(_cites(f, "nvidia-container-runtime.binary-not-on-node") for f in report.findings)


#: The MIG device walk's error, with go-nvlib's index (pkg/nvlib/device/device.go@v0.7.0) and without it (the
#: plugin's own walk before v0.9).
MIG_HANDLE = (
    "error getting MIG device handle at index '0': Insufficient Permissions",
    "error getting MIG device handle: Insufficient Permissions",
)


def test_a_plugin_refused_its_mig_device_handles_is_given_the_mig_monitor_capability() -> None:
    for line in MIG_HANDLE:
        log = f"2024/05/02 10:00:01 Starting OS watcher.\n2024/05/02 10:00:01 Fatal: {line}\n"
        container = {"name": "nvidia-device-plugin-ctr", "restarts": 9, "state": {"waiting": "CrashLoopBackOff"}}
        container["last"] = {"terminated": "Error", "exitCode": 2}
        report = diagnosed(
            "name: t\nstack: nvidia-device-plugin\nnodes:\n"
            "  - {name: dgx, preset: a100-40gb-x8, hostDriver: 550.127.05, mig: {config: all-1g.5gb}}\n",
            plugin_pod("dgx", container, log),
        )
        (root,) = _roots(report)
        assert (root.link, root.node) == ("device-plugin", "dgx")
        assert _cites(root, "go-nvlib.mig-handle-no-permission")
        assert "NVIDIA_MIG_MONITOR_DEVICES=all" in root.fix
        assert "log.unrecognised" not in report.ids


def _kernel_event(node: str, message: str) -> Callable[[SimCluster], None]:
    """An edit: a Warning Event on ``node`` as node-problem-detector's kernel-monitor posts a kernel line."""

    def edit(sim: SimCluster) -> None:
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{node}.kernel", "namespace": "default"},
                "involvedObject": {"kind": "Node", "name": node, "uid": node},
                "reason": "KernelOops",
                "type": "Warning",
                "count": 4,
                "source": {"component": "kernel-monitor", "host": node},
                "message": message,
            }
        )

    return edit


#: NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c@580.65.06, behind the kernel's Xid prefix.
GSP_TIMEOUT = "NVRM: Xid (PCI:0002:00:00): 119, pid=812, name=python3, Timeout waiting for RPC from GSP0! Expected function 76 (GSP_RM_CONTROL) (0x2080014b 0x5)."


def test_gsp_firmware_xids_in_the_kernel_log_are_the_driver_with_a_newer_release_as_the_repair() -> None:
    aks = (
        "name: t\nstack: aks\nnodes:\n  - {name: aks-gpu-0, preset: a100-80gb-x8, hostDriver: 535.54.03, "
        "labels: {kubernetes.azure.com/agentpool: gpu}}\n"
    )
    report = diagnosed(aks, _kernel_event("aks-gpu-0", GSP_TIMEOUT))
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("driver.gsp-xid", "driver", "aks-gpu-0")
    assert "--node-image-only" in root.fix and "NVreg_EnableGpuFirmware=0" in root.fix
    host = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: w1, preset: l4-x2, hostDriver: 535.54.03}\n"
    (root,) = _roots(diagnosed(host, _kernel_event("w1", GSP_TIMEOUT.replace("119", "120"))))
    assert root.id == "driver.gsp-xid" and "driver packages" in root.fix


def test_another_kernel_xid_or_no_event_is_not_read_as_the_gsp_firmware() -> None:
    host = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: w1, preset: l4-x2, hostDriver: 535.54.03}\n"
    page_fault = "NVRM: Xid (PCI:0000:86:00): 31, pid=2468, name=trainer, Ch 00000010, intr 10000000"
    assert "driver.gsp-xid" not in diagnosed(host, _kernel_event("w1", page_fault)).ids
    assert "driver.gsp-xid" not in diagnosed(host).ids


def _exporter_limit(memory: str) -> Callable[[SimCluster], None]:
    """An edit: the operator's dcgm-exporter DaemonSet template limits its container to ``memory``; the pods were
    listed without it."""

    def edit(sim: SimCluster) -> None:
        ds = sim.cluster.get(DAEMONSET, name="nvidia-dcgm-exporter", namespace="gpu-operator")
        spec = ds["spec"]["template"]["spec"]
        for c in spec["containers"]:
            c["resources"] = {"limits": {"memory": memory}}
        sim.cluster.patch(DAEMONSET, name="nvidia-dcgm-exporter", namespace="gpu-operator", patch=ds)

    return edit


def test_an_oom_killed_exporter_gets_more_than_its_template_limit_or_collects_less() -> None:
    operator = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1, preset: a100-40gb-x8}\n"
    running = {"name": "nvidia-dcgm-exporter", "restarts": 6, "ready": True, "state": {"running": True}}
    killed = {"do": "pod", "daemonset": "nvidia-dcgm-exporter", "node": "n1"}
    killed["containers"] = [{**running, "last": {"terminated": "OOMKilled", "exitCode": 137}}]
    (root,) = _roots(diagnosed(operator, _exporter_limit("768Mi"), killed))
    assert (root.link, root.node) == ("exporter", "n1")
    assert '"memory":"1536Mi"' in root.fix and "memory limit 768Mi" in root.evidence
    assert "--collect-interval" in root.fix and "GOMEMLIMIT" in root.fix


#: runc's words for a prestart hook that failed (opencontainers/runc libcontainer/process_linux.go@v1.0.0-rc92),
#: around nvidia-container-cli's initialization error (NVIDIA/libnvidia-container src/cli/main.c@v1.3.0).
HOOK_REFUSED = (
    "failed to create containerd task: OCI runtime create failed: container_linux.go:370: starting container process "
    "caused: process_linux.go:459: container init caused: Running hook #0:: error running hook: exit status 1, "
    "stdout: , stderr: nvidia-container-cli: initialization error: driver error: failed to process request: unknown"
)


def _no_stack(labels: str = "{}") -> str:
    return (
        f"name: t\nstack: none\nnodes:\n  - {{name: box, preset: t4-x4, labels: {labels}}}\n"
        "workloads:\n  - {name: web, namespace: apps, count: 1, gpus: 0, node: box}\n"
    )


def test_pods_without_gpus_refused_by_the_nvidia_hook_where_no_gpu_stack_runs_get_runc_back_as_default() -> None:
    report = diagnosed(_no_stack('{"microk8s.io/cluster": "true"}'), refused_at_start("web", HOOK_REFUSED))
    (left,) = [f for f in _roots(report) if f.node == "box"]
    assert (left.id, left.link) == ("toolkit.default-runtime-left", "toolkit")
    assert 'default_runtime_name = "runc"' in left.fix and "containerd-template.toml" in left.fix
    plain = diagnosed(_no_stack(), refused_at_start("web", HOOK_REFUSED))
    (left,) = [f for f in _roots(plain) if f.node == "box"]
    assert "/etc/containerd/config.toml" in left.fix


def test_a_refusal_without_the_nvidia_hook_is_not_read_as_its_default() -> None:
    other = HOOK_REFUSED.replace("nvidia-container-cli", "oci-seccomp-bpf-hook")
    assert "toolkit.default-runtime-left" not in diagnosed(_no_stack(), refused_at_start("web", other)).ids


#: A GPU Operator cluster with a node that has no GPU (a control-plane or CPU worker) running a pod of its own.
GPU_LESS = (
    "name: t\nstack: gpu-operator\nnodes:\n  - {name: gpu-1, preset: t4-x4}\n  - {name: cpu-1, gpu: false}\n"
    "workloads:\n  - {name: etl, namespace: apps, count: 1, gpus: 0, node: cpu-1}\n"
)


def test_pods_the_nvidia_hook_refuses_on_a_node_without_a_gpu_are_its_default_runtime_whatever_stack_runs() -> None:
    """Project-HAMi/HAMi#715: a control-plane node with nvidia as containerd's default, its pods refused by the hook
    (no driver there), beside a working GPU stack on the GPU nodes."""
    report = diagnosed(GPU_LESS, refused_at_start("etl", HOOK_REFUSED))
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("toolkit.default-runtime-left", "toolkit", "cpu-1")
    assert 'default_runtime_name = "runc"' in root.fix and "no NVIDIA GPU" in root.cause


def test_a_gpu_less_node_whose_refusals_are_not_the_nvidia_hook_s_is_not_its_default_runtime() -> None:
    other = HOOK_REFUSED.replace("nvidia-container-cli", "oci-seccomp-bpf-hook")
    assert "toolkit.default-runtime-left" not in diagnosed(GPU_LESS, refused_at_start("etl", other)).ids
    assert "toolkit.default-runtime-left" not in diagnosed(GPU_LESS).ids


def _plugin_marked(*lines: str) -> dict[str, Any]:
    """An edit: the standalone plugin on w1 logging ``lines`` after it registered (its own start-up wording)."""
    start = "I0719 09:12:03.121336       1 server.go:125] Registered device plugin for 'nvidia.com/gpu' with Kubelet\n"
    return {
        "do": "pod",
        "daemonset": "nvidia-device-plugin-daemonset",
        "node": "w1",
        "logs": {"nvidia-device-plugin-ctr": start + "".join(f"{ln}\n" for ln in lines)},
    }


#: A GPU pod that lost device access while running: the NVML line CUDA containers print (catalog
#: nvml.unknown-error-in-workload).
LOST_ACCESS = {
    "do": "pod",
    "daemonset": "trainer",
    "namespace": "ml",
    "node": "w1",
    "containers": [
        {
            "name": "main",
            "restarts": 2,
            "state": {"waiting": "CrashLoopBackOff"},
            "last": {"terminated": "Error", "exitCode": 1},
        }
    ],
    "logs": {"main": "Failed to initialize NVML: Unknown Error\n"},
}
RELOAD_NODE = (
    "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: w1, preset: a100-40gb-x8, hostDriver: 535.54.03}\n"
    "workloads:\n  - {name: trainer, namespace: ml, count: 2, gpus: 4, node: w1}\n"
)
MARKED = "I0719 11:40:27.553012       1 health.go:159] 'nvidia.com/gpu' device marked unhealthy: GPU-3b1f6c2e"


def test_gpus_marked_unhealthy_without_an_xid_beside_pods_that_lost_device_access_are_the_reload_not_the_gpu() -> None:
    short = {"do": "node", "node": "w1", "allocatable": {"nvidia.com/gpu": "7"}}
    report = diagnosed(RELOAD_NODE, _plugin_marked(MARKED), LOST_ACCESS, short)
    (root,) = _roots(report)
    assert (root.id, root.link) == ("workload.nvml-lost", "toolkit")
    (marked,) = [f for f in report.findings if f.id == "gpu.lost"]
    assert marked.severity is Severity.WARNING and "delete pod nvidia-device-plugin" in marked.fix


def test_an_xid_the_plugin_names_keeps_the_lost_gpu_its_own_finding() -> None:
    short = {"do": "node", "node": "w1", "allocatable": {"nvidia.com/gpu": "7"}}
    xid = "E0719 11:40:27.553012       1 health.go:152] XidCriticalError: Xid=79 on Device=GPU-3b1f6c2e; marking device as unhealthy."
    report = diagnosed(RELOAD_NODE, _plugin_marked(xid), LOST_ACCESS, short)
    assert any(f.id == "gpu.lost" and f.severity is Severity.ERROR for f in report.findings)


def _bottlerocket(variant: str) -> str:
    """An EKS node pool of two GPU nodes on the Bottlerocket ``variant``."""
    nodes = "".join(
        f"  - {{name: br-{i}, preset: l4-x2, osImage: 'Bottlerocket OS 1.37.0 ({variant})', "
        f"labels: {{karpenter.sh/nodepool: gpu-br}}}}\n"
        for i in (1, 2)
    )
    return f"name: t\nstack: eks\nnodes:\n{nodes}"


def _chart_plugin_crashing(node: str) -> dict[str, Any]:
    """The chart's plugin on ``node`` crash-looping with NVML's library missing (its container has no host libraries)."""
    log = (
        "I0514 17:02:11.204503       1 main.go:260] Starting Plugins.\n"
        "E0514 17:02:11.331847       1 main.go:132] error starting plugins: error creating plugin manager: unable to "
        "create plugin manager: nvml init failed: ERROR_LIBRARY_NOT_FOUND\n"
    )
    return plugin_pod(
        node,
        {
            "name": "nvidia-device-plugin-ctr",
            "restarts": 30,
            "state": {"waiting": "CrashLoopBackOff"},
            "last": {"terminated": "Error", "exitCode": 1},
        },
        log,
    )


def test_a_plugin_daemonset_crashing_beside_bottlerocket_s_own_plugin_is_kept_off_those_nodes() -> None:
    report = diagnosed(
        _bottlerocket("aws-k8s-1.31-nvidia"), _chart_plugin_crashing("br-1"), _chart_plugin_crashing("br-2")
    )
    roots = _roots(report)
    assert {(f.id, f.link, f.node) for f in roots} == {
        ("device-plugin.beside-host-plugin", "device-plugin", "br-1"),
        ("device-plugin.beside-host-plugin", "device-plugin", "br-2"),
    }
    # kept off by a NotIn term on a label the Bottlerocket nodes' pool carries (doctor/bottlerocket.py picks it)
    assert '"operator":"NotIn"' in roots[0].fix
    assert "karpenter.sh/nodepool" in roots[0].fix or "eks.amazonaws.com/nodegroup" in roots[0].fix


def test_bottlerocket_without_the_nvidia_variant_or_gpus_announced_is_no_second_plugin() -> None:
    plain = diagnosed(_bottlerocket("aws-k8s-1.31"), _chart_plugin_crashing("br-1"))
    assert "device-plugin.beside-host-plugin" not in plain.ids
    unannounced = diagnosed(_bottlerocket("aws-k8s-1.31-nvidia"), no_gpus("br-1"), _chart_plugin_crashing("br-1"))
    assert not any(f.id == "device-plugin.beside-host-plugin" and f.node == "br-1" for f in unannounced.findings)


def _k3s(containerd: str) -> str:
    return (
        "name: t\nstack: nvidia-device-plugin\nnodes:\n"
        f"  - {{name: agent, preset: l4-x2, hostDriver: 525.89.02, distribution: k3s, containerRuntime: 'containerd://{containerd}'}}\n"
    )


def _killed_under_nvidia(sim: SimCluster) -> None:
    """An edit: the plugin's DaemonSet runs with runtimeClassName nvidia, and its pod's sandbox is killed again and
    again (the kubelet's SandboxChanged Event, exit 137)."""
    ds = sim.cluster.get(DAEMONSET, name="nvidia-device-plugin-daemonset", namespace="kube-system")
    ds["spec"]["template"]["spec"]["runtimeClassName"] = "nvidia"
    sim.cluster.patch(DAEMONSET, name="nvidia-device-plugin-daemonset", namespace="kube-system", patch=ds)


SANDBOX_KILLED = {
    "do": "pod",
    "daemonset": "nvidia-device-plugin-daemonset",
    "node": "agent",
    "containers": [
        {
            "name": "nvidia-device-plugin-ctr",
            "restarts": 12,
            "state": {"waiting": "CrashLoopBackOff"},
            "last": {"terminated": "Error", "exitCode": 137},
        }
    ],
    "events": [
        {"reason": "SandboxChanged", "count": 12, "message": "Pod sandbox changed, it will be killed and re-created."}
    ],
}


def test_nvidia_runtime_pods_killed_on_a_k3s_containerd_before_the_systemd_cgroup_fix_are_the_toolkit() -> None:
    report = diagnosed(_k3s("1.6.15-k3s1"), _killed_under_nvidia, SANDBOX_KILLED)
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("toolkit.runtime-cgroup-driver", "toolkit", "agent")
    assert "SystemdCgroup = true" in root.fix and "config.toml.tmpl" in root.fix and "k3s-io/k3s#8470" in root.fix


def test_a_k3s_containerd_with_the_fix_or_pods_of_another_runtime_are_not_read_as_the_cgroup_driver() -> None:
    fixed = diagnosed(_k3s("1.7.11-k3s2"), _killed_under_nvidia, SANDBOX_KILLED)
    assert "toolkit.runtime-cgroup-driver" not in fixed.ids
    runc = diagnosed(_k3s("1.6.15-k3s1"), SANDBOX_KILLED)
    assert "toolkit.runtime-cgroup-driver" not in runc.ids


def _mig_node(driver: str, mig: str | None = "{config: all-1g.10gb}") -> str:
    layout = f", mig: {mig}" if mig is not None else ""
    return (
        "name: t\nstack: gpu-operator\npolicy: {driver: {enabled: false}}\nnodes:\n"
        f"  - {{name: a100, preset: a100-80gb-x8, hostDriver: '{driver}'{layout}}}\n"
        "workloads:\n  - {name: job, namespace: research, count: 2, resource: nvidia.com/gpu, node: a100}\n"
    )


#: GPU pods the kubelet never finished setting up: scheduled, waiting in ContainerCreating, no Event.
STUCK = {"do": "pod", "daemonset": "job", "namespace": "research", "node": "a100", "phase": "Pending"}
STUCK["containers"] = [{"name": "main", "state": {"waiting": "ContainerCreating"}}]


def test_gpu_pods_stuck_creating_on_a_mig_node_under_a_570_driver_before_the_fix_are_the_driver() -> None:
    (root,) = _roots(diagnosed(_mig_node("570.124.06"), STUCK))
    assert (root.id, root.link, root.node) == ("driver.mig-allocation-hang", "driver", "a100")
    assert "570.172.08" in root.fix and "systemctl restart kubelet" in root.fix


def test_a_fixed_driver_or_no_stuck_pod_is_no_allocation_hang() -> None:
    assert "driver.mig-allocation-hang" not in diagnosed(_mig_node("570.172.08"), STUCK).ids
    assert "driver.mig-allocation-hang" not in diagnosed(_mig_node("570.124.06")).ids


def test_gpus_out_of_mig_mode_under_a_mig_strategy_are_no_allocation_hang() -> None:
    """GFD labels ``nvidia.com/mig.strategy`` (the operator's default is single) and ``mig.capable`` for GPUs in
    either mode; only a MIG layout on the node makes the 570 hang possible (kubernetes-sigs/kubespray#12277's node:
    an A100 under single, MIG off, its GPU pods without a sandbox after the nvidia runtime was dropped)."""
    sim = built(_mig_node("570.124.06", mig=None), STUCK)
    labels = sim.cluster.get(NODE, name="a100")["metadata"]["labels"]
    assert labels["nvidia.com/mig.strategy"] == "single" and "-MIG-" not in labels["nvidia.com/gpu.product"]
    assert "driver.mig-allocation-hang" not in run_doctor(sim.cluster, reader=sim.read_log).ids
