"""Bottlerocket's NVIDIA variants run the device plugin as a host service: with no plugin DaemonSet in the cluster,
such a node announcing no GPU is that service not registered (restart it, replace the node, update the node group's
Bottlerocket), not a GPU stack to install; a node of another image in the same cluster still misses one."""

from __future__ import annotations

from doctor.small_cluster import diagnosed, no_gpus

from gpuchain.doctor import Severity, run_doctor
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.kube import DAEMONSET, POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim import build, parse_scenario
from gpuchain.sim.build import SimCluster

BR = "Bottlerocket OS 1.24.1 (aws-k8s-1.29-nvidia)"


def _eks(*nodes: tuple[str, str]) -> str:
    rows = "".join(
        f"  - {{name: {n}, preset: l4-x2, osImage: '{image}', labels: {{eks.amazonaws.com/nodegroup: g-{n}}}}}\n"
        for n, image in nodes
    )
    return f"name: t\nstack: eks\nnodes:\n{rows}"


def _no_plugin_daemonset(sim: SimCluster) -> None:
    for kind in (POD, DAEMONSET):
        for obj in sim.cluster.list(kind):
            if "device-plugin" in name_of(obj):
                sim.cluster.delete(kind, name=name_of(obj), namespace=namespace_of(obj))


def _errors(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.severity is Severity.ERROR and f.root]


def test_a_bottlerocket_nvidia_node_announcing_no_gpu_restarts_its_host_plugin_not_a_chart_install() -> None:
    report = diagnosed(_eks(("br1", BR)), _no_plugin_daemonset, no_gpus("br1"))
    (root,) = _errors(report)
    assert (root.id, root.link, root.node) == ("device-plugin.not-registered", "device-plugin", "br1")
    assert "systemctl restart nvidia-k8s-device-plugin" in root.fix and "helm install" not in root.fix
    assert "Bottlerocket release" in root.fix and "--nodegroup-name g-br1" in root.fix


def test_beside_it_a_node_of_another_image_still_misses_a_gpu_stack() -> None:
    report = diagnosed(_eks(("br1", BR), ("al1", "Amazon Linux 2")), _no_plugin_daemonset, no_gpus("br1"))
    ids = {(f.id, f.node) for f in _errors(report)}
    assert ("device-plugin.not-registered", "br1") in ids and ("stack.missing", None) in ids
    (missing,) = [f for f in report.findings if f.id == "stack.missing"]
    assert "1 node(s)" in missing.cause and "br1" not in " ".join(missing.evidence)


def test_a_bottlerocket_nvidia_node_that_announces_its_gpus_needs_nothing() -> None:
    report = diagnosed(_eks(("br1", BR)), _no_plugin_daemonset)
    assert _errors(report) == []


def test_a_plugin_daemonset_pod_on_a_bottlerocket_nvidia_node_is_kept_off_it_by_its_node_group() -> None:
    report = diagnosed(_eks(("br1", BR), ("al1", "Amazon Linux 2")), no_gpus("br1"))
    (root,) = _errors(report)
    assert (root.id, root.link, root.node) == ("device-plugin.beside-host-plugin", "device-plugin", "br1")
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    terms = root.action.changes["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    away = {"key": "eks.amazonaws.com/nodegroup", "operator": "NotIn", "values": ["g-br1"]}
    assert terms and all(away in t["matchExpressions"] for t in terms)
    assert not [f for f in report.findings if f.node == "al1" and f.severity is Severity.ERROR]


def test_applied_the_affinity_leaves_the_bottlerocket_node_to_its_own_plugin() -> None:
    sim = build(parse_scenario(_eks(("br1", BR), ("al1", "Amazon Linux 2"))))
    (root,) = _errors(run_doctor(sim.cluster, reader=sim.read_log))
    assert root.action is not None
    ns, _, name = root.action.target.partition("/")
    sim.cluster.patch(DAEMONSET, name=name, namespace=ns, patch=root.action.changes)
    for pod in sim.cluster.list(POD):
        if pod["spec"].get("nodeName") == "br1" and "device-plugin" in name_of(pod):
            sim.cluster.delete(POD, name=name_of(pod), namespace=namespace_of(pod))
    assert _errors(run_doctor(sim.cluster, reader=sim.read_log)) == []
