"""The chart's optional remediation part: gpu-health DaemonSet, remediator Deployment, their RBAC."""

from __future__ import annotations

from pathlib import Path

import helm_python as helm
import kubernetes_validate
import pytest
from cli_parse import container_env, parse
from test_chart import CHART, VERSIONS, render

ON = {"remediation": {"enabled": True}}


def _named(docs: list[dict], kind: str, name: str) -> dict:  # type: ignore[type-arg]
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def test_off_by_default() -> None:
    assert not [d for d in render() if "remediator" in d["metadata"]["name"] or "gpu-health" in d["metadata"]["name"]]


@pytest.mark.parametrize("version", VERSIONS)
def test_enabled_manifests_validate(version: str) -> None:
    docs = render(ON)
    extra = sorted(d["kind"] for d in docs if d["metadata"]["name"] in ("gpuchain-remediator", "gpuchain-gpu-health"))
    assert extra == sorted(
        ["ServiceAccount"] * 2
        + ["ClusterRole"] * 2
        + ["ClusterRoleBinding"] * 2
        + ["Role", "RoleBinding", "DaemonSet", "Deployment"]
    )
    for doc in docs:
        if doc["kind"].startswith("ValidatingAdmissionPolicy") and version < "1.30":
            continue  # admissionregistration v1 policies exist from 1.30; the template renders only there
        if doc["kind"] != "ClusterPolicy":
            kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", ["v1.28.0", "v1.36.0"])
def test_lints_when_enabled(version: str) -> None:
    report = helm.lint(CHART, values=ON, kube_version=version, strict=True)
    assert report["errors"] == []


def test_every_rule_is_justified_and_matches_the_documented_permissions() -> None:
    lines = (CHART / "templates" / "remediation.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("- apiGroups:"):
            assert lines[i - 1].strip().startswith("#"), f"rule at line {i + 1} has no justification comment"
    docs = render(ON)

    def grants(kind: str, name: str) -> set[tuple[str, str]]:
        return {(r, v) for rule in _named(docs, kind, name)["rules"] for r in rule["resources"] for v in rule["verbs"]}

    assert grants("ClusterRole", "gpuchain-gpu-health") == {
        ("nodes", "get"),
        ("nodes", "patch"),
        ("nodes/status", "patch"),
        ("events", "create"),
    }
    assert grants("ClusterRole", "gpuchain-remediator") == {
        ("nodes", "list"),
        ("nodes", "patch"),
        ("pods", "list"),
        ("pods/eviction", "create"),
        ("poddisruptionbudgets", "list"),
        ("events", "create"),
        ("validatingadmissionpolicies", "get"),
        ("validatingadmissionpolicybindings", "get"),
    }
    assert grants("Role", "gpuchain-remediator") == {("configmaps", v) for v in ("get", "create", "patch")}
    docs_text = (Path(__file__).resolve().parents[2] / "docs" / "remediation.md").read_text()
    assert "poddisruptionbudgets `list`" in docs_text


@pytest.mark.parametrize(
    ("kind", "name", "param", "value"),
    [
        ("DaemonSet", "gpuchain-gpu-health", "repair", False),  # the repair loop is off unless asked for
        ("Deployment", "gpuchain-remediator", "namespace", "gpu-operator"),  # its status ConfigMap's
    ],
)
def test_containers_run_real_commands(kind: str, name: str, param: str, value: object) -> None:
    container = _named(render(ON), kind, name)["spec"]["template"]["spec"]["containers"][0]
    ctx = parse([*container["command"][1:], *container["args"]], container_env(container))
    assert ctx.command.name == container["command"][-1]
    assert ctx.params[param] == value
