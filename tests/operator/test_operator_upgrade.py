"""Driver upgrades node by node within maxParallelUpgrades/maxUnavailable; a stuck node never wedges the rest."""

from __future__ import annotations

from fakes.operand_simulator import OperandSimulator
from operator_helpers import NS, converge, make_cluster

from gpuchain.kube import CLUSTER_POLICY, NODE, POD, MemoryCluster
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy
from gpuchain.operator.reconcile import reconcile
from gpuchain.operator.upgrade import (
    CORDON_REQUIRED,
    CORDONED_ANNOTATION,
    DONE,
    FAILED,
    IN_FLIGHT,
    MESSAGE_ANNOTATION,
    STATE_LABEL,
    UPGRADE_REQUIRED,
    NodeView,
    next_step,
    slots,
)

NEW = "580.65.06"


def gpu_pod(name: str, node: str, app: str = "train") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": {"app": app}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }


def _states(cluster: MemoryCluster) -> dict[str, str]:
    return {
        n["metadata"]["name"]: n["metadata"].get("labels", {}).get(STATE_LABEL, "")
        for n in cluster.list(NODE)
        if n["metadata"]["name"].startswith("gpu-")
    }


def _unschedulable(cluster: MemoryCluster) -> set[str]:
    return {n["metadata"]["name"] for n in cluster.list(NODE) if n.get("spec", {}).get("unschedulable")}


def _run_upgrade(
    cluster: MemoryCluster, sim: OperandSimulator, max_in_flight: int, passes: int = 60, max_unavailable: int = 1
) -> list[dict]:
    history = []
    for _ in range(passes):
        reconcile(cluster, name="cluster-policy", namespace=NS)
        assert len(_unschedulable(cluster)) <= max_unavailable, _states(cluster)
        sim.settle()
        states = _states(cluster)
        history.append(states)
        assert sum(1 for s in states.values() if s in IN_FLIGHT) <= max_in_flight, states
        if all(s in (DONE, FAILED) for s in states.values()):
            break
    return history


def test_upgrade_rolls_node_by_node_and_evicts_gpu_pods() -> None:
    cluster = make_cluster(gpu_nodes=4, cpu_nodes=0, spec={"driver": {"upgradePolicy": {"maxParallelUpgrades": 1}}})
    sim = OperandSimulator(cluster, NS)
    converge(cluster, sim)
    assert set(_states(cluster).values()) == {""}, "nothing to upgrade: no node labels written"
    for i in range(4):
        cluster.create(gpu_pod(f"job-{i}", f"gpu-{i}"))
    cluster.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"driver": {"version": NEW}}})
    history = _run_upgrade(cluster, sim, max_in_flight=1)
    assert set(history[-1].values()) == {DONE}
    started = [next(i for i, h in enumerate(history) if h[f"gpu-{n}"] == CORDON_REQUIRED) for n in range(4)]
    assert started == sorted(started) and len(set(started)) == 4, "one node at a time"
    for i in range(4):
        n = cluster.get(NODE, name=f"gpu-{i}")
        assert not n["spec"].get("unschedulable"), "uncordoned after validation"
        driver = cluster.get(POD, name=f"nvidia-driver-daemonset-gpu-{i}", namespace=NS)
        assert driver["spec"]["containers"][0]["image"].endswith(":" + NEW)
        assert cluster.get_or_none(POD, name=f"job-{i}", namespace="ml") is None, "GPU pods evicted before the restart"
    status = cluster.get(CLUSTER_POLICY, name="cluster-policy")["status"]
    assert status["driverUpgrades"]["nodes"] == {DONE: 4}
    assert status["state"] == "ready"


def test_upgrade_evicts_init_container_gpu_pods_and_leaves_other_nvidia_resources() -> None:
    cluster = make_cluster(gpu_nodes=1, cpu_nodes=0)
    sim = OperandSimulator(cluster, NS)
    converge(cluster, sim)
    init_only = gpu_pod("warmup", "gpu-0")
    init_only["spec"]["initContainers"] = init_only["spec"]["containers"]
    init_only["spec"]["containers"] = [{"name": "main", "image": "cuda"}]
    cluster.create(init_only)
    not_gpu = gpu_pod("nic", "gpu-0")
    not_gpu["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/hostdev": "1"}}
    cluster.create(not_gpu)
    cluster.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"driver": {"version": NEW}}})
    assert set(_run_upgrade(cluster, sim, max_in_flight=1)[-1].values()) == {DONE}
    assert cluster.get_or_none(POD, name="warmup", namespace="ml") is None, (
        "a GPU in an init container is still a GPU pod"
    )
    assert cluster.get_or_none(POD, name="nic", namespace="ml") is not None, "nvidia.com/hostdev is not a GPU"


def _blocked_cluster(max_unavailable: int | str) -> tuple[MemoryCluster, OperandSimulator]:
    """3 GPU nodes, one upgrade at a time; gpu-0 runs a pod whose PDB blocks its eviction."""
    upgrade = {"maxParallelUpgrades": 1, "maxUnavailable": max_unavailable, "podDeletion": {"timeoutSeconds": 0}}
    cluster = make_cluster(gpu_nodes=3, cpu_nodes=0, spec={"driver": {"upgradePolicy": upgrade}})
    sim = OperandSimulator(cluster, NS)
    converge(cluster, sim)
    cluster.create(gpu_pod("precious", "gpu-0", app="precious"))
    cluster.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "precious-pdb", "namespace": "ml"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "precious"}}},
        }
    )
    cluster.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"driver": {"version": NEW}}})
    return cluster, sim


