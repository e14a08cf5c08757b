"""The node agent layout (values and ClusterPolicy ``nodeAgent.enabled``, the default): the chart's
ClusterPolicy, rendered by the operator, is one ``gpuchain node-agent`` DaemonSet whose roles follow
NVIDIA's per-operand switches, with the pod settings of those roles together and no more; the
exporter's Service keeps NVIDIA's name and selects it; ``nodeAgent.enabled=false`` is one
DaemonSet per operand, as before. Each container's command line is parsed as the image would run
it (typer down to ``node-agent``, then the agent's own parser), never ``--help``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from unittest import mock

import kubernetes_validate
import pytest
from cli_parse import container_env, parse
from test_chart import VERSIONS, policy_of, render

from gpuchain.agent.settings import DevicePluginSettings, ExporterSettings, GfdSettings, MigManagerSettings
from gpuchain.commands.node_agent import parser as agent_parser
from gpuchain.commands.node_agent import settings_of
from gpuchain.kube.selectors import match_label_selector_object
from gpuchain.operator.desired import daemonset, desired
from gpuchain.operator.operands import AGENT_ROLES, DCGM_EXPORTER, MIG_MANAGER, NODE_AGENT, OPERANDS, Facts
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy

NS = "gpu-operator"
#: values key -> the node agent's role (``--roles``) it switches
ROLES = {op.spec_key: role for op, role in AGENT_ROLES.items()}
OFF = {"enabled": False}
PER_OPERAND = {"nodeAgent": OFF}


def _policy(values: dict[str, Any]) -> ClusterPolicySpec:
    parsed = parse_policy(policy_of(render(values))["spec"])
    assert isinstance(parsed, ClusterPolicySpec), parsed
    return parsed


def _objects(values: dict[str, Any], mps: bool = False) -> list[dict[str, Any]]:
    return desired(_policy(values), Facts(namespace=NS, policy_name="cluster-policy", mps=mps))


def _daemonsets(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == "DaemonSet"}


def _agent_args(container: dict[str, Any]) -> Any:
    """The node agent's parsed flags, as its container would run it: the gpuchain CLI resolves the
    command, the agent's parser (flags and the environment variables it reads) converts the rest."""
    env = container_env(container)
    ctx = parse([*container["command"][1:], *container["args"]], env)
    assert ctx.command.name == "node-agent"
    with mock.patch.dict(os.environ, env):
        return agent_parser().parse_args(ctx.args)


def _roles(objs: list[dict[str, Any]]) -> list[str]:
    (container,) = _daemonsets(objs)[NODE_AGENT.name]["spec"]["template"]["spec"]["containers"]
    roles: list[str] = _agent_args(container).roles.split(",")
    return roles


@pytest.mark.parametrize("version", VERSIONS)
def test_the_default_is_one_node_agent_serving_every_switched_on_operand(version: str) -> None:
    objs = _objects({})
    assert set(_daemonsets(objs)) == {"nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset", NODE_AGENT.name}
    assert _roles(objs) == ["validator", "device-plugin", "exporter", "gfd", "mig-manager"]
    accounts = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}
    assert accounts == {"gpuchain-driver", "gpuchain-container-toolkit", "gpuchain-node-agent"}
    for obj in objs:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("key", list(ROLES))
def test_switching_an_operand_off_removes_its_role(key: str) -> None:
    objs = _objects({key: OFF})
    assert _roles(objs) == [role for k, role in ROLES.items() if k != key]
    assert not set(_daemonsets(objs)) & {op.name for op in AGENT_ROLES}, "no operand's own DaemonSet"
    services = [o for o in objs if o["kind"] == "Service"]
    assert bool(services) == (key != "dcgmExporter"), "the exporter's Service goes with its role"


