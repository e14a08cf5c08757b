"""Least privilege, checked both ways: every request the operator makes is granted by the chart's
RBAC, and every verb granted to the operator is one it uses."""

from __future__ import annotations

import json
from typing import Any

import helm_python as helm
import pytest
from fakes.cluster_policy import cluster_policy
from fakes.operand_simulator import OperandSimulator
from helm_python import _native
from helm_python.errors import HelmRenderError
from test_chart import CHART, render

from gpuchain.kube import CLUSTER_POLICY, DAEMONSET, NODE, RUNTIME_CLASS, SERVICE, SERVICE_ACCOUNT, Kind, MemoryCluster
from gpuchain.kube.objects import Obj
from gpuchain.operator.desired import desired
from gpuchain.operator.operands import Facts
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy
from gpuchain.operator.reconcile import reconcile

NS = "gpu-operator"
#: Verbs kopf itself needs for its watches (list + watch of each watched resource).
KOPF = {("list", "gpuchain.io", "clusterpolicies"), ("watch", "gpuchain.io", "clusterpolicies")}
KOPF |= {("list", "apps", "daemonsets"), ("watch", "apps", "daemonsets")}
KOPF |= {("list", "", "nodes"), ("watch", "", "nodes")}
# kopf's resource scanning (tests/peers/test_operator_role.py: refused, it logged 403s forever).
KOPF |= {("list", "apiextensions.k8s.io", "customresourcedefinitions")}
KOPF |= {("watch", "apiextensions.k8s.io", "customresourcedefinitions")}


class Recording(MemoryCluster):
    """A MemoryCluster that logs (verb, group, resource, namespace) for every request while recording."""

    def __init__(self, objects: list[Obj]) -> None:
        self.log: list[tuple[str, str, str, str | None]] = []
        self.recording = False
        super().__init__(objects)

    def _rec(self, verb: str, kind: Kind, namespace: str | None, sub: str = "") -> None:
        if self.recording:
            resource = kind.plural + (f"/{sub}" if sub else "")
            self.log.append((verb, kind.group, resource, namespace if kind.namespaced else None))

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj:
        self._rec("get", kind, namespace or "default")
        return super().get(kind, name=name, namespace=namespace)

    def list(self, kind: Kind, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[Obj]:  # fmt: skip
        self._rec("list", kind, namespace)
        return super().list(kind, namespace=namespace, label_selector=label_selector, field_selector=field_selector)

    def create(self, obj: Obj) -> Obj:
        from gpuchain.kube import kind_of

        self._rec("create", kind_of(obj), obj.get("metadata", {}).get("namespace") or "default")
        return super().create(obj)

    def patch(self, kind: Kind, name: str, patch: Obj, namespace: str | None = None) -> Obj:
        self._rec("patch", kind, namespace or "default")
        return super().patch(kind, name=name, patch=patch, namespace=namespace)

    def patch_status(self, kind: Kind, name: str, status: Obj, namespace: str | None = None) -> Obj:
        self._rec("patch", kind, namespace or "default", "status")
        return super().patch_status(kind, name=name, status=status, namespace=namespace)

    def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        self._rec("delete", kind, namespace or "default")
        super().delete(kind, name=name, namespace=namespace)

    def evict(self, name: str, namespace: str) -> None:
        from gpuchain.kube import POD

        self._rec("create", POD, namespace, "eviction")
        super().evict(name, namespace)


def _rules() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    docs = render()
    cluster_rules = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gpuchain-operator")
    ns_rules = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "gpuchain-operator")
    return cluster_rules["rules"], ns_rules["rules"]


