"""Failure classes read from the components' own words and the node's state, each with its repair:

- the kubelet refusing to start over a checkpoint it cannot restore names the file and the repair (drain, delete
  it, restart): kubernetes pkg/kubelet/cm/cpumanager/state/state_checkpoint.go@v1.34.4 and the same words of the
  pod allocation and memory managers; a NotReady node whose Events carry them gets that repair, not a restart;
- a GPU pod without its driver beside a device plugin that asks for no RuntimeClass and registered: the node's
  default runtime injects the driver, so the kubelet admitted the pod without the plugin's allocation
  (pkg/kubelet/cm/devicemanager/manager.go@v1.34.4): deleting the pod is the repair, not a RuntimeClass;
- a NotReady node that still lists its GPUs says which resource names it offers, so Pending pods asking for a name
  no node offers are named (renameByDefault belongs under sharing.timeSlicing: NVIDIA/k8s-device-plugin
  api/config/v1/config.go@v0.17.1) beside the node's own finding;
- a node GCE's bring-up labelled with accelerators had its DevicePlugins gate turned on by that bring-up
  (kubernetes cluster/gce/config-default.sh@v1.9.0), so a 1.9 kubelet there is no gate finding.

Each fixture is written here from those sources' wording (the node names, paths and counts are made up).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from doctor.small_cluster import diagnosed, plugin_pod

from gpuchain.doctor.kubelet_state import CHECKPOINT
from gpuchain.doctor.model import Finding, Report
from gpuchain.kube import POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim.build import SimCluster

#: The CPU manager's refusal as kubernetes pkg/kubelet/cm/cpumanager/state/state_checkpoint.go@v1.34.4 writes it
#: (format verbs filled), after a policy change; the file is the kubelet's default root's.
CPU_MANAGER = (
    'could not restore state from checkpoint: configured policy "static" differs from state checkpoint policy '
    '"none", please drain this node and delete the CPU manager checkpoint file "/var/lib/kubelet/cpu_manager_state" '
    "before restarting Kubelet"
)
#: The pod allocation manager's (pkg/kubelet/status/state/state_checkpoint.go@v1.32.0), quoted inside a klog line
#: the way journald shows it (quotes escaped), with a non-default kubelet root.
POD_ALLOCATION = (
    'E0105 04:12:00.000000 811 run.go:72] "command failed" err="failed to run Kubelet: could not restore state from '
    "checkpoint: checkpoint is corrupted, please drain this node and delete pod allocation checkpoint file "
    '\\"/data/kubelet/pod_status_manager_state\\" before restarting Kubelet"'
)
NOT_READY = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, preset: a100-40gb-x8, nodeProblems: [kubelet-stopped]}\n"


def _node_event(message: str, reason: str = "KubeletStart") -> Any:
    """An edit: a Warning Event on node n1, as a node-problem monitor posts a systemd unit's log line."""

    def edit(sim: SimCluster) -> None:
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": "n1.kubelet", "namespace": "default"},
                "involvedObject": {"kind": "Node", "name": "n1", "uid": "n1"},
                "reason": reason,
                "type": "Warning",
                "message": message,
            }
        )

    return edit


def _one(report: Report, fid: str) -> Finding:
    (found,) = [f for f in report.findings if f.id == fid]
    return found


def test_the_kubelet_message_names_the_checkpoint_file_it_cannot_restore() -> None:
    cpu = CHECKPOINT.search(CPU_MANAGER)
    assert cpu is not None and cpu["path"] == "/var/lib/kubelet/cpu_manager_state" and cpu["what"] == "CPU manager"
    pods = CHECKPOINT.search(POD_ALLOCATION)
    assert pods is not None and pods["path"] == "/data/kubelet/pod_status_manager_state"
    assert pods["what"] == "pod allocation"
    assert CHECKPOINT.search("could not restore state from checkpoint /var/lib/kubelet/cpu_manager_state") is None


def test_a_not_ready_node_whose_kubelet_names_a_bad_checkpoint_gets_that_repair() -> None:
    found = _one(diagnosed(NOT_READY, _node_event(POD_ALLOCATION)), "node.not-ready")
    assert found.root and "rm /data/kubelet/pod_status_manager_state" in found.fix
    assert "kubectl drain n1" in found.fix and "systemctl restart kubelet" in found.fix
    assert any("event KubeletStart" in e for e in found.evidence)
    # Without the kubelet's words, the general restart.
    bare = _one(diagnosed(NOT_READY), "node.not-ready")
    assert "checkpoint" not in bare.fix and "restart containerd kubelet" in bare.fix


PLUGIN_NODE = (
    "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, preset: l4-x2}\n"
    "workloads:\n  - {name: serve, namespace: apps, count: 2, node: n1}\n"
)
#: PyTorch's words for a container without libcuda.so.1 (pytorch/pytorch c10/cuda/CUDAFunctions.cpp, catalog.yaml).
NO_DRIVER = "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU"


