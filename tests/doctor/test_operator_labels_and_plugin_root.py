"""Two GPU Operator states whose root is the operator's bookkeeping, not a broken operand.

- ``operator.node-unlabelled``: a node NFD marks as NVIDIA (pci-10de / pci-0302_10de) that the operator never gave
  nvidia.com/gpu.present: it labels GPU nodes only while it reconciles (controllers/state_manager.go labelGPUNodes
  @v24.9.0), and before 1.4.0 nothing reconciled when a node joined (pkg/controller/clusterpolicy/
  clusterpolicy_controller.go@1.4.0 adds the Node watch). tests/sim/heldout27 h27-02 is the held-out case (a node
  created with only NFD's labels); the variants below differ in node, label spelling and operator release.
- ``device-plugin.stale-driver-root``: on a host-driver node the runtime refuses GPU containers for
  ``lstat /run/nvidia/driver/dev/...`` (containerd pkg/oci/utils_unix.go@v1.6.4 DeviceFromPath): the plugin read the
  driver container's root when it started (assets/state-device-plugin/0400_daemonset.yaml@v1.11.0,
  0400_configmap.yaml@v24.9.0). tests/sim/heldout27 h27-01 / h27-06 are the held-out cases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor.model import FixOp, Report
from gpuchain.kube import NODE, POD
from gpuchain.kube.objects import name_of
from gpuchain.sim.build import SimCluster

UNLABELLED = "operator.node-unlabelled"
STALE = "device-plugin.stale-driver-root"
OPERATOR = "gpu-operator-6f7d9c8b5-x2k4q"


def _two_nodes(policy: str = "{driver: {version: 535.183.06}}") -> str:
    return (
        f"name: t\nstack: gpu-operator\npolicy: {policy}\n"
        "nodes:\n  - {name: t4-a, preset: t4-x4}\n  - {name: t4-b, preset: t4-x4}\n"
    )


def _joined(node: str, nfd: str, **extra: str) -> Callable[[SimCluster], None]:
    """An edit: ``node`` as a node that joined after the operator last reconciled: NFD's ``nfd`` label only, none of
    the operator's, no operand pod and no GPU in its capacity."""

    def edit(sim: SimCluster) -> None:
        for pod in sim.cluster.list(POD):
            if pod["spec"].get("nodeName") == node:
                sim.cluster.delete(POD, name=name_of(pod), namespace=pod["metadata"]["namespace"])
        obj = sim.cluster.get(NODE, name=node)
        labels = {"kubernetes.io/hostname": node, "kubernetes.io/os": "linux", nfd: "true", **extra}
        status = {**obj["status"]}
        for key in ("capacity", "allocatable"):
            status[key] = {k: v for k, v in (status.get(key) or {}).items() if not k.startswith("nvidia.com/")}
        sim.cluster.delete(NODE, name=node)
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node, "labels": labels},
                "spec": {},
                "status": status,
            }
        )

    return edit