def _grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(v, g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def _exercise() -> Recording:
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"gpu-{i}", "labels": {"feature.node.kubernetes.io/pci-10de.present": "true"}},
        }
        for i in range(2)
    ]
    # NVIDIA's layout first (one DaemonSet per operand), the node agent's later: the same verbs
    cluster = Recording([*nodes, cluster_policy("cluster-policy", {"nodeAgent": {"enabled": False}})])
    sim = OperandSimulator(cluster, NS)
    for _ in range(3):
        cluster.recording = True
        reconcile(cluster, name="cluster-policy", namespace=NS)
        cluster.recording = False
        sim.settle()
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "job", "namespace": "ml"},
            "spec": {
                "nodeName": "gpu-0",
                "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            },
            "status": {"phase": "Running"},
        }
    )
    cluster.patch(
        CLUSTER_POLICY,
        name="cluster-policy",
        patch={"spec": {"driver": {"version": "580.65.06"}, "gfd": {"enabled": False}}},
    )
    for _ in range(30):
        cluster.recording = True
        reconcile(cluster, name="cluster-policy", namespace=NS)
        cluster.recording = False
        sim.settle()
    assert (
        cluster.get(NODE, name="gpu-1")["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-done"
    )
    # Someone edits operand objects by hand: the operator puts them back.
    cluster.patch(RUNTIME_CLASS, name="nvidia", patch={"handler": "runc"})
    relabel = {"metadata": {"labels": {"app.kubernetes.io/part-of": "x"}}}
    cluster.patch(SERVICE_ACCOUNT, name="gpuchain-device-plugin", patch=relabel, namespace=NS)
    cluster.patch(SERVICE, name="nvidia-dcgm-exporter", patch=relabel, namespace=NS)
    cluster.recording = True
    reconcile(cluster, name="cluster-policy", namespace=NS)
    cluster.recording = False
    assert cluster.get(RUNTIME_CLASS, name="nvidia")["handler"] == "nvidia"
    labels = cluster.get(SERVICE_ACCOUNT, name="gpuchain-device-plugin", namespace=NS)["metadata"]["labels"]
    assert labels["app.kubernetes.io/part-of"] == "gpuchain"
    assert cluster.get(SERVICE, name="nvidia-dcgm-exporter", namespace=NS)["metadata"]["labels"][
        "app.kubernetes.io/part-of"
    ] == ("gpuchain")
    # The device plugin's ConfigMap shares with MPS: the operator reads it and mounts the MPS root.
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "plugin-config", "namespace": NS},
            "data": {
                "mps": "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"
            },
        }
    )
    cluster.patch(
        CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"devicePlugin": {"config": {"name": "plugin-config"}}}}
    )
    cluster.recording = True
    reconcile(cluster, name="cluster-policy", namespace=NS)
    cluster.recording = False
    plugin = cluster.get(DAEMONSET, name="nvidia-device-plugin-daemonset", namespace=NS)
    assert plugin["spec"]["template"]["spec"]["hostPID"] is True
    # The exporter switched off: its Service goes with it.
    cluster.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"dcgmExporter": {"enabled": False}}})
    cluster.recording = True
    reconcile(cluster, name="cluster-policy", namespace=NS)
    cluster.recording = False
    assert cluster.list(SERVICE, namespace=NS) == []
    # The node agent layout: the per-operand DaemonSets go, one agent DaemonSet and its account come.
    cluster.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"nodeAgent": {"enabled": True}}})
    cluster.recording = True
    reconcile(cluster, name="cluster-policy", namespace=NS)
    cluster.recording = False
    assert {d["metadata"]["name"] for d in cluster.list(DAEMONSET, namespace=NS)} == {
        "nvidia-driver-daemonset",
        "nvidia-container-toolkit-daemonset",
        "gpuchain-node-agent",
    }
    # NVIDIA's chart installed afterwards (its operator Deployment labelled as its chart labels it):
    # the operator lists Deployments, stands aside and deletes its own colliding DaemonSets.
    cluster.create({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "nvidia"}, "spec": {}})
    app = {"app.kubernetes.io/component": "gpu-operator", "app": "gpu-operator"}
    cluster.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "gpu-operator", "namespace": "nvidia", "labels": app},
            "spec": {"replicas": 1, "selector": {"matchLabels": app}, "template": {"metadata": {"labels": app}}},
        }
    )
    cluster.recording = True
    assert reconcile(cluster, name="cluster-policy", namespace=NS).state == "standingAside"
    cluster.recording = False
    return cluster


def test_operator_requests_are_granted_and_grants_are_used() -> None:
    cluster = _exercise()
    cluster_grants, ns_grants = (_grants(r) for r in _rules())
    used = set()
    for verb, group, resource, namespace in cluster.log:
        key = (verb, group, resource)
        granted = key in cluster_grants or (namespace == NS and key in ns_grants)
        assert granted, f"{verb} {group or 'core'}/{resource} in {namespace or 'cluster scope'} is not granted"
        used.add(key)
    unused = (cluster_grants | ns_grants) - used - KOPF
    assert unused == set(), f"granted but never used: {sorted(unused)}"


#: What each operand does with the API, by the code path that does it: (verb, group, resource).
OPERAND_NEEDS: dict[str, set[tuple[str, str, str]]] = {
    # deviceplugin/nodeconfig.py: get + watch its Node's config label; Warning Event on a bad config.
    "nvidia-device-plugin-daemonset": {("get", "", "nodes"), ("watch", "", "nodes"), ("create", "", "events")},
    # discovery/output.py: get its Node, patch its labels; discovery/service.py: watch its config label.
    "gpu-feature-discovery": {("get", "", "nodes"), ("watch", "", "nodes"), ("patch", "", "nodes")},
    # mig/manager.py: get/watch/patch its Node, list and watch the GPU pods on it, get their DRA
    # claims (tests/mig/test_agent.py), record Events (evicting them is --evict, granted only with
    # migManagerEviction).
    "nvidia-mig-manager": {
        ("get", "", "nodes"),
        ("watch", "", "nodes"),
        ("patch", "", "nodes"),
        ("list", "", "pods"),
        ("watch", "", "pods"),
        ("get", "resource.k8s.io", "resourceclaims"),
        ("create", "", "events"),
    },
    # validator/checks.py: the plugin check gets its Node's allocatable.
    "nvidia-operator-validator": {("get", "", "nodes")},
    # No API use: the driver and toolkit containers, and the exporter (kubelet pod-resources only).
    "nvidia-driver-daemonset": set(),
    "nvidia-container-toolkit-daemonset": set(),
    "nvidia-dcgm-exporter": set(),
}