def _serve_log(text: str) -> dict[str, Any]:
    """An edit: the serve pods on n1 running, not ready, with ``text`` in their log."""
    running = {"name": "main", "restarts": 0, "ready": False, "state": {"running": True}}
    return {
        "do": "pod",
        "daemonset": "serve",
        "namespace": "apps",
        "node": "n1",
        "containers": [running],
        "logs": {"main": text},
    }


def test_a_gpu_pod_without_its_driver_beside_a_registered_plugin_was_admitted_without_its_allocation() -> None:
    report = diagnosed(PLUGIN_NODE, _serve_log(NO_DRIVER))
    found = _one(report, "node.pod-admitted-without-device")
    assert found.link == "node" and found.node == "n1"
    assert found.action is not None and found.action.target == "apps/serve-0"
    assert "delete pod serve-0" in found.fix and "serve-1" in found.fix and "runtimeClassName" not in found.fix
    assert any("catalog: k8s-device-plugin.registered" in e for e in found.evidence)
    assert not [f for f in report.findings if f.id == "workload.no-driver-in-pod"]


def test_a_plugin_that_asks_for_a_runtime_class_proves_nothing_of_the_default_runtime() -> None:
    # The plugin's pod runs under RuntimeClass nvidia: the node's default runtime may still be runc.
    def plugin_runtime_class(sim: SimCluster) -> None:
        from gpuchain.kube import POD

        for p in sim.cluster.list(POD):
            if p["metadata"]["name"].startswith("nvidia-device-plugin"):
                patch = {"spec": {"runtimeClassName": "nvidia"}}
                sim.cluster.patch(POD, name=p["metadata"]["name"], patch=patch, namespace=p["metadata"]["namespace"])

    report = diagnosed(PLUGIN_NODE, plugin_runtime_class, _serve_log(NO_DRIVER))
    assert not [f for f in report.findings if f.id == "node.pod-admitted-without-device"]
    assert _one(report, "workload.no-driver-in-pod").link == "toolkit"
    # Nor does a ready plugin whose log does not show its registration (it may get the driver from host mounts).
    unsaid = {
        "do": "pod",
        "daemonset": "nvidia-device-plugin-daemonset",
        "node": "n1",
        "logs": {"nvidia-device-plugin-ctr": "I0105 Loading NVML\n"},
    }
    quiet = diagnosed(PLUGIN_NODE, unsaid, _serve_log(NO_DRIVER))
    assert not [f for f in quiet.findings if f.id == "node.pod-admitted-without-device"]
    assert _one(quiet, "workload.no-driver-in-pod").link == "toolkit"


def _taken_on_at(when: str) -> Callable[[SimCluster], None]:
    """An edit: the serve pods' containers started at ``when`` (what bounds when the kubelet took them on)."""

    def edit(sim: SimCluster) -> None:
        for p in sim.cluster.list(POD, namespace="apps"):
            statuses = copy.deepcopy(p["status"]["containerStatuses"])
            for cs in statuses:
                cs["state"] = {"running": {"startedAt": when}}
            sim.cluster.patch_status(POD, name=name_of(p), namespace="apps", status={"containerStatuses": statuses})

    return edit


def test_pods_taken_on_after_the_plugin_registered_got_their_gpu_and_the_runtime_left_it() -> None:
    """The plugin registers in its first seconds: a pod the kubelet took on after the plugin's run began was admitted
    through it, with its allocation. Without a driver in it, the runtime that runs the plugin did not act on that
    allocation: its settings are the repair (nvidia-container-toolkit internal/config/config.go GetDefault), not a
    new admission."""
    report = diagnosed(PLUGIN_NODE, _serve_log(NO_DRIVER), _taken_on_at("2026-06-05T18:30:00Z"))
    assert not [f for f in report.findings if f.id == "node.pod-admitted-without-device"]
    found = _one(report, "workload.no-driver-in-pod")
    assert found.link == "toolkit" and found.node == "n1"
    assert 'mode = "auto"' in found.fix and "accept-nvidia-visible-devices-envvar-when-unprivileged = true" in found.fix
    assert "runtimeClassName" not in found.fix
    assert any("catalog: k8s-device-plugin.registered" in e for e in found.evidence)
    # Taken on before the plugin's run began (a restart that lost the checkpoint): admitted without the allocation.
    early = diagnosed(PLUGIN_NODE, _serve_log(NO_DRIVER), _taken_on_at("2026-06-05T17:59:00Z"))
    assert _one(early, "node.pod-admitted-without-device").node == "n1"


