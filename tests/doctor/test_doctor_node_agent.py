"""The doctor on gpuchain's default layout: the validator, device plugin, exporter, GFD and MIG manager
served as roles of one ``gpuchain-node-agent`` DaemonSet (`gpuchain.operator.operands.served_by`).

The clusters are the simulator's (policy ``nodeAgent.enabled``); the failures the simulator does not
tell (a crash-looping agent, a failing validation, a DaemonSet gone) are made by editing its objects
the way the kubelet and the API server would show them."""

from __future__ import annotations

import dataclasses
import importlib
import json

import pytest

from gpuchain.doctor import run_doctor
from gpuchain.doctor.model import Report, Severity
from gpuchain.doctor.snapshot import gather
from gpuchain.doctor.stacks import detect
from gpuchain.doctor.stacks.gpuchain import ROLE_LOGGERS
from gpuchain.kube import DAEMONSET, NODE, POD, MemoryCluster
from gpuchain.kube.objects import Obj, name_of
from gpuchain.operator.operands import AGENT_ROLES, AGENT_VALIDATIONS, NODE_AGENT, served_by
from gpuchain.operator.policy import parse_policy
from gpuchain.sim import build, parse_scenario
from gpuchain.sim.build import SimCluster

NS = "gpu-operator"
AGENT = """name: node-agent
policy: {nodeAgent: {enabled: true}}
nodes:
- name: gpu
  count: 2
"""


def agent_cluster(extra: str = "") -> SimCluster:
    return build(parse_scenario(AGENT + extra))


def agent_pod(cluster: MemoryCluster, node: str) -> Obj:
    return next(
        p
        for p in cluster.list(POD, namespace=NS)
        if name_of(p).startswith(NODE_AGENT.name) and p["spec"]["nodeName"] == node
    )


def doctor(sim: SimCluster) -> Report:
    return run_doctor(sim.cluster, reader=sim.read_log)


def errors(report: Report) -> list[tuple[str, str, str | None]]:
    return [(f.id, f.link, f.node) for f in report.findings if f.severity is Severity.ERROR]


def crash_loop(sim: SimCluster, node: str, log: str) -> str:
    """The agent's container on ``node`` crash-looping, its failed run's log ``log`` (a waiting
    container's current log is that run, as ``kubectl logs`` reads it)."""
    pod = agent_pod(sim.cluster, node)
    status = pod["status"]
    status["containerStatuses"] = [
        {
            "name": "node-agent",
            "ready": False,
            "restartCount": 12,
            "state": {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": "back-off 5m0s restarting failed container=node-agent",
                }
            },
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
        }
    ]
    status["conditions"] = [{"type": "Ready", "status": "False"}]
    sim.cluster.patch_status(POD, name=name_of(pod), status=status, namespace=NS)
    sim.cluster.set_logs(name_of(pod), namespace=NS, container="node-agent", text=log)
    return name_of(pod)


def test_a_healthy_cluster_in_the_node_agent_layout_has_no_error_and_maps_each_role_to_the_agent() -> None:
    sim = agent_cluster()
    report = doctor(sim)
    assert not [f for f in report.findings if f.severity is Severity.ERROR], [f.to_dict() for f in report.findings]
    stack = detect(gather(sim.cluster))
    policy = parse_policy({"nodeAgent": {"enabled": True}})
    assert not isinstance(policy, list)
    for operand in AGENT_ROLES:
        assert stack.ds(operand.state) == served_by(policy)[operand.state] == NODE_AGENT.name
        assert stack.container(operand.state) == "node-agent"
    assert stack.ds("driver") == "nvidia-driver-daemonset"
    pod = agent_pod(sim.cluster, "gpu-0")
    assert [c["name"] for c in pod["spec"]["initContainers"]] == [f"{v}-validation" for v in AGENT_VALIDATIONS]


def test_without_a_policy_the_layout_is_read_from_the_managed_daemonsets() -> None:
    agent = gather(agent_cluster().cluster)
    per_operand = gather(build(parse_scenario("name: per-operand\nnodes:\n- name: gpu\n")).cluster)
    for snap, plugin_ds in ((agent, NODE_AGENT.name), (per_operand, "nvidia-device-plugin-daemonset")):
        stack = detect(dataclasses.replace(snap, policies=[], absent=frozenset({"clusterpolicies"})))
        assert stack.ds("device-plugin") == plugin_ds
        assert stack.policy.node_agent.enabled is (plugin_ds == NODE_AGENT.name)


