"""A container the low-level runtime refuses to create while it runs under the nvidia RuntimeClass is the
toolkit's failure, even where runc's words name nothing of NVIDIA's: runc creates the node's other containers under
the default handler, and what differs for this one is nvidia-container-runtime's edit of its OCI spec
(NVIDIA/nvidia-container-toolkit cmd/nvidia-container-runtime@v1.17.4: it modifies the spec and execs runc). The
kubelet shows it as terminated StartError (exit 128), then CrashLoopBackOff, with containerd's "failed to create
shim task: OCI runtime create failed: ..." (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go@v1.34.4).
The repair is the toolkit's release, not the plugin's.

The other way round: a plugin that logged "found NVML library" had the driver's library in its container (the
runtime did its part), so an NVML failure after it is the plugin's link, not a runtime without NVIDIA's hook.
"""

from __future__ import annotations

from collections.abc import Callable

from doctor.small_cluster import diagnosed, no_gpus, plugin_pod

from gpuchain.doctor.model import Finding, FixOp, Report, Severity
from gpuchain.kube import POD
from gpuchain.sim.build import SimCluster

PLUGIN = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, distribution: k3s, hostDriver: 470.82.00}\n"
#: runc's refusal as containerd passes it on (its wording: the report NVIDIA/k8s-device-plugin#278 quotes it).
REFUSAL = (
    "failed to create containerd task: failed to create shim: OCI runtime create failed: container_linux.go:364: "
    'creating new parent process caused: container_linux.go:2005: running lstat on namespace path "/proc/4076575/'
    'ns/ipc" caused: lstat /proc/4076575/ns/ipc: no such file or directory: unknown'
)
REFUSED = {
    "name": "nvidia-device-plugin-ctr",
    "restarts": 21,
    "state": {"waiting": "CrashLoopBackOff"},
    "last": {"terminated": "StartError", "exitCode": 128, "message": REFUSAL},
}


def _runtime_class(name: str) -> Callable[[SimCluster], None]:
    """An edit: n1's plugin pod runs under RuntimeClass ``name`` (handler nvidia), which the cluster has."""

    def edit(sim: SimCluster) -> None:
        runtime_class = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}}
        sim.cluster.create({**runtime_class, "handler": "nvidia"})
        pod = next(p for p in sim.cluster.list(POD) if p["metadata"]["name"].startswith("nvidia-device-plugin"))
        sim.cluster.patch(
            POD, name=pod["metadata"]["name"], patch={"spec": {"runtimeClassName": name}}, namespace="kube-system"
        )

    return edit


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def test_runc_refusing_a_container_of_the_nvidia_runtime_class_is_the_toolkits() -> None:
    report = diagnosed(PLUGIN, no_gpus("n1"), plugin_pod("n1", REFUSED), _runtime_class("nvidia"))
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("toolkit.hook-failed", "toolkit", "n1")
    assert "under the nvidia RuntimeClass" in root.cause
    assert f"says: {REFUSAL}" in root.evidence
    assert root.action is not None and root.action.op is FixOp.NODE
    assert "upgrade the node's NVIDIA container toolkit packages" in root.fix and "libnvidia-container" in root.fix


def test_the_same_refusal_under_the_default_runtime_is_not_the_toolkits() -> None:
    (root,) = _roots(diagnosed(PLUGIN, no_gpus("n1"), plugin_pod("n1", REFUSED)))
    assert root.link == "device-plugin"


#: The plugin's lines when its container has libnvidia-ml.so.1 and NVML still fails to initialise (go-nvlib
#: pkg/nvlib/info HasNvml "found NVML library" logged by factory.go, then the plugin's own exit line).
FOUND_THEN_FAILED = (
    "I0801 15:26:24.781053       1 factory.go:104] Detected NVML platform: found NVML library\n"
    "error starting plugins: error creating plugin manager: unable to create plugin manager: nvml init failed: "
    "ERROR_LIBRARY_NOT_FOUND\n"
)
NOT_FOUND = (
    "I0801 15:26:24.781053       1 factory.go:104] Detected non-NVML platform: could not load NVML library: "
    "libnvidia-ml.so.1: cannot open shared object file: No such file or directory\n"
    "E0801 15:26:24.781100       1 main.go:132] error starting plugins: error creating plugin manager: unable to "
    "create plugin manager: platform detection failed\n"
)
HOST = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, hostDriver: 550.90.07}\n"
CRASH = {"name": "nvidia-device-plugin-ctr", "restarts": 8, "state": {"waiting": "CrashLoopBackOff"},
         "last": {"terminated": "Error", "exitCode": 1}}  # fmt: skip


def test_a_plugin_that_found_the_nvml_library_is_not_a_runtime_without_nvidias_hook() -> None:
    (root,) = _roots(diagnosed(HOST, no_gpus("n1"), plugin_pod("n1", CRASH, FOUND_THEN_FAILED)))
    assert (root.link, root.node) == ("device-plugin", "n1")
    (missing,) = _roots(diagnosed(HOST, no_gpus("n1"), plugin_pod("n1", CRASH, NOT_FOUND)))
    assert missing.link != "device-plugin"