def test_with_every_role_off_there_is_no_node_agent() -> None:
    objs = _objects(dict.fromkeys(ROLES, OFF))
    assert set(_daemonsets(objs)) == {"nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset"}
    assert "gpuchain-node-agent" not in {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_per_operand_switch_gives_one_daemonset_per_operand(version: str) -> None:
    policy = _policy(PER_OPERAND)
    objs = desired(policy, Facts(namespace=NS, policy_name="cluster-policy"))
    daemonsets = _daemonsets(objs)
    assert set(daemonsets) == {op.name for op in OPERANDS}
    for op in OPERANDS:
        assert daemonsets[op.name] == daemonset(
            policy, operand=op, facts=Facts(namespace=NS, policy_name="cluster-policy")
        ), op.name
    for obj in objs:
        kubernetes_validate.validate(obj, version, strict=True)
    (svc,) = [o for o in objs if o["kind"] == "Service"]
    assert svc["spec"]["selector"] == {"app": DCGM_EXPORTER.name}


@pytest.mark.parametrize("values", [{}, PER_OPERAND], ids=["node-agent", "per-operand"])
def test_the_exporter_service_keeps_nvidias_name_and_selects_the_pods_serving_the_metrics(
    values: dict[str, Any],
) -> None:
    objs = _objects(values)
    (svc,) = [o for o in objs if o["kind"] == "Service"]
    assert svc["metadata"]["name"] == "nvidia-dcgm-exporter"
    selector = {"matchLabels": svc["spec"]["selector"]}
    templates = {name: ds["spec"]["template"] for name, ds in _daemonsets(objs).items()}
    selected = [name for name, t in templates.items() if match_label_selector_object(selector, t["metadata"]["labels"])]
    assert selected == [NODE_AGENT.name if not values else DCGM_EXPORTER.name]
    ports = templates[selected[0]]["spec"]["containers"][0]["ports"]
    assert [p["containerPort"] for p in ports] == [svc["spec"]["ports"][0]["targetPort"]]


#: Sets of roles (values keys switched on) and policy settings that change what their pods need.
COMBOS: list[tuple[list[str], dict[str, Any], bool]] = [
    (list(ROLES), {}, False),
    (list(ROLES), {"devicePlugin": {"config": {"name": "dp", "default": "ts"}}}, True),  # MPS
    (["dcgmExporter"], {"dcgmExporter": {"hostPID": True, "config": {"name": "metrics"}}}, False),
    (["migManager"], {"migManager": {"config": {"name": "mig-parted", "default": "all-disabled"}}}, False),
    (["gfd", "dcgmExporter"], {"devicePlugin": {"config": {"name": "dp"}}}, False),
    (["validator"], {}, False),
]


@pytest.mark.parametrize(("on", "settings", "mps"), COMBOS)
def test_the_agent_pod_needs_what_its_roles_pods_need_together_and_no_more(
    on: list[str], settings: dict[str, Any], mps: bool
) -> None:
    values: dict[str, Any] = {key: OFF for key in ROLES if key not in on}
    for key, block in settings.items():
        values[key] = {**values.get(key, {}), **block}
    agent = _daemonsets(_objects(values, mps))[NODE_AGENT.name]["spec"]["template"]["spec"]
    alone = _daemonsets(_objects({**values, **PER_OPERAND}, mps))
    pods = [alone[op.name]["spec"]["template"]["spec"] for op in AGENT_ROLES if op.spec_key in on]
    (main,) = agent["containers"]
    own = [p["containers"][0] for p in pods]

    def union(entries: list[dict[str, Any]]) -> dict[str, Any]:
        return {e["name"]: e for e in entries}

    assert union(agent["volumes"]) == union([v for p in pods for v in p["volumes"]])
    assert union(main["volumeMounts"]) == union([m for c in own for m in c["volumeMounts"]])
    assert main["securityContext"]["privileged"] == any(c["securityContext"]["privileged"] for c in own)
    assert main["securityContext"]["privileged"] == bool({"devicePlugin", "migManager"} & set(on))
    assert agent.get("hostPID", False) == any(p.get("hostPID", False) for p in pods)
    assert (agent.get("automountServiceAccountToken") is not False) == any(
        p.get("automountServiceAccountToken") is not False for p in pods
    )
    assert agent["tolerations"] == pods[0]["tolerations"] and "nodeSelector" not in agent
    terms = agent["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    mig_only = any(e["key"] == "nvidia.com/mig.capable" for t in terms for e in t["matchExpressions"])
    assert mig_only == (on == ["migManager"]), "MIG-capable nodes only where the MIG manager is all it serves"
    # Env: every role's own variables, one NVML view for all (compute where the plugin runs MPS).
    env = container_env(main)
    for c in own:
        # CONFIG_FILE: the MIG manager's layouts, which the agent gets as --mig-config-file
        mine = {k: v for k, v in container_env(c).items() if not k.startswith("NVIDIA_") and k != "CONFIG_FILE"}
        assert mine.items() <= env.items()
    assert "CONFIG_FILE" not in env, "the node agent would read it as the device plugin's config"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    if {"gfd", "devicePlugin"} & set(on):  # the plugin's variable; GFD's own container has it as --mig-strategy
        assert env["MIG_STRATEGY"] == "single"
    else:
        assert "MIG_STRATEGY" not in env
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == ("compute,utility" if mps else "utility")
    # Init containers: the validator's driver, toolkit and CUDA checks (its plugin check is the
    # agent's validator role, once the agent's own device plugin serves); the MPS tmpfs mount.
    inits = [c["name"] for c in agent.get("initContainers", [])]
    expected = ["driver-validation", "toolkit-validation", "cuda-validation"] if "validator" in on else []
    assert inits == expected + (["mps-shm"] if mps else [])


def test_the_agent_is_given_each_roles_flags_and_settings() -> None:
    """The plugin's ConfigMap (for the plugin and GFD), the metrics ConfigMap and the MIG default
    reach the roles' settings through the agent's own parser."""
    values = {
        "devicePlugin": {"config": {"name": "dp", "default": "ts"}},
        "dcgmExporter": {"config": {"name": "metrics"}},
        "migManager": {"config": {"name": "mig-parted", "default": "all-balanced"}, "args": ["--evict"]},
    }
    (main,) = _daemonsets(_objects(values))[NODE_AGENT.name]["spec"]["template"]["spec"]["containers"]
    args = _agent_args(main)
    settings = settings_of(args)
    plugin, gfd, exporter, mig = (settings[r] for r in ("device-plugin", "gfd", "exporter", "mig-manager"))
    assert isinstance(plugin, DevicePluginSettings) and isinstance(gfd, GfdSettings)
    assert isinstance(exporter, ExporterSettings) and isinstance(mig, MigManagerSettings)
    assert args.backend == "nvml"
    assert plugin.config_dir == Path("/config") == gfd.config_dir
    assert plugin.config_key == "ts" == gfd.config_key
    assert exporter.collectors == Path("/etc/dcgm-exporter/dcgm-metrics.csv")
    assert (mig.default_config, mig.config_file, mig.evict) == ("all-balanced", "/mig-parted-config/config.yaml", True)


def test_resources_are_the_roles_requests_added_and_a_limit_only_where_every_role_has_one() -> None:
    res = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}
    values = {
        "validator": {"resources": {"requests": {"cpu": "0.01"}, "limits": {"memory": "128Mi", "cpu": "1"}}},
        "devicePlugin": {"resources": res},
        "dcgmExporter": {"resources": res},
        "gfd": {"resources": res},
        "migManager": {"resources": res},
    }
    (main,) = _daemonsets(_objects(values))[NODE_AGENT.name]["spec"]["template"]["spec"]["containers"]
    assert main["resources"] == {"requests": {"cpu": "210m", "memory": "256Mi"}, "limits": {"memory": "1152Mi"}}
    values["gfd"] = {"resources": {"requests": {"cpu": "50m"}}}  # GFD unlimited: so is the agent
    (main,) = _daemonsets(_objects(values))[NODE_AGENT.name]["spec"]["template"]["spec"]["containers"]
    assert main["resources"] == {"requests": {"cpu": "210m", "memory": "192Mi"}}


def test_roles_naming_different_images_are_refused_with_the_way_out() -> None:
    spec = policy_of(render({"gfd": {"version": "0.0.1"}}))["spec"]
    problems = parse_policy(spec)
    assert isinstance(problems, list)
    (problem,) = problems
    assert problem.field == "nodeAgent.enabled" and "nodeAgent.enabled=false" in problem.reason
    assert isinstance(parse_policy({**spec, **PER_OPERAND}), ClusterPolicySpec), "per operand each has its own"
    assert isinstance(parse_policy({**spec, "gfd": {**spec["gfd"], "enabled": False}}), ClusterPolicySpec)


def test_a_quantity_the_agent_cannot_add_is_named() -> None:
    problems = parse_policy({"gfd": {"resources": {"requests": {"memory": "1e9"}}}})
    assert isinstance(problems, list)
    assert [p.field for p in problems] == ["gfd.resources.requests.memory"]
    assert isinstance(
        parse_policy({**PER_OPERAND, "gfd": {"resources": {"requests": {"memory": "1e9"}}}}), ClusterPolicySpec
    )


def test_the_mig_manager_alone_keeps_to_mig_capable_nodes() -> None:
    """Covered by the union test too; here against the MIG manager's own DaemonSet's affinity."""
    values = {key: OFF for key in ROLES if key != "migManager"}
    agent = _daemonsets(_objects(values))[NODE_AGENT.name]["spec"]["template"]["spec"]["affinity"]
    own = _daemonsets(_objects({**values, **PER_OPERAND}))[MIG_MANAGER.name]["spec"]["template"]["spec"]["affinity"]

    def without_deploy_label(affinity: dict[str, Any]) -> list[list[dict[str, Any]]]:
        terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        return [[e for e in t["matchExpressions"] if not e["key"].startswith("nvidia.com/gpu.deploy.")] for t in terms]

    assert without_deploy_label(agent) == without_deploy_label(own)
