"""NVIDIA's ClusterPolicy schema and published policies against gpuchain's parser, CRD and renderer.

Fixtures: NVIDIA/gpu-operator at a22dbf6 (fixtures/SOURCES.md). Upstream outcomes asserted:
NVIDIA's operator accepts its own sample, chart default and OLM example; the sandbox operands
count only with sandboxWorkloads.enabled (controllers/state_manager.go isStateEnabled).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from operator_compat_helpers import FIXTURES, load, nvidia_spec_schema, published_policies, schema_paths
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.operator.compat import FEATURES, refusals
from gpuchain.operator.crd import crd
from gpuchain.operator.desired import desired
from gpuchain.operator.operands import Facts
from gpuchain.operator.policy import ClusterPolicySpec, drop_nulls, parse_policy

runner = CliRunner()


def our_spec_schema() -> dict[str, Any]:
    schema: dict[str, Any] = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def test_every_key_of_nvidias_schema_is_known_to_gpuchains_crd() -> None:
    nvidia = schema_paths(nvidia_spec_schema())
    ours = set(schema_paths(our_spec_schema()))
    assert len(nvidia) > 400, "the fixture is NVIDIA's full CRD"
    assert [p for p in nvidia if p not in ours] == []


#: Leaves whose free-form strings have a meaning: a value NVIDIA's operator would act on.
MEANINGFUL = {
    "imagePullPolicy": "IfNotPresent",
    "defaultRuntime": "containerd",
    "operator": "Exists",
    "effect": "NoExecute",
    "key": "nvidia.com/gpu",
    "value": "",
    "maxUnavailable": "1",
}


def _leaf_value(key: str, node: dict[str, Any]) -> Any:
    """A value NVIDIA's schema accepts for a leaf (the default, an enum value, or a plain one)."""
    if key in MEANINGFUL and node.get("type") == "string":
        return MEANINGFUL[key]
    if "default" in node:
        return node["default"]
    if "enum" in node:
        return node["enum"][0]
    if node.get("x-kubernetes-int-or-string"):
        return "1"
    return {"string": "x", "integer": 1, "boolean": False, "array": [], "object": {}}.get(node.get("type", ""), "x")


def _fill(node: dict[str, Any], key: str = "") -> Any:
    """An object that sets every property of NVIDIA's schema below ``node``."""
    props = node.get("properties")
    if props:
        return {k: _fill(v, k) for k, v in props.items()}
    items = node.get("items") or {}
    if node.get("type") == "array" and items.get("properties"):
        return [_fill(items)]
    return _leaf_value(key, node)


def test_a_policy_setting_every_nvidia_key_parses_every_key() -> None:
    # Every key set; with NVIDIA's defaults the features gpuchain refuses stay off, except where a
    # placeholder value turns them on - those must be refusals, never "unknown key".
    spec = _fill(nvidia_spec_schema())
    result = parse_policy(spec)
    assert isinstance(result, list)
    reasons = [str(p) for p in result]
    assert not [r for r in reasons if "unknown key" in r], reasons
    refused = {f.switch_key() for f in FEATURES if f.support == "refused"}
    image_keys = {f"{k}.image" for k in ("validator", "devicePlugin", "dcgmExporter", "gfd", "migManager")}
    assert {p.field for p in result} - refused - image_keys == set(), reasons
    assert "driver.licensingConfig.secretName" in {p.field for p in result}, "placeholders turn refused ones on"


@pytest.mark.parametrize("name", ["sample", "helm-default", "olm-example"])
def test_nvidias_published_policies_fit_gpuchains_crd_schema(name: str) -> None:
    policy = published_policies()[name]
    # The API server prunes nulls before validating (validator.plugin: in the sample).
    ours = {**policy, "apiVersion": "gpuchain.io/v1", "spec": drop_nulls(policy["spec"])}
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    jsonschema.validate(ours, schema)


