"""The issue's done-when on a simulated cluster: MemoryCluster + one SimBackend and publisher per node."""

from __future__ import annotations

import asyncio
import json
import time

from gpuchain.kube.kinds import CONFIGMAP, EVENT, NODE, POD
from gpuchain.remediation.controller import STATUS_NAME, Remediator
from gpuchain.remediation.decide import DEFAULT_NAMESPACE, HoldReason
from gpuchain.remediation.model import TAINT_KEY
from gpuchain.sim.remediation import SimCluster, pdb_object, run_scenario


def pods(sim: SimCluster) -> set[str]:
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in sim.cluster.snapshot(POD)}


def taints(sim: SimCluster, node: str) -> list[dict[str, str]]:
    return list(sim.cluster.get(NODE, name=node)["spec"].get("taints") or [])


def status(sim: SimCluster) -> dict[str, str]:
    return dict(sim.cluster.get(CONFIGMAP, name=STATUS_NAME, namespace=DEFAULT_NAMESPACE)["data"])


def reasons(sim: SimCluster) -> list[str]:
    return sorted(e["reason"] for e in sim.cluster.snapshot(EVENT) if e["source"]["component"] == "gpuchain-remediator")


ALL = {"ml/train-0", "ml/train-1", "kube-system/gpu-burn-check", "ml/infer-0"}


def test_xid79_evicts_exactly_the_pods_on_that_gpu_and_taints_the_node() -> None:
    sim = run_scenario("xid79")
    report = Remediator(sim.cluster).run_once()
    assert pods(sim) == ALL - {"ml/train-0"}  # train-1 (GPU 1), infer-0 (node-1), kube-system stay
    assert taints(sim, "node-0") == [{"key": TAINT_KEY, "value": "reboot-node", "effect": "NoSchedule"}]
    assert taints(sim, "node-1") == []
    assert [(o.action.kind.value, o.result) for o in report.outcomes] == [("taint", "done"), ("evict", "done")]
    assert [(h.pod, h.why) for h in report.held] == [("kube-system/gpu-burn-check", HoldReason.PROTECTED_NAMESPACE)]
    assert reasons(sim) == ["GPUNodeTainted", "GPUWorkloadEvicted"]
    evicted = next(e for e in sim.cluster.snapshot(EVENT) if e["reason"] == "GPUWorkloadEvicted")
    assert evicted["involvedObject"]["name"] == "train-0" and "XID 79" in evicted["message"]
    assert status(sim)["breaker"] == "closed"


def test_rerunning_on_the_same_state_does_nothing_new() -> None:
    sim = run_scenario("xid79")
    Remediator(sim.cluster).run_once()
    sim.publish()  # the node republishes: the pod map no longer has train-0
    writes = sim.cluster.calls.writes
    report = Remediator(sim.cluster).run_once()
    assert report.outcomes == () and sim.cluster.calls.writes == writes


def test_pdb_that_forbids_eviction_leaves_the_pod_and_reports_it_once() -> None:
    sim = run_scenario("pdb")
    report = Remediator(sim.cluster).run_once()
    assert "ml/serve-0" in pods(sim) and "ml/train-0" not in pods(sim)
    held = [h for h in report.held if h.why is HoldReason.PDB]
    assert [(h.pod, h.pdb) for h in held] == [("ml/serve-0", "serve-pdb")]
    assert json.loads(status(sim)["blocked"]) == ["ml/serve-0"]
    Remediator(sim.cluster).run_once()
    blocked = [e for e in sim.cluster.snapshot(EVENT) if e["reason"] == "GPUEvictionBlocked"]
    assert len(blocked) == 1 and "serve-pdb" in blocked[0]["message"] and blocked[0]["type"] == "Warning"


def test_eviction_refused_at_apply_time_is_reported_as_blocked() -> None:
    """The budget changed between the read and the eviction: the Eviction API still says no."""
    sim = run_scenario("pdb")
    remediator = Remediator(sim.cluster)
    real_evict = sim.cluster.evict

    def evict_after_budget_tightens(name: str, namespace: str) -> None:
        sim.cluster.create(pdb_object("ml", name="train-pdb", match_labels={"app": "train"}, min_available=2))
        real_evict(name, namespace)

    sim.cluster.evict = evict_after_budget_tightens  # type: ignore[method-assign]
    report = remediator.run_once()
    evict = next(o for o in report.outcomes if o.action.kind.value == "evict")
    assert evict.result == "blocked" and "train-pdb" in evict.detail
    assert "ml/train-0" in pods(sim)
    assert "ml/train-0" in json.loads(status(sim)["blocked"])
    blocked_events = [e for e in sim.cluster.snapshot(EVENT) if e["reason"] == "GPUEvictionBlocked"]
    assert {e["involvedObject"]["name"] for e in blocked_events} == {"train-0", "serve-0"}


def test_xid_storm_on_half_the_cluster_trips_the_breaker() -> None:
    sim = run_scenario("storm")
    report = Remediator(sim.cluster).run_once()
    assert report.breaker.tripped and report.outcomes == ()
    assert pods(sim) == ALL and taints(sim, "node-0") == [] and taints(sim, "node-1") == []
    data = status(sim)
    assert data["breaker"] == "open" and json.loads(data["affectedNodes"]) == ["node-0", "node-1"]
    assert "paused" in data["message"]
    assert reasons(sim) == ["RemediationPaused"]
    Remediator(sim.cluster).run_once()
    assert reasons(sim) == ["RemediationPaused"]  # said once, not every pass


