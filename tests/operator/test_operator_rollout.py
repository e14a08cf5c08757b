"""Ordered roll-out on a simulated cluster, status naming the broken link, idempotent reconcile."""

from __future__ import annotations

from fakes.operand_simulator import OperandSimulator
from operator_helpers import NS, converge, make_cluster, node

from gpuchain.kube import CLUSTER_POLICY, DAEMONSET, POD
from gpuchain.operator.operands import OPERANDS
from gpuchain.operator.reconcile import reconcile


def _status(cluster):  # type: ignore[no-untyped-def]
    return cluster.get(CLUSTER_POLICY, name="cluster-policy")["status"]


def _ready(status: dict, type_: str = "Ready") -> dict:
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_full_rollout_reaches_ready_and_writes_ready_files() -> None:
    cluster = make_cluster()
    sim = OperandSimulator(cluster, NS)
    result = converge(cluster, sim)
    assert result.state == "ready"
    status = _status(cluster)
    assert status["gpuNodes"] == 3
    assert {s["state"] for s in status["operands"].values()} == {"ready"}
    assert _ready(status)["reason"] == "Reconciled"
    for i in range(3):
        assert sim.files[f"gpu-{i}"] == {"driver", "toolkit", "cuda", "plugin"}
    assert "cpu-0" not in sim.files, "no operand pod lands on a CPU node"
    assert {d["metadata"]["name"] for d in cluster.list(DAEMONSET, namespace=NS)} == {o.name for o in OPERANDS}


def test_driver_crashloop_gates_later_links_and_status_names_it() -> None:
    cluster = make_cluster()
    sim = OperandSimulator(cluster, NS, crashloop={"gpu-1": {"nvidia-driver-daemonset"}})
    result = converge(cluster, sim)
    assert result.state == "notReady"
    status = _status(cluster)
    ops = status["operands"]
    assert ops["driver"]["reason"] == "CrashLoopBackOff"
    assert "gpu-1" in ops["driver"]["message"]
    for later in ("container-toolkit", "device-plugin", "gpu-feature-discovery", "dcgm-exporter"):
        assert ops[later]["state"] == "notReady"
        assert ops[later]["reason"] == "WaitingForDriver", later
    ready = _ready(status)
    assert ready["status"] == "False" and ready["reason"] == "OperandNotReady"
    assert ready["message"].startswith("driver not ready: CrashLoopBackOff")
    assert "container-toolkit" in ready["message"]
    # On the broken node nothing past the driver ran; the others are complete.
    assert sim.files["gpu-1"] == set()
    assert sim.files["gpu-0"] == {"driver", "toolkit", "cuda", "plugin"}
    toolkit = cluster.get(POD, name="nvidia-container-toolkit-daemonset-gpu-1", namespace=NS)
    assert toolkit["status"]["phase"] == "Pending"
    assert toolkit["status"]["initContainerStatuses"][0]["name"] == "driver-validation"
    assert not toolkit["status"]["initContainerStatuses"][0]["ready"]
    plugin = cluster.get(POD, name="nvidia-device-plugin-daemonset-gpu-1", namespace=NS)
    assert plugin["status"]["phase"] == "Pending", "device plugin gated until the toolkit link is ready"

    sim.crashloop.clear()
    assert converge(cluster, sim).state == "ready"
    assert sim.files["gpu-1"] == {"driver", "toolkit", "cuda", "plugin"}


def test_toolkit_failure_lets_driver_be_ready_and_gates_the_plugin() -> None:
    cluster = make_cluster(gpu_nodes=2)
    sim = OperandSimulator(cluster, NS, crashloop={"gpu-0": {"nvidia-container-toolkit-daemonset"}})
    converge(cluster, sim)
    ops = _status(cluster)["operands"]
    assert ops["driver"]["state"] == "ready"
    assert ops["container-toolkit"]["reason"] == "CrashLoopBackOff"
    assert ops["device-plugin"]["reason"] == "WaitingForContainerToolkit"
    assert sim.files["gpu-0"] == {"driver"}


def test_device_plugin_crashloop_is_the_root_and_the_validator_waits_for_it() -> None:
    cluster = make_cluster(gpu_nodes=2)
    sim = OperandSimulator(cluster, NS, crashloop={"gpu-1": {"nvidia-device-plugin-daemonset"}})
    assert converge(cluster, sim).state == "notReady"
    status = _status(cluster)
    ops = status["operands"]
    assert ops["device-plugin"]["reason"] == "CrashLoopBackOff"
    assert ops["operator-validation"]["reason"] == "WaitingForDevicePlugin"
    assert ops["operator-validation"]["message"].startswith("waiting for device-plugin (CrashLoopBackOff)")
    message = _ready(status)["message"]
    assert message.startswith("device-plugin not ready: CrashLoopBackOff"), message
    assert message.endswith("waiting behind it: operator-validation"), message
    assert list(ops) == [op.state for op in OPERANDS], "status keeps gpu-operator's order"
    assert sim.files["gpu-1"] == {"driver", "toolkit", "cuda"}


def test_status_is_computed_in_dependency_order() -> None:
    from gpuchain.operator.status import dependency_order

    order = [op.state for op in dependency_order(OPERANDS)]
    for op in OPERANDS:
        assert all(order.index(need) < order.index(op.state) for need in op.needs), op.state
    assert order.index("device-plugin") < order.index("operator-validation")


def test_noop_reconcile_makes_zero_writes() -> None:
    cluster = make_cluster()
    sim = OperandSimulator(cluster, NS)
    converge(cluster, sim)
    cluster.calls.reset()
    result = reconcile(cluster, name="cluster-policy", namespace=NS)
    assert result.changed == []
    assert cluster.calls.writes == 0
    # 9: the DeviceClasses are listed too while the device plugin is on (operator/dra.py)
    assert cluster.calls.total <= 9, cluster.calls.snapshot()


