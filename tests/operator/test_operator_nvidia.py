"""The operator beside NVIDIA's GPU Operator: stand aside when both would deploy the same operands.

NVIDIA's ClusterPolicy here is its chart's default (tests/compat/operator/fixtures, NVIDIA/gpu-operator
a22dbf6); its DaemonSets carry a controller ownerReference to that ClusterPolicy, as NVIDIA's
controller sets one (controllers/object_controls.go, SetControllerReference).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from operator_helpers import NS, converge, make_cluster, node

from gpuchain.kube import CLUSTER_POLICY, DAEMONSET, RUNTIME_CLASS, MemoryCluster
from gpuchain.operator.migrate import NVIDIA_CLUSTER_POLICY
from gpuchain.operator.reconcile import reconcile
from gpuchain.operator.simulate import OperandSimulator

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


def _ready(cluster: MemoryCluster) -> dict[str, Any]:
    status = cluster.get(CLUSTER_POLICY, "cluster-policy")["status"]
    return next(c for c in status["conditions"] if c["type"] == "Ready")


def test_stands_aside_while_nvidias_operator_runs_the_same_operands() -> None:
    cluster = make_cluster()
    created = cluster.create(nvidia_policy())
    nvidia_daemonset(cluster, "nvidia-device-plugin-daemonset", created["metadata"]["uid"])
    result = reconcile(cluster, "cluster-policy", NS)
    assert result.state == "standingAside"
    ready = _ready(cluster)
    assert ready["status"] == "False" and ready["reason"] == "NVIDIAGPUOperatorPresent"
    assert "ClusterPolicy nvidia.com/v1 'cluster-policy'" in ready["message"]
    assert "nvidia-gpu-operator/nvidia-device-plugin-daemonset" in ready["message"]
    assert "device-plugin" in ready["message"] and "driver" in ready["message"]
    ours = [d for d in cluster.list(DAEMONSET) if d["metadata"]["namespace"] == NS]
    assert ours == [] and cluster.list(RUNTIME_CLASS) == [], "nothing of gpuchain's is created"
    cluster.calls.reset()
    reconcile(cluster, "cluster-policy", NS)
    assert cluster.calls.writes == 0, "standing aside is not a write loop"


def test_goes_ahead_once_nvidias_policy_is_gone() -> None:
    cluster = make_cluster()
    cluster.create(nvidia_policy())
    assert reconcile(cluster, "cluster-policy", NS).state == "standingAside"
    cluster.delete(NVIDIA_CLUSTER_POLICY, "cluster-policy")
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
    names = {d["metadata"]["name"] for d in cluster.list(DAEMONSET, NS)}
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