def test_breaker_closes_when_the_storm_ages_out_of_the_window() -> None:
    sim = run_scenario("storm")
    Remediator(sim.cluster).run_once()
    for node in ("node-0", "node-1"):
        sim.backends[node].recover_gpu(0)
    sim.publish()
    still = Remediator(sim.cluster).run_once()
    assert still.breaker.tripped  # recovered, but within the window
    later = Remediator(sim.cluster, clock=lambda: time.time() + 3600).run_once()
    assert not later.breaker.tripped and status(sim)["breaker"] == "closed"
    assert reasons(sim) == ["RemediationPaused", "RemediationResumed"]


def test_application_xid_does_nothing() -> None:
    sim = run_scenario("app-xid")
    report = Remediator(sim.cluster).run_once()
    assert report.outcomes == () and report.held == () and report.unhealthy == ()
    assert pods(sim) == ALL and taints(sim, "node-0") == []
    assert reasons(sim) == []


def test_dry_run_reports_and_writes_nothing() -> None:
    sim = run_scenario("xid79")
    writes = sim.cluster.calls.writes
    report = Remediator(sim.cluster, dry_run=True).run_once()
    assert [(o.action.kind.value, o.action.pod, o.result) for o in report.outcomes] == [
        ("taint", None, "would"),
        ("evict", "ml/train-0", "would"),
    ]
    assert sim.cluster.calls.writes == writes and pods(sim) == ALL
    assert report.to_dict()["dryRun"] is True


def test_recovery_lifts_the_taint() -> None:
    sim = run_scenario("xid79")
    Remediator(sim.cluster).run_once()
    sim.backends["node-0"].recover_gpu(0)
    sim.publish()
    report = Remediator(sim.cluster).run_once()
    assert [o.action.kind.value for o in report.outcomes] == ["untaint"]
    assert taints(sim, "node-0") == []


async def test_continuous_mode_acts_on_a_fault_that_appears_later() -> None:
    sim = run_scenario("healthy")
    stop = asyncio.Event()
    task = asyncio.create_task(Remediator(sim.cluster).run(interval=0.05, stop=stop))
    try:
        await asyncio.sleep(0.1)
        assert pods(sim) == ALL
        sim.backends["node-0"].inject_xid(1, xid=48)
        sim.publish()
        deadline = time.monotonic() + 5
        while "ml/train-1" in pods(sim):
            assert time.monotonic() < deadline, "train-1 never evicted"
            await asyncio.sleep(0.02)
        assert pods(sim) == ALL - {"ml/train-1"}
    finally:
        stop.set()
        await task


def test_a_quiet_pass_costs_two_reads_and_no_writes() -> None:
    sim = run_scenario("healthy")
    Remediator(sim.cluster).run_once()  # creates the status ConfigMap
    sim.cluster.calls.reset()
    Remediator(sim.cluster).run_once()
    assert sim.cluster.calls.snapshot() == {"list": 1, "get": 1}


def test_pdb_with_replicas_on_healthy_nodes_lets_the_pod_on_the_dead_gpu_go() -> None:
    """Issue 15 defect 2: the budget counts all three replicas (two healthy elsewhere), so it
    allows one disruption; predicted from node-0's pods alone it would hold serve-0 forever."""
    sim = run_scenario("pdb-spread")
    report = Remediator(sim.cluster).run_once()
    assert "ml/serve-0" not in pods(sim) and {"ml/serve-1", "ml/serve-2"} <= pods(sim)
    assert not [h for h in report.held if h.why is HoldReason.PDB]
    evicted = {o.action.pod for o in report.outcomes if o.action.kind.value == "evict" and o.result == "done"}
    assert evicted == {"ml/train-0", "ml/serve-0"}


def test_pdb_spread_dry_run_predicts_the_eviction_too() -> None:
    sim = run_scenario("pdb-spread")
    report = Remediator(sim.cluster, dry_run=True).run_once()
    assert {o.action.pod for o in report.outcomes if o.action.kind.value == "evict"} == {"ml/train-0", "ml/serve-0"}
    assert "ml/serve-0" in pods(sim)


def test_without_the_admission_policy_nothing_is_done_on_any_nodes_word() -> None:
    """Issue 15 defect 7: GPU health anyone could have written is not acted on."""
    from gpuchain.remediation.admission import POLICY_NAME, VAP_BINDING

    sim = run_scenario("xid79")
    sim.cluster.delete(VAP_BINDING, name=POLICY_NAME)
    report = Remediator(sim.cluster).run_once()
    assert report.outcomes == () and pods(sim) == ALL and taints(sim, "node-0") == []
    assert {h.node for h in report.held} == {"node-0", "node-1", "node-2", "node-3"}
    assert {h.why for h in report.held} == {HoldReason.UNVERIFIED}
    assert "ValidatingAdmissionPolicyBinding gpuchain-gpu-health-writes is missing" in report.held[0].detail
    assert Remediator(sim.cluster, verify_node_writes=False).run_once().outcomes


def test_health_written_before_the_policy_was_bound_waits_for_a_fresh_publish() -> None:
    from gpuchain.remediation.admission import POLICY_NAME, VAP_BINDING

    sim = run_scenario("xid79")
    binding = sim.cluster.get(VAP_BINDING, name=POLICY_NAME)
    sim.cluster.delete(VAP_BINDING, name=POLICY_NAME)
    time.sleep(1.1)  # RFC 3339 stamps have whole seconds
    sim.cluster.create({k: v for k, v in binding.items() if k != "metadata"} | {"metadata": {"name": POLICY_NAME}})
    report = Remediator(sim.cluster).run_once()
    assert report.outcomes == () and "written before" in report.held[0].detail
    sim.publish()  # a resync within the heartbeat period writes nothing: still untrusted
    assert Remediator(sim.cluster).run_once().outcomes == ()
    for publisher in sim.publishers.values():
        publisher.heartbeat_s = 0  # the heartbeat period has passed
    sim.publish()
    assert Remediator(sim.cluster).run_once().outcomes
