"""Every manifest the operator renders passes kubernetes-validate (strict) for 1.28 and 1.36;
ClusterPolicies validate against the CRD's own openAPIV3Schema."""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from cli_parse import container_env, parse
from fakes.cluster_policy import cluster_policy
from operator_helpers import PER_OPERAND

from gpuchain.operator.crd import crd
from gpuchain.operator.desired import desired
from gpuchain.operator.operands import Facts
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy

VERSIONS = ("1.28.0", "1.36.0")
SPECS: list[dict[str, Any]] = [
    {},
    {"driver": {"enabled": False}, "toolkit": {"enabled": False}},
    {
        "devicePlugin": {"config": {"name": "dp-config", "default": "default"}},
        "migManager": {"config": {"name": "mig-parted-config", "default": "all-balanced"}},
        "daemonsets": {"updateStrategy": "OnDelete", "labels": {"team": "ml"}, "annotations": {"a": "b"}},
        "gfd": {"env": [{"name": "GFD_SLEEP_INTERVAL", "value": "30s"}]},
    },
    {"daemonsets": {"rollingUpdate": {"maxUnavailable": "20%"}}, "mig": {"strategy": "none"}},
]


def _policy(spec: dict[str, Any]) -> ClusterPolicySpec:
    """``spec`` in the per-operand layout (each operand's own DaemonSet is under test here)."""
    parsed = parse_policy({**PER_OPERAND, **spec})
    assert isinstance(parsed, ClusterPolicySpec), parsed
    return parsed


@pytest.mark.parametrize("layout", [{}, {"nodeAgent": {"enabled": True}}], ids=["per-operand", "node-agent"])
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("spec", SPECS)
def test_operands_validate(spec: dict[str, Any], version: str, layout: dict[str, Any]) -> None:
    policy = _policy({**spec, **layout})
    objs = desired(
        policy,
        Facts(
            namespace="gpu-operator", policy_name="cluster-policy", policy_uid="0c1f4c1a-0000-4000-8000-000000000001"
        ),
    )
    assert objs
    for obj in objs:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_crd_validates(version: str) -> None:
    kubernetes_validate.validate(crd(), version, strict=True)


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("spec", SPECS)
def test_cluster_policies_match_crd_schema(spec: dict[str, Any]) -> None:
    jsonschema.validate(cluster_policy("cluster-policy", spec), _schema())


