"""The exporter's Service, as NVIDIA's operator makes it, so scrape configs keep working after a move.

Fixture: NVIDIA/gpu-operator a22dbf6 ``assets/state-dcgm-exporter/0400_service.yaml`` (the Service
its operator creates whenever dcgmExporter is on; ``controllers/object_controls.go``
``TransformDCGMExporterService`` sets ``spec.type`` and ``internalTrafficPolicy`` from
``dcgmExporter.service``). A ServiceMonitor or scrape config written for NVIDIA's stack selects it
by name, label ``app``, port name ``gpu-metrics`` or the ``prometheus.io/scrape`` annotation.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from fakes.cluster_policy import cluster_policy
from operator_compat_helpers import FIXTURES

from gpuchain.kube import CLUSTER_POLICY, SERVICE, MemoryCluster
from gpuchain.kube.selectors import match_label_selector_object
from gpuchain.operator.desired import desired
from gpuchain.operator.operands import Facts
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy
from gpuchain.operator.reconcile import reconcile

NVIDIA = yaml.safe_load((FIXTURES / "state-dcgm-exporter-0400_service.yaml").read_text())


def _objects(spec: dict[str, Any]) -> list[dict[str, Any]]:
    policy = parse_policy(spec)
    assert isinstance(policy, ClusterPolicySpec), policy
    return desired(policy, Facts(namespace="gpu-operator", policy_name="cluster-policy"))


@pytest.mark.parametrize(
    ("layout", "pods"),
    [({"nodeAgent": {"enabled": False}}, "nvidia-dcgm-exporter"), ({}, "gpuchain-node-agent")],
    ids=["per-operand", "node-agent"],
)
def test_the_exporter_service_is_nvidias_and_selects_gpuchains_exporter_pods(layout: dict[str, Any], pods: str) -> None:
    """NVIDIA's name, labels, annotation and port, selecting the pods that serve the metrics: the
    exporter's own, or the node agent's (its exporter role serves them on the same port)."""
    objs = _objects(layout)
    (svc,) = [o for o in objs if o["kind"] == "Service"]
    assert svc["metadata"]["name"] == NVIDIA["metadata"]["name"]
    assert NVIDIA["metadata"]["labels"].items() <= svc["metadata"]["labels"].items()
    assert NVIDIA["metadata"]["annotations"].items() <= svc["metadata"]["annotations"].items()
    assert svc["spec"]["ports"] == NVIDIA["spec"]["ports"]
    if layout:  # NVIDIA's layout: NVIDIA's selector too
        assert svc["spec"]["selector"] == NVIDIA["spec"]["selector"]
    daemonsets = {o["metadata"]["name"]: o["spec"]["template"] for o in objs if o["kind"] == "DaemonSet"}
    selected = [
        n
        for n, t in daemonsets.items()
        if match_label_selector_object({"matchLabels": svc["spec"]["selector"]}, t["metadata"]["labels"])
    ]
    assert selected == [pods]
    (port,) = daemonsets[pods]["spec"]["containers"][0]["ports"]
    assert port["containerPort"] == svc["spec"]["ports"][0]["targetPort"]


def test_service_type_and_internal_traffic_policy_apply_as_in_nvidias_operator() -> None:
    spec = {"dcgmExporter": {"service": {"type": "NodePort", "internalTrafficPolicy": "Local"}}}
    (svc,) = [o for o in _objects(spec) if o["kind"] == "Service"]
    assert (svc["spec"]["type"], svc["spec"]["internalTrafficPolicy"]) == ("NodePort", "Local")
    assert not [o for o in _objects({"dcgmExporter": {"enabled": False}}) if o["kind"] == "Service"]


def test_the_operator_creates_the_service_and_removes_it_with_the_exporter() -> None:
    cluster = MemoryCluster([cluster_policy("cluster-policy", {})])
    reconcile(cluster, name="cluster-policy", namespace="gpu-operator")
    assert [s["metadata"]["name"] for s in cluster.list(SERVICE, namespace="gpu-operator")] == ["nvidia-dcgm-exporter"]
    assert (
        "service/nvidia-dcgm-exporter"
        not in reconcile(cluster, name="cluster-policy", namespace="gpu-operator").changed
    )
    cluster.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"dcgmExporter": {"enabled": False}}})
    result = reconcile(cluster, name="cluster-policy", namespace="gpu-operator")
    assert "service/nvidia-dcgm-exporter (deleted)" in result.changed
    assert cluster.list(SERVICE, namespace="gpu-operator") == []
