"""The GPU Operator's ClusterPolicy read back from its operand DaemonSets, where a plain ``kubectl cluster-info dump``
lists no ClusterPolicy (`gpuchain.doctor.stacks.inferred_policy`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from gpuchain.doctor import diagnose
from gpuchain.doctor.context import index
from gpuchain.doctor.driver_running import running_driver
from gpuchain.doctor.dump import read_dump, write_dump
from gpuchain.doctor.links.common import DRIVER_VERSION
from gpuchain.doctor.model import Fix, FixOp, Severity
from gpuchain.doctor.stacks import detect
from gpuchain.doctor.stacks.gpu_operator import CONTAINERS, DAEMONSETS, UPGRADE_STATE
from gpuchain.doctor.stacks.inferred_policy import driver_version, infer_policy, split_image
from gpuchain.doctor.structs import Snapshot, Stack
from gpuchain.kube.objects import name_of
from gpuchain.sim import build, parse_scenario


def _plain_dump(tmp_path: Path, scenario: str) -> Snapshot:
    """The scenario's cluster as a plain kubectl dump reads back (no ClusterPolicy listing)."""
    write_dump(build(parse_scenario(scenario)).cluster, tmp_path, extras=False)
    snapshot = read_dump(tmp_path)
    assert "clusterpolicies" in snapshot.absent
    return snapshot


def _stack(tmp_path: Path, scenario: str) -> Stack:
    stack = detect(_plain_dump(tmp_path, scenario))
    assert stack is not None and stack.id == "gpu-operator"
    return stack


def _spec(stack: Stack) -> dict[str, Any]:
    return dict((stack.policy_obj or {}).get("spec") or {})


TWO_NODES = "nodes: [{name: a, preset: a100-80gb-x8}, {name: b, preset: a100-80gb-x8}]\n"


def test_every_operand_of_a_default_policy_reads_back_enabled(tmp_path: Path) -> None:
    stack = _stack(tmp_path, "name: plain\nstack: gpu-operator\n" + TWO_NODES)
    spec = _spec(stack)
    for key in ("driver", "toolkit", "devicePlugin", "dcgmExporter", "gfd", "migManager", "validator"):
        assert spec[key]["enabled"] is True, key
    assert spec["driver"]["repository"] == "nvcr.io/nvidia" and spec["driver"]["image"] == "driver"
    assert stack.policy.driver.version == spec["driver"]["version"] != ""
    assert stack.policy_name == "cluster-policy"
    assert any("read back from the operand DaemonSets" in n for n in stack.notes)
    assert any(line.startswith("driver image ") for line in stack.policy_inferred)
    patch = stack.render(Fix(FixOp.PATCH_POLICY, stack.policy_name, {"spec": {"driver": {"enabled": False}}}))
    assert patch.startswith("kubectl patch clusterpolicies.nvidia.com cluster-policy --type merge")
    assert "kubectl get clusterpolicies.nvidia.com names yours" in patch


def test_operands_the_policy_turned_off_read_back_off(tmp_path: Path) -> None:
    scenario = (
        "name: hostdriver\nstack: gpu-operator\nnamespace: gpu-ops\n"
        "policy: {driver: {enabled: false}, dcgmExporter: {enabled: false}, migManager: {enabled: false},"
        " mig: {strategy: mixed}}\n" + TWO_NODES
    )
    stack = _stack(tmp_path, scenario)
    spec = _spec(stack)
    assert stack.namespace == "gpu-ops"
    assert (spec["driver"]["enabled"], spec["dcgmExporter"]["enabled"], spec["migManager"]["enabled"]) == (
        False,
        False,
        False,
    )
    assert spec["devicePlugin"]["enabled"] and spec["toolkit"]["enabled"]
    assert not stack.policy.driver.enabled and stack.policy.mig.strategy == "mixed"
    assert "version" not in spec["driver"]