#: The node agent's roles by values key, with the per-operand DaemonSet whose needs each brings.
AGENT_ROLES = {
    "validator": "nvidia-operator-validator",
    "devicePlugin": "nvidia-device-plugin-daemonset",
    "dcgmExporter": "nvidia-dcgm-exporter",
    "gfd": "gpu-feature-discovery",
    "migManager": "nvidia-mig-manager",
}
OFF = {"enabled": False}


@pytest.mark.parametrize(
    "values",
    [
        {"nodeAgent": OFF},
        {},
        {"devicePlugin": OFF, "migManager": OFF},
        {"validator": OFF, "devicePlugin": OFF, "gfd": OFF, "migManager": OFF},  # the exporter alone
    ],
    ids=["per-operand", "node-agent", "agent-without-plugin-and-mig", "agent-exporter-only"],
)
def test_each_operand_is_granted_exactly_what_it_uses(values: dict[str, Any]) -> None:
    """Each DaemonSet's account is granted what its code uses; the node agent's, what its enabled
    roles use together, no more (and no token where none of them calls the API)."""
    docs = render(values)
    roles = {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] == "ClusterRole"}
    bound: dict[str, set[tuple[str, str, str]]] = {}
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        for subject in binding["subjects"]:
            grants = _grants(roles.get(binding["roleRef"]["name"], []))
            bound.setdefault(subject["name"], set()).update(grants)
    policy = parse_policy(next(d for d in docs if d["kind"] == "ClusterPolicy")["spec"])
    assert isinstance(policy, ClusterPolicySpec), policy
    objs = desired(policy, Facts(namespace=NS, policy_name="cluster-policy"))
    pods = {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objs if o["kind"] == "DaemonSet"}
    accounts = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}
    needs = dict(OPERAND_NEEDS)
    if policy.node_agent.enabled:
        on = [ds for key, ds in AGENT_ROLES.items() if values.get(key) != OFF]
        needs = {name: need for name, need in needs.items() if name not in AGENT_ROLES.values()}
        needs["gpuchain-node-agent"] = set().union(*(OPERAND_NEEDS[ds] for ds in on))
    assert set(pods) == set(needs)
    for name, pod in pods.items():
        account = pod["serviceAccountName"]
        assert account in accounts, f"{name}: ServiceAccount {account} is not rendered by the operator"
        assert bound.get(account, set()) == needs[name], name
        assert (pod.get("automountServiceAccountToken") is not False) == bool(needs[name]), name
    operand_subjects = set(bound) - {"gpuchain-operator"}
    assert operand_subjects <= accounts, f"bindings for accounts no operand uses: {operand_subjects - accounts}"


@pytest.mark.parametrize("layout", [{"nodeAgent": OFF}, {}], ids=["per-operand", "node-agent"])
def test_the_mig_manager_may_evict_only_when_the_chart_allows_it(layout: dict[str, Any]) -> None:
    """The eviction grant is opt-in and comes with the admission policy that confines it to the
    MIG manager's own node's pods (tests/peers/test_node_agent_policy.py checks it on the server),
    in the node agent as in the MIG manager's own DaemonSet."""
    account = "gpuchain-node-agent" if not layout else "gpuchain-mig-manager"

    def mig_rules(values: dict[str, Any]) -> list[dict[str, Any]]:
        (role,) = [
            d for d in render({**layout, **values}) if d["kind"] == "ClusterRole" and d["metadata"]["name"] == account
        ]
        return list(role["rules"])

    def policies(values: dict[str, Any]) -> set[str]:
        return {d["metadata"]["name"] for d in render(values) if d["kind"].startswith("ValidatingAdmissionPolicy")}

    assert not any("pods/eviction" in r["resources"] for r in mig_rules({}))
    assert "gpuchain-node-agent-evictions" not in policies({})
    allowed = mig_rules({"migManagerEviction": True})
    assert {"resources": ["pods/eviction"], "verbs": ["create"]}.items() <= next(
        r for r in allowed if "pods/eviction" in r["resources"]
    ).items()
    assert "gpuchain-node-agent-evictions" in policies({"migManagerEviction": True})


def test_the_chart_refuses_mig_manager_evictions_where_nothing_can_confine_them() -> None:
    """Before Kubernetes 1.30 a token names no node: the grant would reach every pod, so helm stops.
    (helm_python's Chart.render takes no Kubernetes version; its native helm_render does.)"""

    def rendered(kube_version: str) -> str:
        options = {"name": "gpuchain", "namespace": NS, "is_install": True, "kube_version": kube_version}
        chart = helm.Chart.load(CHART)
        return str(
            _native.call_string(
                "helm_render", chart._raw(), json.dumps({"migManagerEviction": True}), json.dumps(options)
            )
        )

    assert "gpuchain-node-agent-evictions" in rendered("v1.30.0")
    with pytest.raises(HelmRenderError, match="migManagerEviction needs Kubernetes >= 1.30"):
        rendered("v1.29.0")