def test_a_plugin_that_mounts_nvml_from_the_host_proves_nothing_of_the_default_runtime() -> None:
    """A plugin given libnvidia-ml by a hostPath of its own (a homelab's fix for a plugin under runc) registers
    whatever the default runtime is: the pods' missing driver is theirs, a RuntimeClass."""

    def host_library(sim: SimCluster) -> None:
        for p in sim.cluster.list(POD):
            if name_of(p).startswith("nvidia-device-plugin"):
                spec = copy.deepcopy(p["spec"])
                spec["volumes"] = [
                    *spec.get("volumes", []),
                    {"name": "nvml", "hostPath": {"path": "/usr/lib/x86_64-linux-gnu", "type": "Directory"}},
                ]
                ctr = spec["containers"][0]
                ctr["env"] = [*ctr.get("env", []), {"name": "LD_LIBRARY_PATH", "value": "/host-lib"}]
                ctr["volumeMounts"] = [*ctr.get("volumeMounts", []), {"name": "nvml", "mountPath": "/host-lib"}]
                sim.cluster.patch(POD, name=name_of(p), namespace=namespace_of(p), patch={"spec": spec})

    report = diagnosed(PLUGIN_NODE, host_library, _serve_log(NO_DRIVER))
    assert not [f for f in report.findings if f.id == "node.pod-admitted-without-device"]
    assert "runtimeClassName" in _one(report, "workload.no-driver-in-pod").fix


RENAMED = (
    "name: t\nstack: nvidia-device-plugin\nnodes:\n"
    "  - {name: n1, preset: l4-x2, nodeProblems: [kubelet-stopped]}\n  - {name: n2, preset: l4-x2}\n"
    "workloads:\n  - {name: sliced, namespace: ml, count: 2, resource: nvidia.com/gpu.shared}\n"
)
#: kube-scheduler's words for a pod no node fits, with the NotReady node's taint (kubernetes
#: pkg/scheduler/framework/plugins/noderesources/fit.go@v1.34.4 "Insufficient %v").
NO_FIT = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu.shared, 1 node(s) had untolerated taint."


def test_a_not_ready_node_that_lists_its_gpus_hides_no_other_resource_name() -> None:
    pending = {"do": "pod", "daemonset": "sliced", "namespace": "ml", "unschedulable": NO_FIT, "phase": "Pending"}
    report = diagnosed(RENAMED, pending)
    assert _one(report, "node.not-ready").node == "n1"
    named = next(f for f in report.findings if f.id == "workload.resource-name-not-offered")
    assert named.link == "device-plugin" and "renameByDefault: true under sharing.timeSlicing" in named.fix
    # A broken node that lists no GPU may offer the name once repaired: then its root is the cause.
    gone = {"do": "node", "node": "n1", "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}}
    hidden = diagnosed(RENAMED, gone, pending)
    assert not [f for f in hidden.findings if f.id == "workload.resource-name-not-offered"]


GATE = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: n1, preset: l4-x2, labels: {{{labels}}}}}\n"


def _old_kubelet(labels: str) -> set[str]:
    edit = {"do": "node", "node": "n1", "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}}
    info = {"do": "node", "node": "n1", "nodeInfo": {"kubeletVersion": "v1.9.7"}}
    return {f.id for f in diagnosed(GATE.format(labels=labels), edit, info).findings}


def test_the_device_plugins_gate_is_on_where_gces_bring_up_labelled_the_accelerators() -> None:
    assert "node.device-plugins-disabled" in _old_kubelet("rack: r7")
    assert "node.device-plugins-disabled" not in _old_kubelet("cloud.google.com/gke-accelerator: nvidia-l4")


#: The hook's refusal as Docker's runtime words it (libnvidia-container src/cli/configure.c "ldcache error",
#: src/utils.c "process %s failed with error code: %d"; the OCI wrapping is runc's).
LDCONFIG_127 = (
    'OCI runtime create failed: container_linux.go:348: starting container process caused "process_linux.go:402: '
    'container init caused \\"process_linux.go:385: running prestart hook 1 caused \\\\\\"error running hook: '
    "exit status 1, stdout: , stderr: nvidia-container-cli: ldcache error: process /sbin/ldconfig failed with error "
    'code: 127\\\\\\"\\""": unknown'
)


def test_a_plugin_the_runtime_refused_to_start_is_the_refusal_not_the_gate_an_old_kubelet_leaves_off() -> None:
    """A plugin that never ran never asked to register: what is seen (the hook's refusal) is the root, and the gate,
    guessed from the kubelet's version, waits until the plugin runs."""
    refused = plugin_pod(
        "n1",
        {
            "name": "nvidia-device-plugin-ctr",
            "restarts": 6,
            "state": {"waiting": "CrashLoopBackOff", "message": "back-off 2m40s restarting failed container"},
            "last": {"terminated": "ContainerCannotRun", "exitCode": 128, "message": LDCONFIG_127},
        },
    )
    edit = {"do": "node", "node": "n1", "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}}
    info = {"do": "node", "node": "n1", "nodeInfo": {"kubeletVersion": "v1.8.15"}}
    ids = {f.id for f in diagnosed(GATE.format(labels="rack: r2"), edit, info, refused).findings}
    assert "node.device-plugins-disabled" not in ids and "toolkit.hook-failed" in ids
    assert "node.device-plugins-disabled" in _old_kubelet("rack: r2")
