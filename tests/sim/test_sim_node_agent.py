"""The simulator's node agent layout (policy ``nodeAgent.enabled``, gpuchain's stack): the operator's own
``gpuchain-node-agent`` DaemonSet with a pod per GPU node whose validation init containers tell the lower
links' story; the per-operand layout stays every scenario's default."""

from __future__ import annotations

import pytest

from gpuchain.common.inputfile import ConfigFileError
from gpuchain.kube import DAEMONSET, EVENT, NODE, POD
from gpuchain.kube.kinds import CLUSTER_POLICY
from gpuchain.kube.objects import READY_TO_START, Obj, name_of
from gpuchain.operator.operands import NODE_AGENT
from gpuchain.sim import build, load_scenario, parse_scenario
from gpuchain.sim.shapes import RUNTIME_ERROR

AGENT = "name: node-agent\npolicy: {nodeAgent: {enabled: true}}\nnodes:\n- name: gpu\n  count: 2\n"


def agent_pods(pods: list[Obj]) -> dict[str, Obj]:
    return {p["spec"]["nodeName"]: p for p in pods if name_of(p).startswith(NODE_AGENT.name)}


def states(pod: Obj) -> list[tuple[str, str]]:
    status = pod["status"]
    return [
        (c["name"], next(iter(c["state"]))) for c in [*status["initContainerStatuses"], *status["containerStatuses"]]
    ]


def test_the_layout_renders_one_agent_daemonset_and_a_ready_pod_per_gpu_node() -> None:
    sim = build(parse_scenario(AGENT))
    assert sorted(name_of(d) for d in sim.cluster.list(DAEMONSET)) == [
        NODE_AGENT.name,
        "nvidia-container-toolkit-daemonset",
        "nvidia-driver-daemonset",
    ]
    pods = agent_pods(sim.cluster.list(POD))
    assert sorted(pods) == ["gpu-0", "gpu-1"]
    assert states(pods["gpu-0"]) == [
        ("driver-validation", "terminated"),
        ("toolkit-validation", "terminated"),
        ("cuda-validation", "terminated"),
        ("node-agent", "running"),
    ]
    agent_ds = sim.cluster.get(DAEMONSET, name=NODE_AGENT.name, namespace="gpu-operator")
    assert agent_ds["status"]["numberReady"] == 2
    # The policy's status reads each role from the agent's pods, as the operator's does.
    status = sim.cluster.list(CLUSTER_POLICY)[0]["status"]
    assert status["operands"]["device-plugin"]["ready"] == "2/2"
    assert status["state"] == "ready"


def test_existing_scenarios_keep_one_daemonset_per_operand() -> None:
    names = {name_of(d) for d in build(load_scenario("healthy")).cluster.list(DAEMONSET)}
    assert NODE_AGENT.name not in names
    assert "nvidia-device-plugin-daemonset" in names


def test_a_node_without_a_driver_holds_the_agent_in_driver_validation() -> None:
    sim = build(parse_scenario(AGENT + "- name: bare\n  optOut: [driver]\n"))
    pod = agent_pods(sim.cluster.list(POD))["bare"]
    assert pod["status"]["phase"] == "Pending"
    assert states(pod)[:2] == [("driver-validation", "running"), ("toolkit-validation", "waiting")]


def test_a_runtime_without_the_nvidia_handler_leaves_the_agent_without_a_sandbox_with_the_kubelets_event() -> None:
    """No sandbox: the kubelet's default waiting reason (PodInitializing, the agent having init containers) and
    PodReadyToStartContainers False (kubernetes pkg/kubelet/kubelet_pods.go, status/generate.go@v1.34.4)."""
    sim = build(parse_scenario(AGENT + "- name: plain\n  runtimeConfigured: false\n"))
    pod = agent_pods(sim.cluster.list(POD))["plain"]
    assert ("node-agent", "waiting") in states(pod)
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    assert {"type": READY_TO_START, "status": "False"}.items() <= next(
        c for c in pod["status"]["conditions"] if c["type"] == READY_TO_START
    ).items()
    said = [e["message"] for e in sim.cluster.list(EVENT) if e["involvedObject"]["name"] == name_of(pod)]
    assert any(RUNTIME_ERROR in m for m in said)


def test_the_node_agent_opt_out_label_keeps_the_agent_off_the_node() -> None:
    sim = build(parse_scenario(AGENT + "- name: skipped\n  optOut: [node-agent]\n"))
    assert "skipped" not in agent_pods(sim.cluster.list(POD))
    node = sim.cluster.get(NODE, name="skipped")
    assert node["metadata"]["labels"]["nvidia.com/gpu.deploy.node-agent"] == "false"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("stack: gpu-operator\npolicy: {nodeAgent: {enabled: true}}\nnodes:\n- name: gpu\n", "stack gpuchain"),
        ("policy: {nodeAgent: {enabled: true}, validator: {enabled: false}}\nnodes:\n- name: gpu\n", "validator"),
        ("nodes:\n- name: gpu\n  optOut: [node-agent]\n", "node agent layout"),
    ],
)
def test_the_layout_is_refused_where_it_is_not_simulated(body: str, reason: str) -> None:
    with pytest.raises(ConfigFileError) as err:
        parse_scenario("name: x\n" + body, "s.yaml")
    assert reason in err.value.reason


def test_a_role_failing_alone_is_refused_rather_than_rendered_as_a_crash() -> None:
    with pytest.raises(ConfigFileError, match="does not simulate a role failing alone"):
        build(parse_scenario(AGENT + "- name: down\n  exporterDown: true\n"))