def test_pinned_versions_and_env_read_back(tmp_path: Path) -> None:
    scenario = (
        "name: pinned\nstack: gpu-operator\n"
        'policy: {driver: {version: "535.161.08"}, devicePlugin: {version: v0.15.1,'
        " env: [{name: PASS_DEVICE_SPECS, value: 'false'}]},"
        " validator: {cuda: {env: [{name: WITH_WORKLOAD, value: 'false'}]}}}\n" + TWO_NODES
    )
    stack = _stack(tmp_path, scenario)
    spec = _spec(stack)
    assert stack.policy.driver.version == "535.161.08"
    assert spec["devicePlugin"]["version"] == "v0.15.1"
    assert {"name": "PASS_DEVICE_SPECS", "value": "false"} in spec["devicePlugin"]["env"]
    assert spec["validator"]["cuda"]["env"] == [{"name": "WITH_WORKLOAD", "value": "false"}]


def test_a_healthy_plain_dump_says_nothing_wrong_and_that_the_policy_was_inferred(tmp_path: Path) -> None:
    snapshot = _plain_dump(tmp_path, "name: quiet\nstack: gpu-operator\nnamespace: nvidia-gpu-operator\n" + TWO_NODES)
    report = diagnose(snapshot)
    assert [f.id for f in report.findings if f.severity is Severity.ERROR] == []
    assert report.stack["policyInferred"]
    said = " ".join(report.not_judged)
    assert "read its switches back" in said and "gpu-cluster-policy" in said
    assert "driver.upgradePolicy" in said


def test_a_listed_policy_is_not_inferred(tmp_path: Path) -> None:
    write_dump(build(parse_scenario("name: listed\nstack: gpu-operator\n" + TWO_NODES)).cluster, tmp_path)
    stack = detect(read_dump(tmp_path))
    assert stack is not None and stack.policy_obj is not None and stack.policy_inferred == ()


@pytest.mark.parametrize(
    ("ref", "parts"),
    [
        ("nvcr.io/nvidia/driver:550.54.15-ubuntu22.04", ("nvcr.io/nvidia", "driver", "550.54.15-ubuntu22.04")),
        ("registry:5000/mirror/k8s-device-plugin:v0.17.0", ("registry:5000/mirror", "k8s-device-plugin", "v0.17.0")),
        ("nvcr.io/nvidia/gpu-operator@sha256:abc", ("nvcr.io/nvidia", "gpu-operator", "sha256:abc")),
        ("registry:5000/driver", ("registry:5000", "driver", "")),
    ],
)
def test_image_references_split_as_the_operator_joins_them(ref: str, parts: tuple[str, str, str]) -> None:
    assert split_image(ref) == parts


def test_driver_tags_give_the_policy_version() -> None:
    assert driver_version("550.54.15-ubuntu22.04", precompiled=False) == "550.54.15"
    assert driver_version("535.104.05-rhcos4.14", precompiled=False) == "535.104.05"
    assert driver_version("550-5.15.0-1041-azure-ubuntu22.04", precompiled=True) == "550"


def _ds(name: str, containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers, "initContainers": init or []}
    return {"metadata": {"name": name, "namespace": "gpu-operator"}, "spec": {"template": {"spec": spec}}}


def _snapshot(daemonsets: list[dict[str, Any]]) -> Snapshot:
    return Snapshot(
        namespace="",
        policies=[],
        nodes=[],
        pods=[],
        daemonsets=daemonsets,
        configmaps=[],
        runtime_classes=[],
        events=[],
        absent=frozenset({"clusterpolicies"}),
    )


