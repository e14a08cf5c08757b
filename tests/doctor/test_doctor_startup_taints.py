"""A GPU node that keeps a startup taint: the node is named as the root, the taint removed and its owner made to
remove it, never a toleration added to the pods it keeps off.

Facts: the EFS CSI driver's startup taint and its removal, kubernetes-sigs/aws-efs-csi-driver docs/install.md@v2.3.0
("Configure node startup taint", efs.csi.aws.com/agent-not-ready, NoExecute recommended) and pkg/driver/node.go@v2.3.0
(removeNotReadyTaint, "Removed taint(s) from local node"); the release that fixed a lost removal,
CHANGELOG-2.x.md@v2.3.0 ("verify startup taint removal after patch"); the chart that ships it,
charts/aws-efs-csi-driver/Chart.yaml@v2.3.0 (version 3.4.0, appVersion 2.3.0). Cilium's
node.cilium.io/agent-not-ready is read by its key's shape. The scheduler's words: kubernetes
pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go@v1.34.4. The fixtures vary node names, effects,
driver releases and owners from tests/sim/heldout36 (chanzuckerberg/cztack#893).
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed
from doctor.test_doctor_pending_workloads import pending_pod

from gpuchain.doctor.model import FixOp, Report, Severity
from gpuchain.doctor.startup_taints import FINDING, startup_taint
from gpuchain.kube import NODE, POD
from gpuchain.sim.build import SimCluster

CLUSTER = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: gpu-a, preset: a100-40gb-x8}\n  - {name: gpu-b, preset: a100-40gb-x8}\n"
EFS = "efs.csi.aws.com/agent-not-ready"


def taint(node: str, key: str, effect: str = "NoExecute") -> Any:
    def edit(sim: SimCluster) -> None:
        sim.cluster.patch(NODE, name=node, patch={"spec": {"taints": [{"key": key, "effect": effect}]}})

    return edit


def agent(name: str, image: str, nodes: list[str]) -> dict[str, Any]:
    """A node agent's DaemonSet tolerating every taint, a ready pod on each of ``nodes`` (heldout's add-daemonset)."""
    return {
        "do": "add-daemonset",
        "namespace": "kube-system",
        "name": name,
        "containers": ["plugin"],
        "image": image,
        "tolerations": [{"operator": "Exists"}],
        "nodes": nodes,
    }


def msg(key: str) -> str:
    return (
        f"0/2 nodes are available: 1 node(s) had untolerated taint {{{key}: }}, 1 node(s) didn't match Pod's node "
        "affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )


def pinned(node: str, key: str) -> Any:
    return pending_pod("train-0", msg(key), spec={"nodeSelector": {"kubernetes.io/hostname": node}})


def _errors(report: Report) -> list[Any]:
    return [f for f in report.findings if f.severity is Severity.ERROR]


def test_an_efs_startup_taint_left_by_an_affected_driver_is_the_nodes_root_with_the_release_that_fixed_it() -> None:
    image = "public.ecr.aws/efs-csi-driver/amazon/aws-efs-csi-driver:v2.0.8"
    report = diagnosed(
        CLUSTER, agent("efs-csi-node", image, ["gpu-a", "gpu-b"]), taint("gpu-b", EFS), pinned("gpu-b", EFS)
    )
    (found,) = [f for f in report.findings if f.id == FINDING]
    assert found.node == "gpu-b" and found.link == "node" and found.root
    assert found.action is not None and found.action.op is FixOp.TAINT_NODE
    assert found.fix.startswith(f"kubectl taint node gpu-b {EFS}:NoExecute-")
    assert "v2.3.0 or later" in found.fix and "3.4.0" in found.fix
    assert any("aws-efs-csi-driver.startup-taint-kept" in e for e in found.evidence)
    assert not [f for f in report.findings if f.id == "workload.untolerated-taint"]


def test_a_fixed_driver_that_runs_ready_and_left_its_taint_is_restarted_not_upgraded_to_the_same_release() -> None:
    image = "public.ecr.aws/efs-csi-driver/amazon/aws-efs-csi-driver:v2.3.1"
    report = diagnosed(
        CLUSTER,
        agent("efs-csi-node", image, ["gpu-a", "gpu-b"]),
        taint("gpu-a", EFS, "NoSchedule"),
        pinned("gpu-a", EFS),
    )
    (found,) = [f for f in report.findings if f.id == FINDING]
    assert found.node == "gpu-a" and "v2.3.0 or later" not in found.fix
    assert "kubectl delete pod -n kube-system efs-csi-node-" in found.fix


def test_a_taint_of_another_agent_is_read_by_its_keys_shape_and_its_owner_by_its_domain() -> None:
    key = "node.cilium.io/agent-not-ready"

    def not_ready(sim: SimCluster) -> None:
        (pod,) = [
            p
            for p in sim.cluster.list(POD)
            if p["metadata"]["name"].startswith("cilium-") and p["spec"]["nodeName"] == "gpu-a"
        ]
        status = {
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {
                    "name": "plugin",
                    "ready": False,
                    "restartCount": 3,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                }
            ],
        }
        sim.cluster.patch_status(POD, name=pod["metadata"]["name"], status=status, namespace="kube-system")

    report = diagnosed(
        CLUSTER,
        agent("cilium", "quay.io/cilium/cilium:v1.15.6", ["gpu-a", "gpu-b"]),
        not_ready,
        taint("gpu-a", key),
        pinned("gpu-a", key),
    )
    (found,) = [f for f in report.findings if f.id == FINDING]
    assert found.node == "gpu-a" and f"kubectl taint node gpu-a {key}:NoExecute-" in found.fix
    assert "ready: it removes the taint once it runs" in found.fix


def test_a_startup_taint_with_no_owner_on_the_node_says_to_stop_adding_it() -> None:
    key = "startup-taint.cluster-autoscaler.kubernetes.io/gpu-warmup"
    report = diagnosed(CLUSTER, taint("gpu-b", key, "NoSchedule"), pinned("gpu-b", key))
    (found,) = [f for f in report.findings if f.id == FINDING]
    assert "stop adding the taint" in found.fix


def test_a_deliberate_taint_still_gets_the_toleration_on_the_pod() -> None:
    key = "dedicated"
    report = diagnosed(CLUSTER, taint("gpu-b", key, "NoSchedule"), pinned("gpu-b", key))
    assert not [f for f in report.findings if f.id == FINDING]
    assert [f for f in report.findings if f.id == "workload.untolerated-taint"]


def test_a_node_being_started_with_its_taint_and_no_pod_waiting_on_it_stays_quiet() -> None:
    image = "public.ecr.aws/efs-csi-driver/amazon/aws-efs-csi-driver:v2.0.8"
    report = diagnosed(CLUSTER, agent("efs-csi-node", image, ["gpu-a", "gpu-b"]), taint("gpu-b", EFS))
    assert _errors(report) == []


def test_only_startup_shapes_outside_the_node_lifecycle_are_startup_taints() -> None:
    assert startup_taint(EFS) is not None and startup_taint(EFS).owner == "the AWS EFS CSI driver"
    assert startup_taint("node.cloudprovider.kubernetes.io/uninitialized") is not None
    assert startup_taint("node.kubernetes.io/not-ready") is None
    assert startup_taint("nvidia.com/gpu") is None and startup_taint("dedicated") is None


def test_a_taint_a_cluster_controller_removes_names_that_controller_not_a_pod_on_the_node() -> None:
    key = "node.cloudprovider.kubernetes.io/uninitialized"
    report = diagnosed(CLUSTER, taint("gpu-a", key, "NoSchedule"), pinned("gpu-a", key))
    (found,) = [f for f in report.findings if f.id == FINDING]
    assert "the cloud controller manager run and initialise gpu-a" in found.fix
    assert "DaemonSet" not in found.fix
