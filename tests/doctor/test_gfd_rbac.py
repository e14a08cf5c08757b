"""GFD in NodeFeature API mode writes its labels into a NodeFeature object nvidia-features-for-<node> (NVIDIA/
k8s-device-plugin internal/lm/output.go@v0.17.1; NVIDIA/gpu-feature-discovery internal/lm/labels.go@v0.8.0) and runs
ready while the API server refuses it, so its log is the only word: a refusal by RBAC names the verb the ServiceAccount
lacks, and the repair is that rule for that account; an object name ending at the prefix is a container without
NODE_NAME (the gpu-feature-discovery chart 0.8.0 renders none; 0.8.1 adds it, 5eda015; 0.8.2 adds the create verb,
6cd62a5), and the repair is NODE_NAME from the downward API. A new pod alone is refused the same way.

The refusal is the API server's own message (kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/handlers/
responsewriters/errors.go@v1.32.0 forbiddenMessage); node, namespace and account names are stand-ins.
"""

from __future__ import annotations

from typing import Any

import pytest
from doctor.small_cluster import diagnosed
from sim.heldout9 import harness as ninth

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp, Report
from gpuchain.doctor.rbac import refusal

NODE = "a100-node-7"
SCENARIO = f"name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: {NODE}, preset: a100-80gb-x8}}\n"
ACCOUNT = "system:serviceaccount:nvidia-device-plugin:nvdp-nvidia-device-plugin-service-account"
PREFIX = "E1103 10:20:30.000000       1 main.go:140] "


def _forbidden(verb: str, what: str) -> str:
    return (
        f'nodefeatures.nfd.k8s-sigs.io{what} is forbidden: User "{ACCOUNT}" cannot {verb} resource "nodefeatures" in '
        'API group "nfd.k8s-sigs.io" in the namespace "nvidia-device-plugin"'
    )


def _gfd(log: str, labelled: bool = False) -> list[Any]:
    """GFD beside the plugin in NodeFeature API mode, running ready with ``log``; NFD's labels on the node, GFD's only
    where ``labelled``."""
    labels: dict[str, Any] = {"feature.node.kubernetes.io/pci-10de.present": "true", "nvidia.com/gpu.product": None}
    if labelled:
        labels["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB"
    edits: list[dict[str, Any]] = [
        {"do": "node", "node": NODE, "labels": labels},
        {
            "do": "add-daemonset",
            "namespace": "nvidia-device-plugin",
            "name": "nvdp-gpu-feature-discovery",
            "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
            "labels": {"app.kubernetes.io/name": "gpu-feature-discovery"},
            "containers": ["gpu-feature-discovery-ctr"],
            "nodes": [NODE],
        },
        {
            "do": "pod",
            "daemonset": "nvdp-gpu-feature-discovery",
            "namespace": "nvidia-device-plugin",
            "node": NODE,
            "containers": [{"name": "gpu-feature-discovery-ctr", "ready": True, "state": {"running": True}}],
            "logs": {"gpu-feature-discovery-ctr": log},
        },
    ]
    return [lambda sim, e=e: ninth._apply(sim.cluster, e) for e in edits]


def _report(log: str, labelled: bool = False) -> Report:
    return diagnosed(SCENARIO, *_gfd(log, labelled))


def _gfd_root(report: Report) -> Any:
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR and f.node == NODE]
    assert root.link == "gfd"
    return root


@pytest.mark.parametrize(
    ("verb", "line"),
    [
        (
            "create",
            'failed to create NodeFeature object "nvidia-features-for-a100-node-7": ' + _forbidden("create", ""),
        ),
        ("get", "failed to get NodeFeature object: " + _forbidden("get", ' "nvidia-features-for-a100-node-7"')),
    ],
)
def test_a_refused_nodefeature_write_grants_the_accounts_missing_verb(verb: str, line: str) -> None:
    root = _gfd_root(_report(PREFIX + line + "\n"))
    assert root.action is not None and root.action.op is FixOp.CREATE
    role, binding = root.action.changes["items"]
    assert role["rules"] == [{"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeatures"], "verbs": [verb]}]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": ACCOUNT.rpartition(":")[2], "namespace": "nvidia-device-plugin"}
    ]
    assert f"the {verb} verb on nodefeatures.nfd.k8s-sigs.io" in root.fix and "delete pod nvdp-gpu-feature" in root.fix


def test_a_container_without_node_name_gets_node_name_from_the_downward_api() -> None:
    root = _gfd_root(_report(PREFIX + 'error: required flag "node-name" not set\n'))
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    assert root.action.target == "nvidia-device-plugin/nvdp-gpu-feature-discovery"
    (container,) = root.action.changes["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "gpu-feature-discovery-ctr"
    assert container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "create verb" in root.fix


def test_a_nodefeature_published_is_quiet() -> None:
    log = "I1103 10:20:30.000000       1 output.go:151] created NodeFeature object nvidia-features-for-a100-node-7\n"
    report = _report(log, labelled=True)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_the_refusal_reads_the_api_servers_words_escaped_or_not_at_either_scope() -> None:
    escaped = (
        'err="nodes \\"n1\\" is forbidden: User \\"system:serviceaccount:nfd:nfd-master\\" cannot patch resource '
        '\\"nodes\\" in API group \\"\\" at the cluster scope"'
    )
    found = refusal(escaped)
    assert found is not None and (found.verb, found.qualified, found.namespace) == ("patch", "nodes", "")
    assert found.account == ("nfd", "nfd-master")
    user = refusal('User "alice" cannot list resource "pods/log" in API group "" in the namespace "x"')
    assert user is not None and user.resource == "pods/log" and user.grant() is None
    assert refusal("failed to get NodeFeature object: connection refused") is None
