"""A toolkit container stopped by a signal right after configuring containerd, again and again
(links/toolkit_torn_down.py).

GPU Operator releases before v22.9.1 exec nvidia-toolkit at once, and containerd 1.6.9 and later tear the toolkit
down when it restarts them (NVIDIA/cloud-native-docs gpu-operator/release-notes.rst, 22.9.1: "Fix repeated restarts of
container-toolkit when used with containerd versions v1.6.9 and above"; NVIDIA/gpu-operator
assets/state-container-toolkit/0400_container_toolkit.yml@v22.9.1 adds the pause). The toolkit's log lines are its
own (NVIDIA/nvidia-container-toolkit tools/container/nvidia-toolkit/run.go and tools/container/containerd/
containerd.go@v1.11.0). Node names, presets, containerd patch releases and restart counts are stand-ins: a kubeadm
node on containerd 1.7.2 and a MicroK8s node on containerd 1.6.15 (a release after 1.6.9), GPU Operator v1.11.1 and
v22.9.0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.links.toolkit_torn_down import stopped_after_setup
from gpuchain.doctor.model import Finding, Report
from gpuchain.sim import SimCluster

#: The toolkit's own lines for one run: setup for containerd completed, then a signal and the cleanup it starts.
LOG = """time="2023-01-10T08:00:00Z" level=info msg="Starting 'setup' for containerd"
time="2023-01-10T08:00:00Z" level=info msg="Successfully signaled containerd"
time="2023-01-10T08:00:00Z" level=info msg="Completed 'setup' for containerd"
time="2023-01-10T08:00:00Z" level=info msg="Waiting for signal"
time="2023-01-10T08:00:01Z" level=info msg="Cleaning up Runtime"
time="2023-01-10T08:00:01Z" level=info msg="Starting 'cleanup' for containerd"
"""


def _cluster(node: str, runtime: str, labels: str = "") -> str:
    return (
        "name: t\nstack: gpu-operator\npolicy: {driver: {enabled: false}}\nnodes:\n"
        f'  - {{name: {node}, preset: t4-x4, hostDriver: "525.60.13", containerRuntime: "{runtime}"{labels}}}\n'
    )


def _toolkit(node: str, restarts: int, log: str = LOG) -> dict[str, Any]:
    ctr = {
        "name": "nvidia-container-toolkit-ctr",
        "restarts": restarts,
        "state": {"waiting": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"},
        "last": {"terminated": "Error", "exitCode": 1},
    }
    return {
        "do": "pod",
        "daemonset": "nvidia-container-toolkit-daemonset",
        "node": node,
        "containers": [ctr],
        "logs": {"nvidia-container-toolkit-ctr": log},
    }


def _operator(version: str, node: str) -> Callable[[SimCluster], object]:
    """The GPU Operator's own pod, whose image tag is its release (links/releases.py installed_release)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "gpu-operator-6d8f9c7b5-q2x8z",
            "namespace": "gpu-operator",
            "labels": {"app": "gpu-operator"},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "gpu-operator", "image": f"nvcr.io/nvidia/gpu-operator:{version}"}],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "gpu-operator", "ready": True, "restartCount": 0}],
        },
    }
    return lambda sim: sim.cluster.create(pod)


def _toolkit_error(report: Report) -> Finding:
    (found,) = [f for f in report.findings if f.severity is Severity.ERROR and f.link == "toolkit"]
    return found


def test_an_old_operator_on_a_new_containerd_moves_to_the_release_that_fixed_it() -> None:
    found = _toolkit_error(
        diagnosed(_cluster("gpu-b", "containerd://1.7.2"), _toolkit("gpu-b", 6), _operator("v1.11.1", "gpu-b"))
    )
    assert (found.id, found.node) == ("toolkit.torn-down", "gpu-b")
    assert "v22.9.1" in found.fix and "microk8s" not in found.fix
    assert "release: gpu-operator.toolkit-containerd-restart" in " ".join(found.evidence)


def test_on_microk8s_the_gpu_addon_names_the_release() -> None:
    cluster = _cluster("mk8s-b", "containerd://1.6.15", ', labels: {microk8s.io/cluster: "true"}')
    found = _toolkit_error(diagnosed(cluster, _toolkit("mk8s-b", 9), _operator("v22.9.0", "mk8s-b")))
    assert found.id == "toolkit.torn-down"
    assert found.fix.startswith("microk8s disable gpu && microk8s enable gpu --version v22.9.1")


def test_an_older_containerd_a_fixed_operator_or_one_restart_are_not_this_defect() -> None:
    for cluster, edits in (
        (_cluster("gpu-b", "containerd://1.6.8"), (_toolkit("gpu-b", 6), _operator("v22.9.0", "gpu-b"))),
        (_cluster("gpu-b", "containerd://1.7.2"), (_toolkit("gpu-b", 6), _operator("v22.9.1", "gpu-b"))),
        (_cluster("gpu-b", "containerd://1.7.2"), (_toolkit("gpu-b", 1), _operator("v22.9.0", "gpu-b"))),
    ):
        report = diagnosed(cluster, *edits)
        assert all(f.id != "toolkit.torn-down" for f in report.findings)


def test_only_a_run_that_completed_its_setup_and_then_got_a_signal_reads_as_stopped() -> None:
    assert "Cleaning up Runtime" in stopped_after_setup(LOG)
    failed_setup = LOG.replace("Completed 'setup' for containerd", "error running nvidia-toolkit: unable to setup")
    assert stopped_after_setup(failed_setup) == ""
    assert stopped_after_setup("\n".join(LOG.splitlines()[:4])) == ""