def test_nvidia_rendered_daemonsets_read_back() -> None:
    """DaemonSets shaped as NVIDIA's operator renders them (precompiled driver, CDI, validator plugin env)."""
    snapshot = _snapshot(
        [
            _ds(
                "nvidia-driver-daemonset-5.15.0-1041-azure-ubuntu22.04",
                [{"name": "nvidia-driver-ctr", "image": "nvcr.io/nvidia/driver:550-5.15.0-1041-azure-ubuntu22.04"}],
            ),
            _ds(
                "nvidia-container-toolkit-daemonset",
                [
                    {
                        "name": "nvidia-container-toolkit-ctr",
                        "image": "nvcr.io/nvidia/k8s/container-toolkit:v1.17.4-ubuntu20.04",
                        "env": [
                            {"name": "RUNTIME", "value": "containerd"},
                            {"name": "CDI_ENABLED", "value": "true"},
                            {"name": "CONTAINERD_SET_AS_DEFAULT", "value": "false"},
                        ],
                    }
                ],
            ),
            _ds(
                "nvidia-operator-validator",
                [{"name": "nvidia-operator-validator", "image": "nvcr.io/nvidia/gpu-operator:v24.9.2"}],
                [
                    {
                        "name": "plugin-validation",
                        "env": [
                            {"name": "COMPONENT", "value": "plugin"},
                            {"name": "WITH_WORKLOAD", "value": "false"},
                            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        ],
                    }
                ],
            ),
        ]
    )
    found = infer_policy(snapshot, "gpu-operator", DAEMONSETS, CONTAINERS, {"nvidia-driver-daemonset-": "driver"})
    assert found is not None
    spec = found[0]["spec"]
    assert spec["driver"]["version"] == "550" and spec["driver"]["usePrecompiled"] is True
    assert spec["cdi"] == {"enabled": True} and spec["operator"]["defaultRuntime"] == "containerd"
    assert spec["toolkit"]["env"] == [{"name": "CONTAINERD_SET_AS_DEFAULT", "value": "false"}]
    assert spec["validator"]["plugin"]["env"] == [{"name": "WITH_WORKLOAD", "value": "false"}]
    assert (spec["devicePlugin"]["enabled"], spec["gfd"]["enabled"]) == (False, False)


def test_nothing_to_read_leaves_the_policy_unknown() -> None:
    assert infer_policy(_snapshot([]), "gpu-operator", DAEMONSETS, CONTAINERS, {}) is None