def test_crd_schema_rejects_what_the_operator_rejects() -> None:
    with pytest.raises(jsonschema.ValidationError, match="balanced"):
        jsonschema.validate(cluster_policy("p", {"mig": {"strategy": "balanced"}}), _schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(cluster_policy("p", {"driver": {"enabled": "yes"}}), _schema())


def test_crd_shape() -> None:
    spec = crd()["spec"]
    assert spec["group"] == "gpuchain.io" and spec["scope"] == "Cluster"
    assert spec["versions"][0]["subresources"] == {"status": {}}
    props = spec["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    for key in (
        "driver",
        "toolkit",
        "devicePlugin",
        "dcgmExporter",
        "gfd",
        "migManager",
        "mig",
        "validator",
        "daemonsets",
    ):
        assert key in props
    assert props["devicePlugin"]["properties"]["config"]["properties"].keys() == {"name", "default"}


def test_validator_ready_files_and_wait_init_containers() -> None:
    objs = {o["metadata"]["name"]: o for o in desired(_policy({}), Facts(namespace="gpu-operator", policy_name="cp"))}
    validator = objs["nvidia-operator-validator"]["spec"]["template"]["spec"]
    assert [c["command"] for c in validator["initContainers"]] == [
        ["gpuchain", "validate", check] for check in ("driver", "toolkit", "cuda", "plugin")
    ]
    plugin = objs["nvidia-device-plugin-daemonset"]["spec"]["template"]["spec"]
    assert plugin["initContainers"][0]["command"] == ["gpuchain", "validate", "wait", "toolkit"]
    assert plugin["containers"][0]["command"] == ["gpuchain", "device-plugin"]
    assert plugin["runtimeClassName"] == "nvidia"
    driver = objs["nvidia-driver-daemonset"]["spec"]
    assert driver["updateStrategy"] == {"type": "OnDelete"}
    assert driver["template"]["spec"]["containers"][0]["image"].startswith("nvcr.io/nvidia/driver:")
    assert objs["nvidia"]["handler"] == "nvidia"


@pytest.mark.parametrize("spec", SPECS)
def test_every_mount_has_a_volume_and_every_volume_is_used(spec: dict[str, Any]) -> None:
    for obj in desired(_policy(spec), Facts(namespace="gpu-operator", policy_name="cp")):
        if obj["kind"] != "DaemonSet":
            continue
        pod = obj["spec"]["template"]["spec"]
        volumes = {v["name"] for v in pod["volumes"]}
        containers = [*pod.get("initContainers", []), *pod["containers"]]
        mounted = {m["name"] for c in containers for m in c.get("volumeMounts", [])}
        assert mounted == volumes, obj["metadata"]["name"]


def test_gpuchain_operand_commands_exist_with_their_arguments() -> None:
    """Each operand's command line parses (not ``--help``, which click answers before it converts
    a single value) and names the command the image runs."""
    spec = {"devicePlugin": {"config": {"name": "dp", "default": "ts"}}, "migManager": {"config": {"name": "mp"}}}
    seen = set()
    for obj in desired(_policy(spec), Facts(namespace="gpu-operator", policy_name="cp")):
        if obj["kind"] != "DaemonSet":
            continue
        pod = obj["spec"]["template"]["spec"]
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            cmd = c.get("command") or []
            if cmd[:1] != ["gpuchain"]:
                continue
            args = [a for a in c.get("args", [])]
            ctx = parse([*cmd[1:], *args], container_env(c))
            assert ctx.command.name in cmd[1:3], f"{cmd} {args}"
            seen.add(" ".join(cmd[:3]))
    assert {"gpuchain device-plugin", "gpuchain exporter", "gpuchain gfd", "gpuchain mig-manager"} <= seen
    assert {"gpuchain validate driver", "gpuchain validate plugin", "gpuchain validate wait"} <= seen


def _pods(spec: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """DaemonSet name -> pod spec for a policy."""
    objs = desired(_policy(spec or {}), Facts(namespace="gpu-operator", policy_name="cp"))
    return {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objs if o["kind"] == "DaemonSet"}


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


NVML_OPERANDS = (
    "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery",
    "nvidia-dcgm-exporter",
    "nvidia-mig-manager",
)


@pytest.mark.parametrize("name", NVML_OPERANDS)
def test_nvml_operands_override_the_images_void_devices(name: str) -> None:
    # The gpuchain image sets NVIDIA_VISIBLE_DEVICES=void: without an override NVML finds no GPU.
    pod = _pods()[name]
    env = _env(pod["containers"][0])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["containers"][0]["args"][:2] == ["--backend", "nvml"]


def test_validator_init_containers_get_gpus_and_only_the_driver_check_is_privileged() -> None:
    pod = _pods()["nvidia-operator-validator"]
    assert pod["runtimeClassName"] == "nvidia"
    inits = {c["name"]: c for c in pod["initContainers"]}
    for name, init in inits.items():
        env = _env(init)
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all", name
        caps = "compute,utility" if name == "cuda-validation" else "utility"
        assert env["NVIDIA_DRIVER_CAPABILITIES"] == caps, name
    # Privileged, the toolkit check would see the host's /dev/nvidia* without any runtime injecting it.
    assert inits["toolkit-validation"]["securityContext"] == {"privileged": False}
    assert inits["driver-validation"]["securityContext"] == {"privileged": True}
    assert not any(c["securityContext"]["privileged"] for n, c in inits.items() if n != "driver-validation")
    assert pod["containers"][0]["securityContext"] == {"privileged": False}, "the main container only sleeps"


def test_mig_manager_gets_the_default_layout_and_device_plugin_its_node() -> None:
    spec = {
        "devicePlugin": {"config": {"name": "dp", "default": "ts"}},
        "migManager": {"config": {"name": "mp", "default": "all-1g.10gb"}},
    }
    pods = _pods(spec)
    mig = _env(pods["nvidia-mig-manager"]["containers"][0])
    assert mig["DEFAULT_MIG_CONFIG"] == "all-1g.10gb"
    assert _env(_pods()["nvidia-mig-manager"]["containers"][0])["DEFAULT_MIG_CONFIG"] == "all-disabled"
    plugin = _env(pods["nvidia-device-plugin-daemonset"]["containers"][0])
    assert plugin["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert plugin["NODE_CONFIG_KEY"] == "ts", "the policy default stays the fallback"


def test_each_operand_has_its_own_service_account() -> None:
    objs = desired(_policy({"gfd": {"enabled": False}}), Facts(namespace="gpu-operator", policy_name="cp"))
    accounts = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}
    pods = {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objs if o["kind"] == "DaemonSet"}
    used = [p["serviceAccountName"] for p in pods.values()]
    assert sorted(used) == sorted(accounts) and len(set(used)) == len(pods) == 6, "one each, none shared"
    assert "gpuchain-gpu-feature-discovery" not in accounts, "no account for a disabled operand"
    no_api = {n for n, p in pods.items() if p.get("automountServiceAccountToken") is False}
    assert no_api == {"nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset", "nvidia-dcgm-exporter"}
