"""A GPU metrics DaemonSet in the device plugin's namespace that the plugin's stack does not own (an add-on's DCGM host
engine, a manifest's dcgm-exporter) is the exporter link there: one that tolerates no taint of the tainted GPU pool
places no pod on it, and the repair is its tolerations - through the add-on's configuration where an EKS add-on
renders it (the node monitoring agent's dcgmAgent.tolerations, aws/containers-roadmap#2567)."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import Edit, diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp
from gpuchain.kube import DAEMONSET

TAINT = "{key: nvidia.com/gpu, value: present, effect: NoSchedule}"


def _cluster(*gpu_nodes: str) -> str:
    rows = "".join(f"  - {{name: {n}, preset: t4-x4, taints: [{TAINT}]}}\n" for n in gpu_nodes)
    return f"name: t\nstack: eks\nnodes:\n{rows}  - {{name: cpu1, gpu: false}}\n"


def _agent(container: str, tolerations: list[dict[str, Any]] | None = None) -> list[Edit]:
    """The add-on's host engine DaemonSet in kube-system, placing no pod (its nodes are all tainted)."""
    spec: dict[str, Any] = {
        "containers": [
            {"name": container, "image": "example.com/agent:2.0", "command": ["nv-hostengine"], "args": ["-n"]}
        ]
    }
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return [
        {
            "do": "add-daemonset",
            "namespace": "kube-system",
            "name": "gpu-health",
            "image": "example.com/agent:2.0",
            "containers": [container],
            "nodes": [],
        },
        lambda sim: sim.cluster.patch(
            DAEMONSET, name="gpu-health", namespace="kube-system", patch={"spec": {"template": {"spec": spec}}}
        ),
    ]


def test_an_untolerated_host_engine_daemonset_breaks_the_exporter_link_on_each_tainted_gpu_node() -> None:
    report = diagnosed(_cluster("g1", "g2", "g3"), *_agent("eks-node-monitoring-agent-dcgm"))
    roots = [f for f in report.findings if f.severity is Severity.ERROR and f.root]
    assert sorted((f.node, f.link) for f in roots) == [("g1", "exporter"), ("g2", "exporter"), ("g3", "exporter")]
    fix = roots[0]
    assert fix.action is not None and fix.action.op is FixOp.PATCH_DAEMONSET
    assert fix.action.target == "kube-system/gpu-health"
    tolerations = fix.action.changes["spec"]["template"]["spec"]["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert "--addon-name eks-node-monitoring-agent" in fix.fix and '"dcgmAgent":{"tolerations"' in fix.fix


def test_a_daemonset_of_no_known_add_on_gets_the_patch_alone() -> None:
    report = diagnosed(_cluster("g1"), *_agent("host-engine"))
    (root,) = [f for f in report.findings if f.severity is Severity.ERROR and f.root]
    assert root.link == "exporter" and "update-addon" not in root.fix


def test_the_same_daemonset_tolerating_the_taint_is_quiet() -> None:
    tolerated = _agent("eks-node-monitoring-agent-dcgm", [{"operator": "Exists"}])
    report = diagnosed(_cluster("g1", "g2"), *tolerated)
    assert not [f for f in report.findings if f.link == "exporter" and f.severity is Severity.ERROR]