def test_first_reconcile_writes_per_operand_not_per_node() -> None:
    small, large = make_cluster(gpu_nodes=2), make_cluster(gpu_nodes=40)
    for c in (small, large):
        reconcile(c, name="cluster-policy", namespace=NS)
    assert small.calls.writes == large.calls.writes
    assert small.calls.writes <= 2 * len(OPERANDS) + 4, (
        "DaemonSets + their ServiceAccounts + RuntimeClass + exporter Service + status + Event"
    )


def test_preinstalled_driver_and_toolkit() -> None:
    cluster = make_cluster(spec={"driver": {"enabled": False}, "toolkit": {"enabled": False}})
    sim = OperandSimulator(cluster, NS, preinstalled=True)
    assert converge(cluster, sim).state == "ready"
    ops = _status(cluster)["operands"]
    assert ops["driver"]["state"] == ops["container-toolkit"]["state"] == "disabled"
    names = {d["metadata"]["name"] for d in cluster.list(DAEMONSET, namespace=NS)}
    assert "nvidia-driver-daemonset" not in names and "nvidia-container-toolkit-daemonset" not in names
    assert sim.files["gpu-0"] == {"driver", "toolkit", "cuda", "plugin"}


def test_disabling_an_operand_prunes_it() -> None:
    cluster = make_cluster()
    sim = OperandSimulator(cluster, NS)
    converge(cluster, sim)
    cluster.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"dcgmExporter": {"enabled": False}}})
    result = converge(cluster, sim)
    assert (
        "daemonset/nvidia-dcgm-exporter (deleted)" in " ".join(result.changed)
        or cluster.get_or_none(DAEMONSET, name="nvidia-dcgm-exporter", namespace=NS) is None
    )
    assert cluster.get_or_none(DAEMONSET, name="nvidia-dcgm-exporter", namespace=NS) is None
    assert _status(cluster)["operands"]["dcgm-exporter"]["state"] == "disabled"


def test_node_opt_outs_and_gpu_present_label() -> None:
    cluster = make_cluster(gpu_nodes=1, cpu_nodes=0)
    cluster.create(node("no-nfd", gpu=False, **{"nvidia.com/gpu.present": "true"}))
    cluster.create(node("opted-out", **{"nvidia.com/gpu.deploy.operands": "false"}))
    cluster.create(node("no-plugin", **{"nvidia.com/gpu.deploy.device-plugin": "false"}))
    cluster.create(node("mig", **{"nvidia.com/mig.capable": "true"}))
    sim = OperandSimulator(cluster, NS)
    converge(cluster, sim)
    pods = {p["metadata"]["name"] for p in cluster.list(POD, namespace=NS)}
    assert "nvidia-driver-daemonset-no-nfd" in pods
    assert not any(p.endswith("-opted-out") for p in pods)
    assert "nvidia-driver-daemonset-no-plugin" in pods and "nvidia-device-plugin-daemonset-no-plugin" not in pods
    assert "nvidia-mig-manager-mig" in pods and "nvidia-mig-manager-gpu-0" not in pods


def test_no_gpu_nodes_and_missing_nfd_are_named() -> None:
    cluster = make_cluster(gpu_nodes=0, cpu_nodes=2)
    reconcile(cluster, name="cluster-policy", namespace=NS)
    assert _ready(_status(cluster))["reason"] == "NoGPUNodes"
    bare = make_cluster(gpu_nodes=0, cpu_nodes=0)
    bare.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "plain"}})
    reconcile(bare, name="cluster-policy", namespace=NS)
    assert _ready(_status(bare))["reason"] == "NFDLabelsMissing"


def test_second_policy_is_ignored() -> None:
    cluster = make_cluster()
    cluster.create(
        {"apiVersion": "gpuchain.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "zz-extra"}, "spec": {}}
    )
    assert reconcile(cluster, name="zz-extra", namespace=NS).state == "ignored"
    assert cluster.get(CLUSTER_POLICY, name="zz-extra")["status"]["state"] == "ignored"


def test_ready_transitions_are_recorded_as_events() -> None:
    cluster = make_cluster(gpu_nodes=2)
    sim = OperandSimulator(cluster, NS, crashloop={"gpu-0": {"nvidia-driver-daemonset"}})
    converge(cluster, sim)
    policy = cluster.get(CLUSTER_POLICY, name="cluster-policy")
    warnings = [e for e in cluster.events_for(policy) if e["type"] == "Warning"]
    assert warnings and warnings[-1]["reason"] == "OperandNotReady"
    assert "driver not ready: CrashLoopBackOff" in warnings[-1]["message"]
    sim.crashloop.clear()
    converge(cluster, sim)
    events = cluster.events_for(policy)
    assert events[-1]["type"] == "Normal" and events[-1]["reason"] == "Reconciled"
    count = len(events)
    reconcile(cluster, name="cluster-policy", namespace=NS)
    assert len(cluster.events_for(policy)) == count, "no event without a transition"


def test_without_the_validator_operands_do_not_wait_for_ready_files() -> None:
    cluster = make_cluster(gpu_nodes=1, spec={"validator": {"enabled": False}})
    sim = OperandSimulator(cluster, NS)
    assert converge(cluster, sim).state == "ready"
    assert _status(cluster)["operands"]["operator-validation"]["state"] == "disabled"
    plugin = cluster.get(DAEMONSET, name="nvidia-device-plugin-daemonset", namespace=NS)
    assert "initContainers" not in plugin["spec"]["template"]["spec"]