def log_line(fmt: str, level: str, logger: str, msg: str) -> str:
    """A line as the agent writes it (commands/_output: TextLogFormatter, JsonLogFormatter)."""
    if fmt == "json":
        return json.dumps({"ts": "2026-06-05T18:00:01.000Z", "level": level.lower(), "logger": logger, "msg": msg})
    return f"2026-06-05 18:00:01,000 {level} {logger}: {msg}"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_crash_looping_agent_is_the_lowest_served_link_down_quoting_that_roles_own_line(fmt: str) -> None:
    sim = agent_cluster()
    plugin_line = log_line(fmt, "ERROR", "gpuchain.deviceplugin", "cannot open /var/lib/kubelet/device-plugins")
    gfd_line = log_line(fmt, "ERROR", "gpuchain.discovery", "cannot write labels")
    start = log_line(fmt, "INFO", "gpuchain.node-agent", "starting")
    pod = crash_loop(sim, "gpu-1", f"{start}\n{plugin_line}\n{gfd_line}")
    report = doctor(sim)
    assert errors(report) == [("device-plugin.not-ready", "device-plugin", "gpu-1")]
    finding = next(f for f in report.findings if f.id == "device-plugin.not-ready")
    assert f"pod {pod}: CrashLoopBackOff (node-agent, 12 restarts)" in finding.evidence
    # The device plugin link quotes its own role's line, not the GFD role's (the later, last error).
    assert f"unrecognised: {plugin_line}" in finding.evidence
    assert not any(gfd_line in e for e in finding.evidence)
    node = next(n for n in report.to_dict()["nodes"] if n["node"] == "gpu-1")
    assert node["brokenLink"] == "device-plugin"
    assert {node["links"][link]["state"] for link in ("gfd", "exporter", "mig")} == {"not-reached"}
    # One pod failing is one failure (not one per role it serves), its last unknown line reported
    # under the role whose logger wrote it.
    unknown = [f for f in report.findings if f.id == "log.unrecognised"]
    assert [(f.link, f.node) for f in unknown] == [("gfd", "gpu-1")]
    assert f"unrecognised: {gfd_line}" in unknown[0].evidence


def test_a_failing_driver_validation_init_container_of_the_agent_is_the_driver_link() -> None:
    sim = agent_cluster()
    pod = agent_pod(sim.cluster, "gpu-1")
    status = pod["status"]
    status["phase"] = "Pending"
    status["initContainerStatuses"] = [
        {
            "name": "driver-validation",
            "ready": False,
            "restartCount": 9,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
        },
        *(
            {"name": f"{v}-validation", "ready": False, "state": {"waiting": {"reason": "PodInitializing"}}}
            for v in ("toolkit", "cuda")
        ),
    ]
    status["containerStatuses"] = [
        {"name": "node-agent", "ready": False, "state": {"waiting": {"reason": "PodInitializing"}}}
    ]
    status["conditions"] = [{"type": "Initialized", "status": "False"}, {"type": "Ready", "status": "False"}]
    sim.cluster.patch_status(POD, name=name_of(pod), status=status, namespace=NS)
    report = doctor(sim)
    assert errors(report) == [("driver.validation-failed", "driver", "gpu-1")]


def test_an_agent_waiting_in_driver_validation_on_a_node_without_a_driver_is_the_driver_link() -> None:
    sim = agent_cluster("- name: bare\n  optOut: [driver]\n")
    pod = agent_pod(sim.cluster, "bare")
    running = [c["name"] for c in pod["status"]["initContainerStatuses"] if "running" in c["state"]]
    assert running == ["driver-validation"]
    report = doctor(sim)
    assert errors(report) == [("driver.missing", "driver", "bare")]


def test_the_agent_daemonset_missing_is_the_device_plugin_link_not_deployed_naming_the_agent() -> None:
    sim = agent_cluster()
    for pod in sim.cluster.list(POD, namespace=NS):
        if name_of(pod).startswith(NODE_AGENT.name):
            sim.cluster.delete(POD, name=name_of(pod), namespace=NS)
    sim.cluster.delete(DAEMONSET, name=NODE_AGENT.name, namespace=NS)
    for node in sim.cluster.list(NODE):  # no device plugin ever announced the GPUs
        gpus = {
            k: {r: None for r in node["status"][k] if r.startswith("nvidia.com/")} for k in ("capacity", "allocatable")
        }
        sim.cluster.patch_status(NODE, name=name_of(node), status=gpus)
    report = doctor(sim)
    assert errors(report) == [
        ("operand.not-deployed", "device-plugin", "gpu-0"),
        ("operand.not-deployed", "device-plugin", "gpu-1"),
    ]
    assert f"DaemonSet {NS}/{NODE_AGENT.name} does not exist" in report.findings[0].evidence


def test_a_node_opted_out_of_the_node_agent_is_a_warning_not_a_missing_device_plugin() -> None:
    sim = agent_cluster("- name: skipped\n  optOut: [node-agent]\n")
    assert not [
        p
        for p in sim.cluster.list(POD, namespace=NS)
        if p["spec"]["nodeName"] == "skipped" and name_of(p).startswith(NODE_AGENT.name)
    ]
    report = doctor(sim)
    assert errors(report) == []
    opted = [f for f in report.findings if f.id == "node.opted-out"]
    assert [(f.node, f.link) for f in opted] == [("skipped", "node-agent")]
    assert "nvidia.com/gpu.deploy.node-agent=false" in opted[0].cause


@pytest.mark.parametrize(
    ("state", "module"),
    [
        ("operator-validation", "validator"),
        ("device-plugin", "device_plugin"),
        ("dcgm-exporter", "exporter"),
        ("gpu-feature-discovery", "gfd"),
        ("mig-manager", "mig_manager"),
    ],
)
def test_role_loggers_are_the_agent_roles_own(state: str, module: str) -> None:
    role = importlib.import_module(f"gpuchain.agent.roles.{module}")
    assert ROLE_LOGGERS[state] == role.log.name
    assert state in {op.state for op in AGENT_ROLES}
