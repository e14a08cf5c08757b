"""The Helm chart renders (helm-python-sdk), lints, and every manifest validates for 1.28 and 1.36."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml
from cli_parse import container_env, parse

from gpuchain.operator.crd import crd
from gpuchain.operator.desired import desired
from gpuchain.operator.operands import Facts
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy

CHART = Path(__file__).resolve().parents[2] / "charts" / "gpuchain"
VERSIONS = ("1.28.0", "1.36.0")


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    chart = helm.Chart.load(CHART)
    out = chart.render(values or {}, name="gpuchain", namespace="gpu-operator", is_install=True)
    docs: list[dict[str, Any]] = []
    for path, text in out.items():
        if path.endswith("NOTES.txt"):  # shown after install, not applied
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def notes(values: dict[str, Any] | None = None) -> str:
    """The text `helm install` prints after installing (templates/NOTES.txt)."""
    out = helm.Chart.load(CHART).render(values or {}, name="gpuchain", namespace="gpu-operator", is_install=True)
    return str(next(text for path, text in out.items() if path.endswith("NOTES.txt")))


def chart_crd() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "crds" / "clusterpolicies.gpuchain.io.yaml").read_text())
    return loaded


def policy_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == "ClusterPolicy")


#: The layouts of the gpuchain operands (values nodeAgent.enabled) with the ClusterRoles each renders:
#: the operator's, and the node agent's or one per operand that calls the API.
LAYOUTS = {"node-agent": ({}, 2), "per-operand": ({"nodeAgent": {"enabled": False}}, 5)}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("version", VERSIONS)
def test_rendered_manifests_validate(version: str, layout: str) -> None:
    values, roles = LAYOUTS[layout]
    docs = render(values)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "ClusterPolicy",
            *["ClusterRole"] * roles,
            *["ClusterRoleBinding"] * roles,
            "Deployment",
            "Role",
            "RoleBinding",
            "ServiceAccount",
            "ValidatingAdmissionPolicy",  # node agents write only their own node (node-agent-admission.yaml)
            "ValidatingAdmissionPolicyBinding",
        ]
    )
    for doc in docs:
        if doc["kind"].startswith("ValidatingAdmissionPolicy") and version < "1.30":
            continue  # admissionregistration v1 policies exist from 1.30; the template renders only there
        if doc["kind"] != "ClusterPolicy":
            kubernetes_validate.validate(doc, version, strict=True)
    kubernetes_validate.validate(chart_crd(), version, strict=True)


def test_crd_file_is_the_operators_crd() -> None:
    assert chart_crd() == crd(), (
        "regenerate with: gpuchain operator crd > charts/gpuchain/crds/clusterpolicies.gpuchain.io.yaml"
    )


def test_default_cluster_policy_matches_crd_and_operator() -> None:
    policy = policy_of(render())
    jsonschema.validate(policy, chart_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    parsed = parse_policy(policy["spec"])
    assert isinstance(parsed, ClusterPolicySpec), parsed
    assert parsed.device_plugin.image_ref() == "ghcr.io/gpuchain/gpuchain:0.1.0"
    assert parsed.driver.image_ref().startswith("nvcr.io/nvidia/driver:")


@pytest.mark.parametrize("key", ["driver", "toolkit", "validator", "devicePlugin", "dcgmExporter", "gfd", "migManager"])
def test_enabled_values_reach_the_operands(key: str) -> None:
    """Per operand (nodeAgent.enabled=false) each switch removes its DaemonSet and ServiceAccount
    (tests/charts/test_chart_node_agent.py: in the node agent, its role)."""
    per_operand = LAYOUTS["per-operand"][0]
    policy = policy_of(render({**per_operand, key: {"enabled": False}}))
    assert policy["spec"][key]["enabled"] is False
    parsed = parse_policy(policy["spec"])
    assert isinstance(parsed, ClusterPolicySpec)
    everything = parse_policy(policy_of(render(per_operand))["spec"])
    assert isinstance(everything, ClusterPolicySpec)
    for kind in ("DaemonSet", "ServiceAccount"):
        names = {
            o["metadata"]["name"]
            for o in desired(parsed, Facts(namespace="gpu-operator", policy_name="cluster-policy"))
            if o["kind"] == kind
        }
        full = {
            o["metadata"]["name"]
            for o in desired(everything, Facts(namespace="gpu-operator", policy_name="cluster-policy"))
            if o["kind"] == kind
        }
        assert len(full - names) == 1 and names < full, f"{key}.enabled=false removes exactly its {kind}"


def test_values_without_cluster_policy() -> None:
    assert not [d for d in render({"clusterPolicy": {"create": False}}) if d["kind"] == "ClusterPolicy"]


@pytest.mark.parametrize("version", ["v1.28.0", "v1.36.0"])
def test_chart_lints(version: str) -> None:
    report = helm.lint(CHART, kube_version=version, strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_every_rbac_rule_is_justified_and_narrow() -> None:
    text = (CHART / "templates" / "rbac.yaml").read_text()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("- apiGroups:"):
            assert lines[i - 1].strip().startswith("#"), f"rule at line {i + 1} has no justification comment"
    for doc in render():
        for rule in doc.get("rules", []):
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
    operator_rules = next(
        d for d in render() if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gpuchain-operator"
    )
    writes = {
        (r, v)
        for rule in operator_rules["rules"]
        for r in rule["resources"]
        for v in rule["verbs"]
        if v in {"create", "patch", "update", "delete"}
    }
    assert ("daemonsets", "delete") not in writes, "DaemonSet writes are confined to the release namespace"


def test_deployment_runs_a_real_command() -> None:
    dep = next(d for d in render() if d["kind"] == "Deployment")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["gpuchain", "operator", "run"]
    assert "--namespace=gpu-operator" in container["args"]
    assert re.fullmatch(r"ghcr\.io/gpuchain/gpuchain:\S+", container["image"])
    ctx = parse([*container["command"][1:], *container["args"]], container_env(container))
    assert (ctx.command.name, ctx.params["namespace"]) == ("run", "gpu-operator")
