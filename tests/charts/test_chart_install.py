"""The chart as a person installs it: every optional part on and off, every object valid on the
Kubernetes versions gpuchain supports, `helm lint` clean, image settings and NOTES that hold.

Kubernetes 1.30 is the oldest release still in wide use with the chart's kubeVersion (>= 1.28);
1.36 the newest kubernetes-validate knows. DRA objects (resource.k8s.io/v1) exist from 1.34 on,
so the DRA combinations are validated on 1.34 and 1.36.
"""

from __future__ import annotations

from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
from test_chart import CHART, notes, policy_of, render

from gpuchain.operator.policy import ClusterPolicySpec, parse_policy

OPTIONAL: dict[str, dict[str, Any]] = {
    "defaults": {},
    "everything-off": {
        "clusterPolicy": {"create": False},
        "driver": {"enabled": False},
        "toolkit": {"enabled": False},
        "validator": {"enabled": False},
        "devicePlugin": {"enabled": False},
        "dcgmExporter": {"enabled": False},
        "gfd": {"enabled": False},
        "migManager": {"enabled": False},
    },
    "preinstalled-driver": {"driver": {"enabled": False}},
    "remediation": {"remediation": {"enabled": True, "dryRun": True}},
    "doctor-role": {"doctorRole": {"create": True}},
    "doctor-role-bound": {"doctorRole": {"create": True, "users": ["alice@example.com"], "groups": ["gpu-sre"]}},
    "private-registry": {
        "operator": {"repository": "registry.example.com/team", "version": "0.2.0", "imagePullSecrets": ["regcred"]},
        "logFormat": "json",
        "remediation": {"enabled": True},
    },
    "digest": {"operator": {"version": "sha256:" + "0" * 64}},
}
DRA = {
    "dra-only": {"dra": {"enabled": True}},
    "all-on": {**OPTIONAL["private-registry"], "dra": {"enabled": True}},
    "dra-mps": {"dra": {"enabled": True, "gpuShares": True, "mps": {"root": "/run/gpuchain/dra-mps"}}},
}


def _validate(docs: list[dict[str, Any]], version: str) -> None:
    for doc in docs:
        if doc["kind"] != "ClusterPolicy":
            kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", ["1.30.0", "1.36.0"])
@pytest.mark.parametrize("name", sorted(OPTIONAL))
def test_renders_and_validates_with_and_without_each_part(name: str, version: str) -> None:
    docs = render(OPTIONAL[name])
    assert docs
    _validate(docs, version)


@pytest.mark.parametrize("version", ["1.34.0", "1.36.0"])
@pytest.mark.parametrize("name", sorted(DRA))
def test_dra_combinations_validate(name: str, version: str) -> None:
    _validate(render(DRA[name]), version)


@pytest.mark.parametrize("name", sorted({**OPTIONAL, **DRA}))
def test_lint_is_clean_for_every_combination(name: str) -> None:
    report = helm.lint(CHART, values={**OPTIONAL, **DRA}[name], kube_version="v1.36.0", strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def _images(docs: list[dict[str, Any]]) -> set[str]:
    return {
        c["image"]
        for d in docs
        if d["kind"] in ("Deployment", "DaemonSet")
        for c in d["spec"]["template"]["spec"]["containers"]
    }


def test_one_setting_moves_every_gpuchain_image() -> None:
    docs = render(DRA["all-on"])
    assert _images(docs) == {"registry.example.com/team/gpuchain:0.2.0"}
    policy = parse_policy(policy_of(docs)["spec"])
    assert isinstance(policy, ClusterPolicySpec)
    for operand in (policy.validator, policy.device_plugin, policy.dcgm_exporter, policy.gfd, policy.mig_manager):
        assert operand.image_ref() == "registry.example.com/team/gpuchain:0.2.0"
        assert operand.image_pull_secrets == ["regcred"]
    assert policy.driver.image_pull_secrets == [], "NVIDIA's images keep their own pull secrets"
    assert policy.driver.image_ref().startswith("nvcr.io/nvidia/driver:"), "NVIDIA's images stay NVIDIA's"
    for d in docs:
        if d["kind"] in ("Deployment", "DaemonSet"):
            spec = d["spec"]["template"]["spec"]
            assert spec["imagePullSecrets"] == [{"name": "regcred"}], d["metadata"]["name"]
            env = {e["name"]: e.get("value") for e in spec["containers"][0].get("env", [])}
            assert env["GPUCHAIN_LOG_FORMAT"] == "json", d["metadata"]["name"]


def test_a_digest_is_pulled_by_digest() -> None:
    assert _images(render(OPTIONAL["digest"])) == {"ghcr.io/gpuchain/gpuchain@sha256:" + "0" * 64}


def test_doctor_role_is_opt_in_read_only_and_bound_only_when_asked() -> None:
    assert not [d for d in render() if d["metadata"]["name"] == "gpuchain-doctor"]
    alone = [d for d in render(OPTIONAL["doctor-role"]) if d["metadata"]["name"] == "gpuchain-doctor"]
    assert [d["kind"] for d in alone] == ["ClusterRole"]  # the stack it reads may be in any namespace
    for role in alone:
        for rule in role["rules"]:
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
    resources = {r for role in alone for rule in role["rules"] for r in rule["resources"]}
    assert {"nodes", "pods", "events", "daemonsets", "configmaps", "runtimeclasses", "pods/log"} <= resources
    assert {"replicationcontrollers", "services", "deployments", "replicasets", "nvidiadrivers"} <= resources  # dump
    assert "secrets" not in resources
    bound = [d for d in render(OPTIONAL["doctor-role-bound"]) if d["metadata"]["name"] == "gpuchain-doctor"]
    binding = next(d for d in bound if d["kind"] == "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "User", "name": "alice@example.com", "apiGroup": "rbac.authorization.k8s.io"},
        {"kind": "Group", "name": "gpu-sre", "apiGroup": "rbac.authorization.k8s.io"},
    ]
    lines = (CHART / "templates" / "doctor-rbac.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("- apiGroups:"):
            assert lines[i - 1].strip().startswith("#"), f"rule at line {i + 1} has no justification comment"


def test_notes_tell_the_next_steps() -> None:
    text = notes()
    assert "Image: ghcr.io/gpuchain/gpuchain:0.1.0" in text
    assert "kubectl gpuchain doctor" in text
    # beside NVIDIA's CRD, `clusterpolicy` resolves to gpuchain.io's (kubectl orders equal-priority
    # CRD groups by name): the notes name the group so the command is unambiguous
    assert "kubectl get clusterpolicies.gpuchain.io cluster-policy" in text
    assert "kubectl apply --server-side --force-conflicts -f charts/gpuchain/crds/" in text
    assert "570.124.06-<OS of your GPU nodes>" in text
    assert "pre-installed" not in text
    assert "must already be installed" in notes(OPTIONAL["preinstalled-driver"])
    assert "ClusterRole gpuchain-doctor" in notes(OPTIONAL["doctor-role"])


@pytest.mark.parametrize("version", ["1.30.0", "1.36.0"])
def test_crd_validates(version: str) -> None:
    from test_chart import chart_crd

    kubernetes_validate.validate(chart_crd(), version, strict=True)