def test_a_skew_is_not_judged_against_a_policy_read_from_the_same_daemonsets(tmp_path: Path) -> None:
    """Two of three driver pods run another release than the DaemonSet's template: a listed policy naming the
    template's version would be patched to the majority's; a policy read back from that template is no user's pin."""
    write_dump(
        build(parse_scenario("name: skew\nstack: gpu-operator\nnodes: [{name: g, count: 3}]\n")).cluster,
        tmp_path,
        extras=False,
    )
    pods_file = tmp_path / "gpu-operator" / "pods.json"
    pods = json.loads(pods_file.read_text())
    drivers = [p for p in pods["items"] if p["metadata"]["name"].startswith("nvidia-driver-daemonset")]
    moved = {p["spec"]["nodeName"] for p in drivers[:2]}
    for pod in drivers[:2]:
        pod["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/driver:535.161.08-ubuntu22.04"
    pods_file.write_text(json.dumps(pods))
    nodes_file = tmp_path / "nodes.json"
    nodes = json.loads(nodes_file.read_text())
    for node in nodes["items"]:
        labels = node["metadata"]["labels"]
        labels[DRIVER_VERSION] = "535.161.08" if node["metadata"]["name"] in moved else "550.90.07"
    nodes_file.write_text(json.dumps(nodes))
    report = diagnose(read_dump(tmp_path))
    skew = [f for f in report.findings if f.id == "driver.version-skew"]
    assert skew, report.ids
    assert all(f.action is None or f.action.op is not FixOp.PATCH_POLICY for f in skew)


def test_a_failed_driver_upgrade_is_named_without_the_upgrade_policy(tmp_path: Path) -> None:
    """The upgrade state label exists only while autoUpgrade is on: a node left upgrade-failed that no pod holds is
    named from a plain dump, whose policy read back from the DaemonSets has no upgradePolicy."""
    write_dump(build(parse_scenario("name: upg\nstack: gpu-operator\n" + TWO_NODES)).cluster, tmp_path, extras=False)
    nodes_file = tmp_path / "nodes.json"
    nodes = json.loads(nodes_file.read_text())
    nodes["items"][0]["metadata"]["labels"][UPGRADE_STATE] = "upgrade-failed"
    nodes_file.write_text(json.dumps(nodes))
    report = diagnose(read_dump(tmp_path))
    assert [(f.id, f.node) for f in report.findings if f.severity is Severity.ERROR] == [("driver.upgrade-failed", "a")]


def test_an_operator_before_its_validator_is_found_by_the_daemonsets_only_it_renders() -> None:
    """Before v1.5.0 the operator ran no validator DaemonSet and its operands lived in gpu-operator-resources: a plain
    dump's driver and toolkit DaemonSets name the stack and the namespace its policy is read back from."""
    old = "gpu-operator-resources"
    sets = [
        _ds("nvidia-driver-daemonset", [{"name": "nvidia-driver-ctr", "image": "nvcr.io/nvidia/driver:450.80.02"}]),
        _ds("nvidia-container-toolkit-daemonset", [{"name": "nvidia-container-toolkit-ctr", "image": "x/tk:1.4.0"}]),
    ]
    for ds in sets:
        ds["metadata"]["namespace"] = old
    stack = detect(_snapshot(sets))
    assert stack is not None and (stack.id, stack.namespace) == ("gpu-operator", old)
    assert stack.policy.driver.version == "450.80.02" and not stack.policy.device_plugin.enabled


#: What TransformToolkit sets beside CDI_ENABLED: up to v25.3.x the annotation prefixes, and the mode cdi only for
#: cdi.default (object_controls.go@v25.3.4); from v25.10.0 the mode cdi for every CDI policy, with
#: NVIDIA_RUNTIME_SET_AS_DEFAULT=false (transformToolkitCtrForCDI@v25.10.0), cdi.default being gone.
PREFIXES = {"NVIDIA_CONTAINER_RUNTIME_MODES_CDI_ANNOTATION_PREFIXES": "nvidia.cdi.k8s.io/"}
NOT_DEFAULT = {"NVIDIA_RUNTIME_SET_AS_DEFAULT": "false"}


@pytest.mark.parametrize(
    ("mode", "beside", "default"),
    [("cdi", PREFIXES, True), ("legacy", PREFIXES, None), (None, PREFIXES, None), ("cdi", NOT_DEFAULT, None)],
)
def test_cdi_default_reads_back_from_the_runtime_mode_the_operator_sets_only_for_it(
    mode: str | None, beside: dict[str, str], default: bool | None
) -> None:
    env = [{"name": "CDI_ENABLED", "value": "true"}, *({"name": k, "value": v} for k, v in beside.items())]
    if mode is not None:
        env.append({"name": "NVIDIA_CONTAINER_RUNTIME_MODE", "value": mode})
    toolkit = [
        {"name": "nvidia-container-toolkit-ctr", "image": "nvcr.io/nvidia/k8s/container-toolkit:v1.18.0", "env": env}
    ]
    found = infer_policy(
        _snapshot([_ds("nvidia-container-toolkit-daemonset", toolkit)]), "gpu-operator", DAEMONSETS, CONTAINERS, {}
    )
    assert found is not None
    assert found[0]["spec"]["cdi"].get("default") is default


@pytest.mark.parametrize("listed", [True, False])
def test_the_driver_release_of_a_read_back_policy_is_said_to_come_from_the_daemonset_image(
    tmp_path: Path, listed: bool
) -> None:
    """With no driver pod on the node to read, the release comes from the policy: a listed one's spec.driver.version,
    or, read back, the driver DaemonSet's image, which the evidence must say rather than name a policy field."""
    write_dump(build(parse_scenario("name: said\nstack: gpu-operator\n" + TWO_NODES)).cluster, tmp_path, extras=listed)
    snapshot = read_dump(tmp_path)
    pods = [p for p in snapshot.pods if not name_of(p).startswith(DAEMONSETS["driver"])]
    ctx = index(dataclasses.replace(snapshot, pods=pods))
    found = running_driver(ctx, ctx.views[0])
    assert found is not None and found.release == ctx.policy.driver.version
    if listed:
        assert found.said_by.startswith(f"spec.driver.version {found.release} of ")
    else:
        assert (
            found.said_by
            == f"driver version {found.release} read back from the nvidia-driver-daemonset DaemonSet's image"
        )
