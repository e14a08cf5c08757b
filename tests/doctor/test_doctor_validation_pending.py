"""A validation pod of the GPU Operator Pending on a GPU node's taint that it does not tolerate: the link it validates is
the root on the tainted nodes (validation_pods.yaml), with the tolerations the operator release gives it, never the
links that wait behind it nor a workload finding of the pod's own.

Pods as the operator's manifests make them (NVIDIA/gpu-operator validator/cuda-workload-validation.yaml and
plugin-workload-validation.yaml@v1.7.0: app labels, generated names, the nvidia.com/gpu toleration alone), Pending as
kube-scheduler leaves them (PodScheduled=False, Unschedulable, the TaintToleration plugin's words).
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp, Report
from gpuchain.doctor.validation_pods import validation_pods
from gpuchain.kube import NODE
from gpuchain.kube.kinds import Kind
from gpuchain.sim.build import SimCluster

NS = "gpu-operator"
NVIDIA_POLICY = Kind(api_version="nvidia.com/v1", kind="ClusterPolicy", plural="clusterpolicies", namespaced=False)
CLUSTER = (
    f"name: t\nstack: gpu-operator\nnamespace: {NS}\nnodes:\n  - {{name: cpu-0, gpu: false}}\n"
    "  - {name: l4-a, preset: l4-x2}\n  - {name: l4-b, preset: l4-x2}\n  - {name: l4-c, preset: l4-x2}\n"
)
TAINT = {"key": "team", "value": "vision", "effect": "NoSchedule"}


def _tainted(*nodes: str) -> Any:
    """An edit: ``nodes`` tainted team=vision:NoSchedule after the operands were placed (they stay)."""

    def edit(sim: SimCluster) -> None:
        for node in nodes:
            sim.cluster.patch(NODE, name=node, patch={"spec": {"taints": [TAINT]}})

    return edit


def _operator_at(tag: str) -> Any:
    """An edit: the ClusterPolicy labelled by the operator chart of ``tag``."""

    def edit(sim: SimCluster) -> None:
        labels = {"helm.sh/chart": f"gpu-operator-{tag}", "app.kubernetes.io/instance": "gpu-operator"}
        sim.cluster.patch(NVIDIA_POLICY, name="cluster-policy", patch={"metadata": {"labels": labels}})

    return edit


def _pending(app: str, suffix: str, message: str, *, gpu: bool = True, namespace: str = NS) -> Any:
    """An edit: a bare pod labelled app=``app`` Pending with the scheduler's ``message``."""

    def edit(sim: SimCluster) -> None:
        limits = {"limits": {"nvidia.com/gpu": "1"}} if gpu else {}
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{app}-{suffix}", "namespace": namespace, "labels": {"app": app}},
                "spec": {
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "restartPolicy": "OnFailure",
                    "containers": [
                        {"name": "nvidia-validator", "image": "nvcr.io/nvidia/cuda-sample", "resources": limits}
                    ],
                },
                "status": {
                    "phase": "Pending",
                    "conditions": [
                        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
                    ],
                },
            }
        )

    return edit


def _roots(report: Report) -> list[Any]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


UNTOLERATED_TWO = (
    "0/4 nodes are available: 2 node(s) had untolerated taint {team: vision}, 2 Insufficient nvidia.com/gpu. "
    "preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod."
)


def test_every_entry_cites_the_change_and_validates_a_link() -> None:
    assert {v.link for v in validation_pods()} <= {"driver", "toolkit", "device-plugin"}
    assert all(v.fixed and v.key and v.source and v.line for v in validation_pods())


def test_a_cuda_validator_kept_off_by_a_taint_on_an_older_operator_is_the_toolkit_root_on_the_tainted_nodes() -> None:
    report = diagnosed(
        CLUSTER,
        _tainted("l4-a", "l4-c"),
        _operator_at("v1.10.1"),
        _pending("nvidia-cuda-validator", "7x2kq", UNTOLERATED_TWO, gpu=False),
    )
    roots = _roots(report)
    assert {(f.node, f.link, f.id) for f in roots} == {
        ("l4-a", "toolkit", "operand.not-scheduled"),
        ("l4-c", "toolkit", "operand.not-scheduled"),
    }
    root = roots[0]
    assert root.fix.startswith("# upgrade the GPU Operator to v1.11.1 or later")
    assert f"kubectl -n {NS} patch pod nvidia-cuda-validator-7x2kq" in root.fix and '"key":"team"' in root.fix
    assert root.action is not None and root.action.op is FixOp.PATCH_WORKLOAD
    assert not any(f.id == "workload.untolerated-taint" for f in report.findings)


def test_a_plugin_validator_on_a_release_that_copies_tolerations_patches_the_policy_key() -> None:
    report = diagnosed(
        CLUSTER,
        _tainted("l4-b"),
        _operator_at("v23.9.1"),
        _pending("nvidia-device-plugin-validator", "m4d9r", UNTOLERATED_TWO),
    )
    (root,) = _roots(report)
    assert (root.node, root.link) == ("l4-b", "device-plugin")
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    tolerations = root.action.changes["spec"]["daemonsets"]["tolerations"]
    assert {"key": "team", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert any(t.get("key") == "nvidia.com/gpu" for t in tolerations)  # the ones it has are kept


def test_a_users_pod_with_the_same_label_outside_the_operator_namespace_is_a_workload() -> None:
    report = diagnosed(
        CLUSTER,
        _tainted("l4-a", "l4-b", "l4-c"),
        _pending("nvidia-cuda-validator", "abcde", UNTOLERATED_TWO, namespace="ml"),
    )
    assert not any(f.id == "operand.not-scheduled" for f in report.findings)
    assert any(f.id == "workload.untolerated-taint" for f in report.findings)


def test_a_validation_that_waits_only_for_a_selector_is_no_root() -> None:
    selector = "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."
    report = diagnosed(CLUSTER, _pending("nvidia-device-plugin-validation", "x", selector))
    assert not [f for f in report.findings if f.id == "operand.not-scheduled"]
    assert not _roots(report)