def test_pdb_blocked_node_fails_without_wedging_the_rest() -> None:
    # The budget allows two unavailable nodes: the failed one and one upgrading.
    cluster, sim = _blocked_cluster(max_unavailable=2)
    history = _run_upgrade(cluster, sim, max_in_flight=1, max_unavailable=2)
    assert history[-1] == {"gpu-0": FAILED, "gpu-1": DONE, "gpu-2": DONE}
    stuck = cluster.get(NODE, name="gpu-0")
    assert "precious-pdb" in stuck["metadata"]["annotations"][MESSAGE_ANNOTATION]
    failed = [e for e in cluster.events_for(stuck) if e["reason"] == "DriverUpgradeFailed"]
    assert len(failed) == 1 and "precious-pdb" in failed[0]["message"]
    assert cluster.get_or_none(POD, name="precious", namespace="ml") is not None
    assert stuck["spec"]["unschedulable"] is True, "a failed node stays cordoned for a person to look at"


def _policy(**upgrade: object) -> ClusterPolicySpec:
    parsed = parse_policy({"driver": {"upgradePolicy": upgrade}})
    assert isinstance(parsed, ClusterPolicySpec)
    return parsed


def test_slots_respect_both_limits() -> None:
    assert slots(_policy(maxParallelUpgrades=4, maxUnavailable="25%"), gpu_nodes=8, in_flight=0) == 2
    assert slots(_policy(maxParallelUpgrades=1, maxUnavailable="50%"), gpu_nodes=8, in_flight=0) == 1
    assert slots(_policy(maxParallelUpgrades=0, maxUnavailable=3), gpu_nodes=8, in_flight=1) == 2
    assert slots(_policy(maxParallelUpgrades=2, maxUnavailable="10%"), gpu_nodes=4, in_flight=1) == 0


def test_next_step_is_pure_and_waits_for_a_slot() -> None:
    policy = _policy()
    node = NodeView(name="n", state=UPGRADE_REQUIRED, since=0.0, driver_image="img:old", driver_ready=True)
    assert next_step(node, target="img:new", policy=policy, now=1.0, may_start=False) is None
    step = next_step(node, target="img:new", policy=policy, now=1.0, may_start=True)
    assert step is not None and step.state == CORDON_REQUIRED
    current = NodeView(name="n", state="", since=0.0, driver_image="img:new", driver_ready=True)
    assert next_step(current, target="img:new", policy=policy, now=1.0, may_start=True) is None


def test_failed_node_counts_against_max_unavailable() -> None:
    # 3 nodes at 25%: one node may be unavailable. The failed node stays cordoned, so it uses it.
    cluster, sim = _blocked_cluster(max_unavailable="25%")
    history = _run_upgrade(cluster, sim, max_in_flight=1, passes=25, max_unavailable=1)
    assert history[-1] == {"gpu-0": FAILED, "gpu-1": UPGRADE_REQUIRED, "gpu-2": UPGRADE_REQUIRED}
    assert _unschedulable(cluster) == {"gpu-0"}
    status = cluster.get(CLUSTER_POLICY, name="cluster-policy")["status"]
    assert (
        "2 node(s) wait: 1 of 3 GPU nodes unavailable, maxUnavailable allows 1" in status["driverUpgrades"]["waiting"]
    )
    # Someone deals with the workload and retries the node: the rest follow within the budget.
    cluster.delete(POD, name="precious", namespace="ml")
    cluster.patch(NODE, name="gpu-0", patch={"metadata": {"labels": {STATE_LABEL: None}}})
    history = _run_upgrade(cluster, sim, max_in_flight=1, max_unavailable=1)
    assert set(history[-1].values()) == {DONE}
    assert _unschedulable(cluster) == set()


def test_unavailable_nodes_use_the_budget_and_are_not_counted_twice() -> None:
    policy = _policy(maxParallelUpgrades=0, maxUnavailable="25%")
    assert slots(policy, gpu_nodes=3, in_flight=0, unavailable=1) == 0, "a cordoned or NotReady node uses the budget"
    assert slots(policy, gpu_nodes=8, in_flight=1, unavailable=1) == 1, "an in-flight node counts once"
    assert slots(_policy(maxParallelUpgrades=1, maxUnavailable=3), gpu_nodes=8, in_flight=0, unavailable=1) == 1


def test_upgrade_leaves_an_admin_cordon_in_place() -> None:
    spec = {"driver": {"upgradePolicy": {"maxParallelUpgrades": 1, "maxUnavailable": 2}}}
    cluster = make_cluster(gpu_nodes=2, cpu_nodes=0, spec=spec)
    sim = OperandSimulator(cluster, NS)
    converge(cluster, sim)
    cluster.patch(NODE, name="gpu-0", patch={"spec": {"unschedulable": True}})
    cluster.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"driver": {"version": NEW}}})
    history = _run_upgrade(cluster, sim, max_in_flight=1, max_unavailable=2)
    assert history[-1] == {"gpu-0": DONE, "gpu-1": DONE}
    assert _unschedulable(cluster) == {"gpu-0"}, "the admin's cordon stays; the upgrade's own is lifted"
    for name in ("gpu-0", "gpu-1"):
        assert CORDONED_ANNOTATION not in cluster.get(NODE, name=name)["metadata"].get("annotations", {})
