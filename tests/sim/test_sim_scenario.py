"""Scenario files: strict, with errors that name file, line and field; every built-in one builds."""

from __future__ import annotations

import pytest

from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.kube import CONFIGMAP, DAEMONSET, EVENT, NODE, POD
from gpuchain.sim import build, load_scenario, parse_scenario, scenario_names
from gpuchain.sim.chain import CONFIG_MISSING, HOST_CONFLICT, KERNEL_MISMATCH, LINK_PAUSED, OK, RUNTIME_MISSING
from gpuchain.sim.shapes import RUNTIME_ERROR


def test_every_builtin_scenario_builds_with_the_catalogue() -> None:
    names = scenario_names()
    for required in (
        "healthy",
        "friday-scale-out",
        "leftover-time-slicing",
        "mig-56",
        "gpu-fell-off-bus",
        "host-driver-conflict",
        "driver-version-skew",
        "runtime-not-configured",
        "opted-out",
        "mig-stuck-pending",
        "config-label-missing",
    ):
        assert required in names
    for name in names:
        sim = build(load_scenario(name))
        assert sim.cluster.count(NODE) == sim.scenario.node_count
        assert sim.cluster.calls.total == 0


def test_unknown_field_names_file_line_and_field() -> None:
    text = "name: x\nnodes:\n  - name: gpu\n    kernal: 6.8.0\n"
    with pytest.raises(ConfigFileError) as err:
        parse_scenario(text, "bad.yaml")
    assert str(err.value).startswith("bad.yaml:4: nodes.0.kernal: unknown field")


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ("nodes:\n  - name: gpu\n    preset: b300-x8\n", "nodes.0.preset", "unknown preset"),
        ("nodes:\n  - name: gpu\n    mig: {config: all-9g.99gb}\n", "nodes.0.mig.config", "unknown MIG layout"),
        ("nodes:\n  - name: gpu\n    optOut: [drivers]\n", "nodes.0.optOut", "not an operand"),
        ("nodes:\n  - name: Gpu_1\n", "nodes.0.name", "DNS name"),
        ("nodes: []\n", "nodes", "at least 1"),
        ("policy: {mig: {strategy: both}}\nnodes:\n  - name: gpu\n", "policy", "not one of"),
    ],
)
def test_bad_values_are_refused_with_the_field(body: str, field: str, reason: str) -> None:
    with pytest.raises(ConfigFileError) as err:
        parse_scenario("name: x\n" + body, "s.yaml")
    assert err.value.field == field
    assert reason in err.value.reason


def test_duplicate_node_names_and_unknown_workload_nodes_are_refused() -> None:
    with pytest.raises(ConfigFileError, match="repeated: gpu-1"):
        parse_scenario("name: x\nnodes:\n  - {name: gpu, count: 2}\n  - {name: gpu-1}\n")
    with pytest.raises(ConfigFileError, match="do not exist: gpu-9"):
        parse_scenario("name: x\nnodes:\n  - {name: gpu}\nworkloads:\n  - {name: w, node: gpu-9}\n")


def test_unknown_scenario_name_lists_the_builtin_ones() -> None:
    with pytest.raises(ConfigFileError, match="friday-scale-out"):
        load_scenario("no-such-scenario")


def test_friday_new_kernel_crashloops_the_driver_and_blocks_the_chain_above() -> None:
    sim = build(load_scenario("friday-scale-out"))
    new, old = sim.plan("gpu-new-0"), sim.plan("gpu-old-0")
    assert (old.driver, old.plugin, old.capacity) == (OK, OK, {"nvidia.com/gpu": 8})
    assert new.driver == KERNEL_MISMATCH and new.capacity == {}
    driver_pod = next(
        p for p in sim.cluster.list(POD, field_selector="spec.nodeName=gpu-new-0") if "driver" in p["metadata"]["name"]
    )
    cs = driver_pod["status"]["containerStatuses"][0]
    assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert "6.8.0-51-generic" in cs["lastState"]["terminated"]["message"]
    node = sim.cluster.get(NODE, name="gpu-new-0")
    assert node["status"]["nodeInfo"]["kernelVersion"] == "6.8.0-51-generic"
    assert "nvidia.com/gpu" not in node["status"]["capacity"]
    pending = [p for p in sim.cluster.list(POD, namespace="default") if p["status"]["phase"] == "Pending"]
    assert len(pending) == 8
    assert "12 Insufficient nvidia.com/gpu" in pending[0]["status"]["conditions"][0]["message"]