def _operator_pod(version: str) -> Callable[[SimCluster], None]:
    """An edit: the operator's own pod, Running the GPU Operator at ``version``."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": OPERATOR, "namespace": "gpu-operator", "labels": {"app": "gpu-operator"}},
        "spec": {
            "nodeName": "t4-a",
            "containers": [{"name": "gpu-operator", "image": f"nvcr.io/nvidia/gpu-operator:{version}"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "gpu-operator", "ready": True, "restartCount": 0, "state": {"running": {}}}],
        },
    }
    return lambda sim: sim.cluster.create(pod)


def _undated(sim: SimCluster) -> None:
    """An edit: no validator pod left to date the operator (a dump of the nodes' own namespaces)."""
    for pod in sim.cluster.list(POD):
        if any("gpu-operator-validator" in str(c.get("image", "")) for c in pod["spec"].get("containers") or []):
            sim.cluster.delete(POD, name=name_of(pod), namespace=pod["metadata"]["namespace"])


def _only(report: Report, fid: str) -> Any:
    (found,) = [f for f in report.findings if f.id == fid]
    return found


def test_a_node_nfd_marks_by_class_that_the_operator_never_labelled_has_the_operator_restarted() -> None:
    report = diagnosed(
        _two_nodes(), _joined("t4-b", "feature.node.kubernetes.io/pci-0302_10de.present"), _operator_pod("v24.9.2")
    )
    found = _only(report, UNLABELLED)
    assert (found.node, found.link, found.root) == ("t4-b", "gfd", True)
    assert found.action is not None and found.action.op is FixOp.DELETE and found.action.target.endswith(OPERATOR)
    assert "upgrade" not in found.fix  # v24.9.2 watches nodes: the restart is all there is to do
    assert "device-plugin.not-registered" not in report.ids


def test_before_the_node_watch_of_1_4_the_restart_comes_with_the_upgrade() -> None:
    report = diagnosed(
        _two_nodes(), _joined("t4-b", "feature.node.kubernetes.io/pci-10de.present"), _operator_pod("1.3.0")
    )
    found = _only(report, UNLABELLED)
    assert "1.4.0" in found.fix and "1.3.0" in found.fix


def test_an_operator_before_1_2_sets_no_label_so_the_node_is_not_the_operators_to_label() -> None:
    """1.1.x's DaemonSets selected NFD's pci-10de label themselves (state_manager.go@1.2.0 gpuNodeLabels is new)."""
    report = diagnosed(
        _two_nodes(), _joined("t4-b", "feature.node.kubernetes.io/pci-10de.present"), _operator_pod("1.1.7")
    )
    assert UNLABELLED not in report.ids


def test_where_no_release_shows_a_class_only_nfd_label_also_names_the_vendor_label() -> None:
    """tests/sim/heldout17 h17-05's state (NFD's pci-0302_10de only) with no release in the dump: both eras' repair."""
    joined = _joined("t4-b", "feature.node.kubernetes.io/pci-0302_10de.present")
    found = _only(diagnosed(_two_nodes(), joined, _undated), UNLABELLED)
    assert "rollout restart deployment gpu-operator" in found.fix
    assert "feature.node.kubernetes.io/pci-10de.present=true" in found.fix


def test_without_an_operator_pod_in_the_dump_its_deployment_is_restarted() -> None:
    found = _only(diagnosed(_two_nodes(), _joined("t4-b", "feature.node.kubernetes.io/pci-10de.present")), UNLABELLED)
    assert "rollout restart deployment gpu-operator" in found.fix


def test_a_node_opted_out_of_every_operand_or_labelled_by_the_operator_is_quiet() -> None:
    opted = diagnosed(
        _two_nodes(),
        _joined("t4-b", "feature.node.kubernetes.io/pci-10de.present", **{"nvidia.com/gpu.deploy.operands": "false"}),
    )
    assert UNLABELLED not in opted.ids
    assert UNLABELLED not in diagnosed(_two_nodes()).ids


REFUSED = (
    'failed to generate container "4c1d" spec: failed to generate spec: lstat /run/nvidia/driver/dev/nvidia0: '
    "no such file or directory"
)


def _refused_job(node: str) -> dict[str, Any]:
    return {
        "do": "pod",
        "daemonset": "train",
        "namespace": "ml",
        "node": node,
        "phase": "Pending",
        "containers": [
            {"name": "main", "ready": False, "state": {"waiting": "CreateContainerError", "message": REFUSED}}
        ],
        "events": [{"reason": "Failed", "count": 4, "message": f"Error: {REFUSED}"}],
    }


def _host_driver(node: str, *, opted: bool) -> str:
    policy = "{driver: {version: 570.172.08}}" if opted else "{driver: {enabled: false}}"
    opt = ", optOut: [driver]" if opted else ""
    return (
        f"name: t\nstack: gpu-operator\npolicy: {policy}\n"
        f"nodes:\n  - {{name: {node}, preset: a100-40gb-x8, hostDriver: '570.172.08'{opt}}}\n"
        f"workloads:\n  - {{name: train, namespace: ml, count: 2, gpus: 2, node: {node}}}\n"
    )


def test_gpu_pods_refused_for_driver_container_paths_on_an_opted_out_node_restart_the_plugin() -> None:
    found = _only(diagnosed(_host_driver("a100-w9", opted=True), _refused_job("a100-w9")), STALE)
    assert (found.node, found.link, found.root) == ("a100-w9", "device-plugin", True)
    assert found.action is not None and found.action.op is FixOp.DELETE
    assert "nvidia-device-plugin-daemonset" in found.action.target
    assert "/run/nvidia/driver/dev/nvidia0" in found.cause and "deploy.driver=false" in found.cause


def test_with_the_driver_disabled_in_the_policy_the_same_refusal_is_the_plugins() -> None:
    found = _only(diagnosed(_host_driver("rhel-gpu-2", opted=False), _refused_job("rhel-gpu-2")), STALE)
    assert "spec.driver.enabled=false" in found.cause


def test_where_a_driver_pod_should_serve_the_node_the_missing_root_is_not_blamed_on_the_plugin() -> None:
    scenario = (
        "name: t\nstack: gpu-operator\npolicy: {driver: {version: 570.172.08}}\n"
        "nodes:\n  - {name: a100-w9, preset: a100-40gb-x8}\n"
        "workloads:\n  - {name: train, namespace: ml, count: 2, gpus: 2, node: a100-w9}\n"
    )
    assert STALE not in diagnosed(scenario, _refused_job("a100-w9")).ids


def test_a_host_driver_node_whose_gpu_pods_start_is_quiet() -> None:
    assert STALE not in diagnosed(_host_driver("a100-w9", opted=True)).ids
