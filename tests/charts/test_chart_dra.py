"""The chart's optional DRA part: DeviceClass, DRA plugin DaemonSet and its RBAC."""

from __future__ import annotations

import kubernetes_validate
import pytest
from cli_parse import container_env, parse
from helm_python.errors import HelmRenderError
from test_chart import CHART, render

from gpuchain.dra.kinds import DRIVER

ON = {"dra": {"enabled": True}}


def _dra_docs() -> list[dict]:  # type: ignore[type-arg]
    off = {(d["kind"], d["metadata"]["name"]) for d in render()}
    return [d for d in render(ON) if (d["kind"], d["metadata"]["name"]) not in off]


def test_off_by_default() -> None:
    assert not [d for d in render() if "dra" in d["metadata"]["name"] or d["kind"] == "DeviceClass"]


@pytest.mark.parametrize("version", ["1.34.0", "1.36.0"])
def test_enabled_manifests_validate(version: str) -> None:
    docs = _dra_docs()
    assert sorted(d["kind"] for d in docs) == sorted(
        ["DeviceClass", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"]
    )
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_rules_are_justified_and_narrow() -> None:
    lines = (CHART / "templates" / "dra-plugin.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("- apiGroups:"):
            assert lines[i - 1].strip().startswith("#"), f"rule at line {i + 1} has no justification comment"
    role = next(d for d in _dra_docs() if d["kind"] == "ClusterRole")
    grants = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert grants == {
        ("nodes", "get"),
        ("nodes", "watch"),  # the repair loop's quarantine list (tests/peers/test_agent_roles.py)
        ("nodes", "patch"),  # the GPUs whose MIG layout it owns, for the MIG manager (tests/dra/test_dra_mig_owner.py)
        ("resourceslices", "get"),
        ("resourceslices", "create"),
        ("resourceslices", "patch"),
        ("resourceclaims", "get"),
    }


def test_daemonset_runs_the_dra_plugin_with_the_kubelet_paths() -> None:
    ds = next(d for d in _dra_docs() if d["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    container = spec["containers"][0]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {
        "/var/lib/kubelet/plugins_registry",
        f"/var/lib/kubelet/plugins/{DRIVER}",
        "/var/run/cdi",
        "/run/gpuchain/nvml",  # the NVML release board (test_chart_nvml_release.py)
    }
    params = parse([*container["command"][1:], *container["args"]], container_env(container)).params
    assert (str(params["registry_dir"]), str(params["cdi_dir"])) == ("/var/lib/kubelet/plugins_registry", "/var/run/cdi")
    assert str(params["plugin_dir"]) == f"/var/lib/kubelet/plugins/{DRIVER}"


def _args(values: dict) -> list[str]:  # type: ignore[type-arg]
    ds = next(d for d in render(values) if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "gpuchain-dra-plugin")
    return list(ds["spec"]["template"]["spec"]["containers"][0]["args"])


def test_beside_the_device_plugin_only_labelled_nodes_are_dras() -> None:
    assert "--unlabelled-nodes=device-plugin" in _args(ON)


def test_every_gpu_node_is_dras_only_without_the_device_plugin() -> None:
    alone = {"dra": {"enabled": True, "nodes": "all"}, "devicePlugin": {"enabled": False}}
    assert "--unlabelled-nodes=dra" in _args(alone)


def test_the_chart_refuses_both_plugins_on_the_same_gpus() -> None:
    with pytest.raises(HelmRenderError, match=r"dra.nodes=all .* devicePlugin.enabled=true .* set devicePlugin"):
        render({"dra": {"enabled": True, "nodes": "all"}})
    with pytest.raises(HelmRenderError, match="dra.nodes=some: choose labelled"):
        render({"dra": {"enabled": True, "nodes": "some"}})


def test_device_taints_and_metrics_are_opt_in() -> None:
    assert not {"--device-taints"} & set(_args(ON))
    on = {"dra": {"enabled": True, "deviceTaints": True, "metricsPort": 9402}}
    assert {"--device-taints", "--metrics-port=9402"} <= set(_args(on))
    ds = next(d for d in render(on) if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "gpuchain-dra-plugin")
    assert ds["spec"]["template"]["spec"]["containers"][0]["ports"] == [{"name": "metrics", "containerPort": 9402}]
    kubernetes_validate.validate(ds, "1.34.0", strict=True)


def test_the_chart_refuses_the_nvidia_gpu_bridge_beside_the_device_plugin() -> None:
    """dra.extendedResource with the device plugin on: the plugin registers nvidia.com/gpu on the same
    nodes, so the chart names the setting and the way out instead of rendering both."""
    refused = r"dra.extendedResource=true .* devicePlugin.enabled=true .* set devicePlugin"
    with pytest.raises(HelmRenderError, match=refused):
        render({"dra": {"enabled": True, "extendedResource": True}})
    alone = render({"dra": {"enabled": True, "extendedResource": True}, "devicePlugin": {"enabled": False}})
    classes = {d["metadata"]["name"]: d for d in alone if d["kind"] == "DeviceClass"}
    assert sorted(classes) == ["gpu.gpuchain.io", "whole-gpu.gpuchain.io"]
    kubernetes_validate.validate(classes["whole-gpu.gpuchain.io"], "1.34.0", strict=True)
    plain = render({**ON, "devicePlugin": {"enabled": False}})
    assert not [d for d in plain if d["metadata"]["name"].startswith("whole-gpu")]
