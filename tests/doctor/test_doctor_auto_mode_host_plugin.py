"""EKS Auto Mode nodes (label eks.amazonaws.com/compute-type=auto) run NVIDIA's device plugin in their own image, with
no DaemonSet in the cluster: such a node announcing its GPUs needs no stack, one announcing none is its image's plugin
not registered (replace the node: Auto Mode gives no admin access), and an operator's plugin kept off it by its deploy
label is the intended layout, not an opt-out to warn about."""

from __future__ import annotations

from doctor.small_cluster import diagnosed, no_gpus
from doctor.test_doctor_bottlerocket_host_plugin import _no_plugin_daemonset

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, Report

AUTO = "eks.amazonaws.com/compute-type: auto"


def _cluster(stack: str, *nodes: tuple[str, bool], opt_out: bool = False) -> str:
    rows = "".join(
        f"  - {{name: {n}, preset: l4-x2, osImage: 'Bottlerocket (EKS Auto) 2026.1.9 (aws-k8s-1.34)', "
        f"labels: {{{AUTO if auto else 'eks.amazonaws.com/nodegroup: gpu-a'}}}"
        + (", optOut: [device-plugin]" if opt_out else "")
        + "}\n"
        for n, auto in nodes
    )
    return f"name: t\nstack: {stack}\nnodes:\n{rows}"


def _errors(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.severity is Severity.ERROR]


def test_auto_mode_nodes_announcing_their_gpus_need_no_plugin_daemonset() -> None:
    report = diagnosed(_cluster("eks", ("a1", True), ("a2", True), ("a3", True)), _no_plugin_daemonset)
    assert _errors(report) == []


def test_an_auto_mode_node_announcing_none_is_replaced_not_given_a_chart() -> None:
    report = diagnosed(_cluster("eks", ("a1", True), ("a2", True)), _no_plugin_daemonset, no_gpus("a2"))
    (root,) = _errors(report)
    assert (root.id, root.node) == ("device-plugin.not-registered", "a2")
    assert "kubectl delete node a2" in root.fix and "helm install" not in root.fix and "sheltie" not in root.fix


def test_a_managed_node_group_node_beside_them_still_misses_a_stack() -> None:
    report = diagnosed(_cluster("eks", ("a1", True), ("m1", False)), _no_plugin_daemonset)
    (missing,) = _errors(report)
    assert missing.id == "stack.missing" and "m1" in " ".join(missing.evidence) and "a1" not in missing.cause


def test_the_operators_plugin_kept_off_auto_mode_nodes_by_label_is_no_warning() -> None:
    # The image's own plugin announces the GPUs the operator's does not serve there.
    announced = [
        {"do": "node", "node": n, "capacity": {"nvidia.com/gpu": "2"}, "allocatable": {"nvidia.com/gpu": "2"}}
        for n in ("a1", "a2")
    ]
    report = diagnosed(_cluster("gpu-operator", ("a1", True), ("a2", True), opt_out=True), *announced)
    assert not [f for f in report.findings if f.id == "node.opted-out"]
    assert _errors(report) == []


def test_the_same_label_on_a_node_without_its_own_plugin_is_still_questioned() -> None:
    report = diagnosed(_cluster("gpu-operator", ("m1", False), opt_out=True))
    assert [f.node for f in report.findings if f.id == "node.opted-out"] == ["m1"]
