"""A dcgm-exporter failing on a node that runs the WSL2 kernel (a Hyper-V GPU-PV or WSL2 node, whose GPU is reached
through dxcore, where NVML is not available) cannot run there whatever its settings: the exporter is to be left off
the node (its DaemonSet deleted where every GPU node is such a node, else kept off them), not the driver repaired; the
same failure on a node with a native driver is not this."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import built, diagnosed

from gpuchain.doctor import Severity, run_doctor
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.kube import DAEMONSET, POD
from gpuchain.kube.objects import name_of, namespace_of

WSL2 = "6.6.87.2-microsoft-standard-WSL2"
LOG = (
    'time="2026-01-12T07:00:01Z" level=info msg="Starting dcgm-exporter"\n'
    'time="2026-01-12T07:00:01Z" level=fatal msg="Error starting nv-hostengine: DCGM initialization error"\n'
)


def _cluster(*nodes: tuple[str, str]) -> str:
    rows = "".join(f"  - {{name: {n}, preset: l4-x2, kernel: {k}}}\n" for n, k in nodes)
    return f"name: t\nstack: nvidia-device-plugin\nnodes:\n{rows}"


def _exporter(*nodes: str, failing: tuple[str, ...]) -> list[dict[str, Any]]:
    """A dcgm-exporter DaemonSet beside the plugin, in its namespace, crash-looping on ``failing``."""
    edits: list[dict[str, Any]] = [
        {
            "do": "add-daemonset",
            "namespace": "kube-system",
            "name": "gpu-metrics",
            "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04",
            "containers": ["gpu-metrics"],
            "nodes": list(nodes),
        }
    ]
    for n in failing:
        edits.append(
            {
                "do": "pod",
                "daemonset": "gpu-metrics",
                "namespace": "kube-system",
                "node": n,
                "containers": [
                    {
                        "name": "gpu-metrics",
                        "ready": False,
                        "restarts": 6,
                        "state": {"waiting": "CrashLoopBackOff"},
                        "last": {"terminated": "Error", "exitCode": 1},
                    }
                ],
                "logs": {"gpu-metrics": LOG},
            }
        )
    return edits


def _exporter_errors(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.link == "exporter" and f.severity is Severity.ERROR]


def test_on_gpu_pv_nodes_only_the_exporter_daemonset_goes() -> None:
    report = diagnosed(_cluster(("pv1", WSL2), ("pv2", WSL2)), *_exporter("pv1", "pv2", failing=("pv1", "pv2")))
    found = _exporter_errors(report)
    assert sorted((f.id, f.node) for f in found) == [("exporter.gpu-pv", "pv1"), ("exporter.gpu-pv", "pv2")]
    action = found[0].action
    assert action is not None and action.op is FixOp.DELETE and action.target == "kube-system/gpu-metrics"
    assert "dxcore" in found[0].fix and "driver" not in found[0].fix
    assert not [f for f in report.findings if f.link in ("driver", "device-plugin") and f.severity is Severity.ERROR]


def test_beside_a_native_gpu_node_it_is_kept_off_the_gpu_pv_one() -> None:
    report = diagnosed(_cluster(("pv1", WSL2), ("bm1", "6.8.0-60-generic")), *_exporter("pv1", "bm1", failing=("pv1",)))
    (found,) = _exporter_errors(report)
    assert (found.id, found.node) == ("exporter.gpu-pv", "pv1")
    assert found.action is not None and found.action.op is FixOp.PATCH_DAEMONSET
    terms = found.action.changes["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert all(
        {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["pv1"]} in t["matchExpressions"]
        for t in terms
    )


def test_the_same_failure_on_a_native_driver_is_not_read_as_gpu_pv() -> None:
    report = diagnosed(_cluster(("bm1", "6.8.0-60-generic")), *_exporter("bm1", failing=("bm1",)))
    assert [f.node for f in _exporter_errors(report)] == ["bm1"]
    assert not [f for f in report.findings if f.id == "exporter.gpu-pv"]


def test_applied_the_delete_leaves_the_gpu_pv_nodes_without_an_exporter_error() -> None:
    sim = built(_cluster(("pv1", WSL2)), *_exporter("pv1", failing=("pv1",)))
    (found,) = _exporter_errors(run_doctor(sim.cluster, reader=sim.read_log))
    assert found.action is not None
    ns, _, name = found.action.target.partition("/")
    for pod in sim.cluster.list(POD):
        if name_of(pod).startswith(name + "-"):
            sim.cluster.delete(POD, name=name_of(pod), namespace=namespace_of(pod))
    sim.cluster.delete(DAEMONSET, name=name, namespace=ns)
    after = run_doctor(sim.cluster, reader=sim.read_log)
    assert not [f for f in after.findings if f.severity is Severity.ERROR]