def test_nvidias_sample_renders_unchanged(tmp_path: Path) -> None:
    result = runner.invoke(app, ["operator", "render", "-f", str(FIXTURES / "v1_clusterpolicy.yaml")])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "DaemonSet"}
    # driver, toolkit, validator, device plugin, exporter, GFD and MIG manager are on in the sample:
    # gpuchain's default layout runs the last five as roles of its node agent.
    assert names == {"nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset", "gpuchain-node-agent"}
    agent = next(d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "gpuchain-node-agent")
    pod = agent["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[args.index("--roles") + 1] == "validator,device-plugin,exporter,gfd,mig-manager"
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["MIG_STRATEGY"] == "single"
    for init in pod["initContainers"]:
        assert {"name": "WITH_WORKLOAD", "value": "false"} not in init["env"], "validator.env goes to the main one"
    assert env["WITH_WORKLOAD"] == "false"
    for doc in docs:
        kubernetes_validate.validate(doc, "1.36.0", strict=True)


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        (lambda s: s["sandboxWorkloads"].update(enabled=True), "spec.sandboxWorkloads.enabled=true: sandbox"),
        (
            lambda s: s["sandboxWorkloads"].update(enabled=True),
            "spec.vgpuManager.enabled=true: vGPU manager is not supported by gpuchain",
        ),
        (lambda s: s["gds"].update(enabled=True), "spec.gds.enabled=true: GPUDirect Storage"),
        (lambda s: s["nodeStatusExporter"].update(enabled=True), "spec.nodeStatusExporter.enabled=true"),
        (lambda s: s["driver"].update(usePrecompiled=True), "spec.driver.usePrecompiled=true: precompiled"),
        (lambda s: s["driver"]["rdma"].update(enabled=True), "spec.driver.rdma.enabled=true: GPUDirect RDMA"),
        (
            lambda s: s["driver"]["repoConfig"].update(configMapName="repos"),
            "spec.driver.repoConfig.configMapName=repos",
        ),
        (lambda s: s["migManager"]["gpuClientsConfig"].update(name="c"), "spec.migManager.gpuClientsConfig.name=c"),
    ],
)
def test_features_gpuchain_lacks_are_refused_when_on(edit: Any, line: str) -> None:
    spec = copy.deepcopy(drop_nulls(load("v1_clusterpolicy.yaml")["spec"]))
    edit(spec)
    result = parse_policy(spec)
    assert isinstance(result, list)
    assert any(str(p).startswith(line) for p in result), [str(p) for p in result]


def test_sandbox_operands_are_inert_without_sandbox_workloads() -> None:
    # NVIDIA's sample sets vgpuManager, vgpuDeviceManager, vfioManager and sandboxDevicePlugin on
    # with sandboxWorkloads off: NVIDIA's operator deploys none of them, and gpuchain accepts it.
    spec = drop_nulls(load("v1_clusterpolicy.yaml")["spec"])
    assert spec["vgpuManager"]["enabled"] is True and spec["sandboxWorkloads"]["enabled"] is False
    policy = parse_policy(spec)
    assert isinstance(policy, ClusterPolicySpec)
    assert refusals(policy) == []


def test_harmless_keys_are_accepted() -> None:
    spec = {
        "psp": {"enabled": True},
        "driver": {"upgradePolicy": {"waitForCompletion": {"timeoutSeconds": 600, "podSelector": "app=train"}}},
        "dcgmExporter": {"config": {"name": "metrics"}, "serviceMonitor": {"enabled": True, "interval": "15s"}},
        "validator": {"plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "true"}]}},
        "dcgm": {"enabled": True},
        "operator": {"initContainer": {"image": "cuda"}, "use_ocp_driver_toolkit": True},
        "kataManager": {"enabled": True},
        "cdi": {"enabled": True, "default": True},
        "nodeAgent": {"enabled": False},  # each operand's own DaemonSet is looked at
    }
    policy = parse_policy(spec)
    assert isinstance(policy, ClusterPolicySpec), [str(p) for p in policy]  # type: ignore[union-attr]
    objs = desired(policy, Facts(namespace="gpu-operator", policy_name="cluster-policy"))
    exporter = next(o for o in objs if o["metadata"]["name"] == "nvidia-dcgm-exporter")
    ctr = exporter["spec"]["template"]["spec"]["containers"][0]
    assert ctr["args"][-2:] == ["--collectors", "/etc/dcgm-exporter/dcgm-metrics.csv"]
    vols = {v["name"]: v for v in exporter["spec"]["template"]["spec"]["volumes"]}
    assert vols["metrics-config"]["configMap"]["name"] == "metrics"
    validator = next(o for o in objs if o["metadata"]["name"] == "nvidia-operator-validator")
    plugin_check = next(
        c for c in validator["spec"]["template"]["spec"]["initContainers"] if c["name"] == "plugin-validation"
    )
    assert {"name": "WITH_WORKLOAD", "value": "true"} in plugin_check["env"]


def test_nvidias_chart_default_is_refused_only_for_nvidias_operand_images_and_pod_label() -> None:
    # The chart's policy names NVIDIA's images for the operands gpuchain runs from its own image,
    # and sets the pod label app.kubernetes.io/managed-by that gpuchain finds its pods by;
    # everything else in it is accepted. `operator import` converts it (test_operator_compat_import).
    result = parse_policy(drop_nulls(load("helm-default-clusterpolicy.yaml")["spec"]))
    assert isinstance(result, list)
    assert sorted(p.field for p in result) == [
        "daemonsets.labels",
        "dcgmExporter.image",
        "devicePlugin.image",
        "gfd.image",
        "migManager.image",
        "validator.image",
    ]