def test_counts_come_from_the_device_plugin_and_gfd_code() -> None:
    ts = build(load_scenario("leftover-time-slicing"))
    assert ts.plan("gpu-2").capacity == {"nvidia.com/gpu": 16}
    labels = ts.cluster.get(NODE, name="gpu-2")["metadata"]["labels"]
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.replicas"]) == ("8", "2")
    assert ts.cluster.get(CONFIGMAP, name="device-plugin-config", namespace="gpu-operator")["data"]["shared-2"]
    mig = build(load_scenario("mig-56"))
    assert mig.plan("gpu-mig").capacity == {"nvidia.com/mig-1g.10gb": 56}
    lost = build(load_scenario("gpu-fell-off-bus"))
    assert (lost.plan("gpu-17").capacity, lost.plan("gpu-17").allocatable) == (
        {"nvidia.com/gpu": 8},
        {"nvidia.com/gpu": 7},
    )
    # No component writes an Event naming the GPU behind an XID: the evidence is the device
    # plugin's log line (k8s-device-plugin internal/rm/health.go) and gpu-health's Node condition.
    assert not [e for e in lost.cluster.list(EVENT) if e["reason"] == "XidCriticalError"]
    plugin = next(
        p
        for p in lost.cluster.list(POD, namespace="gpu-operator")
        if p["spec"].get("nodeName") == "gpu-17" and p["metadata"]["name"].startswith("nvidia-device-plugin")
    )
    log = lost.cluster.logs(plugin["metadata"]["name"], namespace="gpu-operator", container="device-plugin")
    assert "XidCriticalError: Xid=79 on Device=GPU-" in log and "marking device as unhealthy." in log


def test_each_fault_lands_on_its_link() -> None:
    assert build(load_scenario("host-driver-conflict")).plan("gpu-cloud-0").driver == HOST_CONFLICT
    rt = build(load_scenario("runtime-not-configured"))
    assert rt.plan("gpu-1").toolkit == RUNTIME_MISSING
    sandbox = [e for e in rt.cluster.list(EVENT, namespace="gpu-operator") if e["reason"] == "FailedCreatePodSandBox"]
    assert sandbox and all(RUNTIME_ERROR in e["message"] for e in sandbox)
    assert build(load_scenario("config-label-missing")).plan("gpu-1").plugin == CONFIG_MISSING
    pending = build(load_scenario("mig-stuck-pending"))
    assert pending.plan("gpu-1").plugin == LINK_PAUSED
    labels = pending.cluster.get(NODE, name="gpu-1")["metadata"]["labels"]
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "paused-for-mig-change"
    opted = build(load_scenario("opted-out"))
    assert not [p for p in opted.cluster.list(POD, field_selector="spec.nodeName=gpu-3")]


def test_daemonsets_are_the_operators_own_with_status_from_their_pods() -> None:
    sim = build(load_scenario("friday-scale-out"))
    ds = sim.cluster.get(DAEMONSET, name="nvidia-driver-daemonset", namespace="gpu-operator")
    assert ds["spec"]["updateStrategy"]["type"] == "OnDelete"  # rendered by gpuchain.operator.operands
    assert (ds["status"]["desiredNumberScheduled"], ds["status"]["numberReady"]) == (12, 4)


def test_a_thousand_nodes_build_synthetically() -> None:
    text = "name: big\nnodes:\n  - {name: gpu, count: 1000}\n"
    sim = build(parse_scenario(text))
    assert sim.cluster.count(NODE) == 1000
    assert len(sim.cluster.list(POD)) == 1000 * 7  # seven operands on each H100 node


@pytest.mark.parametrize(
    ("stack", "preset", "machine"),
    [
        ("gke", "t4-x4", "n1-standard-32"),
        ("eks", "t4-x4", "g4dn.12xlarge"),
        ("aks", "h100-80gb-x8", "Standard_ND96isr_H100_v5"),
    ],
)
def test_a_cloud_gpu_node_is_labelled_with_the_machine_type_that_holds_its_gpus(
    stack: str, preset: str, machine: str
) -> None:
    """Four T4s are no eight-H100 machine: the doctor reads a node's GPU count from its machine type."""
    sim = build(parse_scenario(f"name: m\nstack: {stack}\nnodes:\n  - {{name: n, preset: {preset}}}\n", "inline"))
    labels = sim.cluster.get(NODE, name="n")["metadata"]["labels"]
    assert labels["node.kubernetes.io/instance-type"] == machine
    if stack == "gke":
        assert labels["cloud.google.com/gke-accelerator"] == "nvidia-tesla-t4"
        assert labels["cloud.google.com/gke-accelerator-count"] == "4"
