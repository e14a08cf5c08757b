"""The operator beside NVIDIA's GPU Operator: stand aside when both would deploy the same operands.

NVIDIA's ClusterPolicy here is its chart's default (tests/compat/operator/fixtures, NVIDIA/gpu-operator
a22dbf6); its DaemonSets carry a controller ownerReference to that ClusterPolicy, as NVIDIA's
controller sets one (controllers/object_controls.go, SetControllerReference). NVIDIA's operator
Deployment is shaped as its chart renders it (deployments/gpu-operator/templates/operator.yaml at
a22dbf6: name gpu-operator, labels app.kubernetes.io/component and app "gpu-operator", replicas 1;
the OLM bundle's CSV carries the same labels).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from fakes.operand_simulator import OperandSimulator
from operator_helpers import NS, converge, make_cluster, node

from gpuchain.kube import CLUSTER_POLICY, DAEMONSET, RUNTIME_CLASS, SERVICE, MemoryCluster
from gpuchain.operator.migrate import NVIDIA_CLUSTER_POLICY
from gpuchain.operator.reconcile import reconcile

FIXTURES = Path(__file__).resolve().parents[1] / "compat" / "operator" / "fixtures"


def nvidia_policy(**enabled: bool) -> dict[str, Any]:
    doc: dict[str, Any] = copy.deepcopy(yaml.safe_load((FIXTURES / "helm-default-clusterpolicy.yaml").read_text()))
    for key, on in enabled.items():
        doc["spec"][key]["enabled"] = on
    return doc


def nvidia_daemonset(cluster: MemoryCluster, name: str, policy_uid: str) -> None:
    owner = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "name": "cluster-policy",
        "uid": policy_uid,
        "controller": True,
    }
    cluster.create(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": "nvidia-gpu-operator", "ownerReferences": [owner]},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}}}},
        }
    )


def nvidia_operator(cluster: MemoryCluster, replicas: int = 1) -> None:
    labels = {"app.kubernetes.io/component": "gpu-operator", "app": "gpu-operator"}
    cluster.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "gpu-operator", "namespace": "nvidia-gpu-operator", "labels": labels},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "gpu-operator", "image": "nvcr.io/nvidia/gpu-operator:v25.10.0"}]},
                },
            },
        }
    )


def _ours(cluster: MemoryCluster) -> set[str]:
    return {d["metadata"]["name"] for d in cluster.list(DAEMONSET, namespace=NS)}


def _ready(cluster: MemoryCluster) -> dict[str, Any]:
    status = cluster.get(CLUSTER_POLICY, name="cluster-policy")["status"]
    return next(c for c in status["conditions"] if c["type"] == "Ready")


def test_stands_aside_while_nvidias_operator_runs_the_same_operands() -> None:
    cluster = make_cluster()
    created = cluster.create(nvidia_policy())
    nvidia_daemonset(cluster, "nvidia-device-plugin-daemonset", created["metadata"]["uid"])
    result = reconcile(cluster, name="cluster-policy", namespace=NS)
    assert result.state == "standingAside"
    ready = _ready(cluster)
    assert ready["status"] == "False" and ready["reason"] == "NVIDIAGPUOperatorPresent"
    assert "ClusterPolicy nvidia.com/v1 'cluster-policy'" in ready["message"]
    assert "nvidia-gpu-operator/nvidia-device-plugin-daemonset" in ready["message"]
    assert "device-plugin" in ready["message"] and "driver" in ready["message"]
    ours = [d for d in cluster.list(DAEMONSET) if d["metadata"]["namespace"] == NS]
    assert ours == [] and cluster.list(RUNTIME_CLASS) == [], "nothing of gpuchain's is created"
    cluster.calls.reset()
    reconcile(cluster, name="cluster-policy", namespace=NS)
    assert cluster.calls.writes == 0, "standing aside is not a write loop"


def test_goes_ahead_once_nvidias_policy_is_gone() -> None:
    cluster = make_cluster()
    cluster.create(nvidia_policy())
    nvidia_operator(cluster)
    assert reconcile(cluster, name="cluster-policy", namespace=NS).state == "standingAside"
    cluster.delete(NVIDIA_CLUSTER_POLICY, name="cluster-policy")
    assert converge(cluster, OperandSimulator(cluster, NS)).state == "ready"


def test_runs_beside_nvidias_driver_and_toolkit() -> None:
    # NVIDIA keeps the driver, toolkit and its validator; gpuchain runs the rest.
    cluster = make_cluster(
        spec={"driver": {"enabled": False}, "toolkit": {"enabled": False}, "validator": {"enabled": False}}
    )
    cluster.create(
        nvidia_policy(devicePlugin=False, gfd=False, dcgmExporter=False, migManager=False, nodeStatusExporter=False)
    )
    result = converge(cluster, OperandSimulator(cluster, NS))
    assert result.state == "ready"
    names = {d["metadata"]["name"] for d in cluster.list(DAEMONSET, namespace=NS)}
    assert names == {
        "nvidia-device-plugin-daemonset",
        "gpu-feature-discovery",
        "nvidia-dcgm-exporter",
        "nvidia-mig-manager",
    }
    assert cluster.list(RUNTIME_CLASS) == [], "RuntimeClass nvidia is NVIDIA's: not created or re-owned"


def test_deploy_labels_left_by_an_uninstalled_nvidia_operator_do_not_block() -> None:
    # NVIDIA's operator labels GPU nodes nvidia.com/gpu.deploy.<operand>=true and may leave the labels
    # behind when uninstalled; "true" means the same to gpuchain, so they do not stop it.
    labels = {f"nvidia.com/gpu.deploy.{x}": "true" for x in ("driver", "device-plugin", "gpu-feature-discovery")}
    cluster = MemoryCluster([node("gpu-0", **labels)])
    cluster.create(
        {"apiVersion": "gpuchain.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"}, "spec": {}}
    )
    assert converge(cluster, OperandSimulator(cluster, NS)).state == "ready"


def test_nvidia_installed_after_gpuchain_removes_gpuchains_colliding_operands() -> None:
    # gpuchain first, NVIDIA's chart installed later: its operator Deployment runs before its DaemonSets exist.
    cluster = make_cluster()
    assert converge(cluster, OperandSimulator(cluster, NS)).state == "ready"
    assert "nvidia-device-plugin-daemonset" in _ours(cluster)
    cluster.create(nvidia_policy())
    nvidia_operator(cluster)
    result = reconcile(cluster, name="cluster-policy", namespace=NS)
    assert result.state == "standingAside"
    assert _ours(cluster) == set(), "two device plugins, GFDs, MIG managers and drivers on one node"
    assert "daemonset/nvidia-device-plugin-daemonset (deleted)" in result.changed
    assert cluster.list(SERVICE, namespace=NS) == [], "the exporter's Service goes with its DaemonSet"
    ready = _ready(cluster)
    assert "Deployment nvidia-gpu-operator/gpu-operator" in ready["message"]
    assert "gpuchain removes its own DaemonSets for these" in ready["message"]
    cluster.calls.reset()
    reconcile(cluster, name="cluster-policy", namespace=NS)
    assert cluster.calls.writes == 0, "standing aside is not a write loop"


def test_standing_aside_keeps_gpuchains_operands_nvidia_does_not_run() -> None:
    cluster = make_cluster()
    assert converge(cluster, OperandSimulator(cluster, NS)).state == "ready"
    created = cluster.create(nvidia_policy(dcgmExporter=False))
    nvidia_daemonset(cluster, "nvidia-device-plugin-daemonset", created["metadata"]["uid"])
    assert reconcile(cluster, name="cluster-policy", namespace=NS).state == "standingAside"
    assert _ours(cluster) == {"nvidia-dcgm-exporter"}
    assert [s["metadata"]["name"] for s in cluster.list(SERVICE, namespace=NS)] == ["nvidia-dcgm-exporter"], (
        "kept with its exporter"
    )
    assert "dcgm-exporter" not in _ready(cluster)["message"].split("deploys")[1]


def test_a_leftover_nvidia_policy_without_its_operator_does_not_stop_gpuchain() -> None:
    # An OLM uninstall or a deleted release can leave the ClusterPolicy behind with nothing running it.
    cluster = make_cluster()
    cluster.create(nvidia_policy())
    assert converge(cluster, OperandSimulator(cluster, NS)).state == "ready"
    assert "nvidia-device-plugin-daemonset" in _ours(cluster)


def test_nvidias_operator_scaled_to_zero_does_not_stop_gpuchain() -> None:
    cluster = make_cluster()
    cluster.create(nvidia_policy())
    nvidia_operator(cluster, replicas=0)
    assert converge(cluster, OperandSimulator(cluster, NS)).state == "ready"
