"""A container the low-level runtime refuses to create while it runs under the nvidia RuntimeClass is the
toolkit's failure, even where runc's words name nothing of NVIDIA's: runc creates the node's other containers under
the default handler, and what differs for this one is nvidia-container-runtime's edit of its OCI spec
(NVIDIA/nvidia-container-toolkit cmd/nvidia-container-runtime@v1.17.4: it modifies the spec and execs runc). The
kubelet shows it as terminated StartError (exit 128), then CrashLoopBackOff, with containerd's "failed to create
shim task: OCI runtime create failed: ..." (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go@v1.34.4).
The repair is the toolkit's release, not the plugin's.
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
