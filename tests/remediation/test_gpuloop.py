"""The per-GPU repair loop's pure rules (gpuloop), the remediator's taint rule on loop nodes, and the
agent against a MemoryCluster and a SimBackend: breaker, reboot request, restart resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuchain.gpu.errors import GpuError, NotReacquiredError
from gpuchain.gpu.quarantine import QUARANTINE_ANNOTATION, decode_quarantine
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.kinds import CONFIGMAP, NODE
from gpuchain.kube.memory import MemoryCluster
from gpuchain.remediation.controller import STATUS_NAME
from gpuchain.remediation.decide import ActionKind, HoldReason, Policy, decide
from gpuchain.remediation.gpuloop import (
    LOOP_ANNOTATION,
    REBOOT_ANNOTATION,
    GpuRecord,
    LoopPolicy,
    Stage,
    Work,
    advance,
    complete,
    decode_records,
    encode_records,
    loop_evidence,
    needs_repair,
)
from gpuchain.remediation.loopagent import GpuLoopAgent
from gpuchain.remediation.model import (
    CONDITION_TYPE,
    FAULTS_ANNOTATION,
    AnnotationError,
    Fault,
    encode_faults,
)
from gpuchain.sim.remediation import node_object

U = "GPU-aaaa"
DBE = Fault(uuid=U, gpu=U, xids=(48,), covers=(U,))
P = LoopPolicy()


def run(
    rec: GpuRecord,
    fault: Fault | None,
    *,
    pods: tuple[str, ...] = (),
    breaker: bool = False,
    boot: str = "b1",
    now: float = 100.0,
    reset_ok: bool = True,
    burn_ok: bool = True,
    policy: LoopPolicy = P,
) -> tuple[GpuRecord, list[Work]]:
    """One agent pass without I/O: advance, doing the work with the given outcomes."""
    done: list[Work] = []
    for _ in range(4):
        rec, work = advance(rec, fault=fault, pods=pods, breaker_open=breaker, boot_id=boot, now=now, policy=policy)
        if work is None:
            break
        done.append(work)
        ok = reset_ok if work is Work.RESET else burn_ok
        rec = complete(rec, work=work, ok=ok, detail="ok" if ok else "boom", boot_id=boot, now=now, policy=policy)
    return rec, done


def stages(rec: GpuRecord) -> list[Stage]:
    return [s.stage for s in rec.timeline]


def test_happy_path_waits_for_the_pods_then_resets_burns_in_and_readmits_once_health_agrees() -> None:
    rec, work = run(GpuRecord(uuid=U, index=0), DBE, pods=("ml/a/main",))
    assert rec.stage is Stage.QUARANTINED and work == [] and "ml/a/main" in rec.waiting
    rec, work = run(rec, DBE, now=110)
    assert work == [Work.RESET, Work.BURN_IN] and rec.stage is Stage.BURN_IN and rec.passed
    assert "health to clear" in rec.waiting  # the fault is still published: not yet
    rec, work = run(rec, None, now=111)
    assert rec.stage is Stage.HEALTHY and work == []
    assert stages(rec) == [Stage.QUARANTINED, Stage.DRAINED, Stage.RESET, Stage.BURN_IN, Stage.BURN_IN, Stage.HEALTHY]
    assert rec.repairs == (100.0,)


def test_a_passed_burn_in_readmits_at_once_when_what_is_left_needs_no_repair() -> None:
    """gpu-retired-pages' GPU 3: the reset activated the pending retirement and the count now sits at
    DCGM's limit (resolution none, kept in the InfoROM): the GPU is given back at once, as a GPU in
    that state that never entered the loop keeps serving, not held for the settle period."""
    pending = Fault(uuid=U, gpu=U, probes=("retired-pages-pending", "retired-pages-limit"), covers=(U,))
    limit = Fault(uuid=U, gpu=U, probes=("retired-pages-limit",), covers=(U,))
    rec, work = run(GpuRecord(uuid=U, index=3), pending)
    assert work == [Work.RESET, Work.BURN_IN] and rec.stage is Stage.BURN_IN and rec.passed
    rec, work = run(rec, limit, now=101)
    assert rec.stage is Stage.HEALTHY and work == [] and rec.timeline[-1].note == "re-admitted"
    rec, work = run(rec, limit, now=102)
    assert rec.stage is Stage.HEALTHY and work == []  # and it stays: nothing to repair


@pytest.mark.parametrize(
    "fault",
    [
        Fault(uuid=U, gpu=U, xids=(), covers=(U,)),  # the event stream broke: no evidence against the GPU
        Fault(uuid=U, gpu=U, xids=(13,), covers=(U,)),  # the application's fault
        Fault(uuid=U, gpu=U, xids=(94,), covers=(U,)),  # contained ECC error: restarting the application is enough
        Fault(uuid="MIG-1", gpu=U, xids=(48,), covers=("MIG-1",)),  # one MIG device: not the whole GPU's loop
    ],
)
def test_faults_the_loop_leaves_alone(fault: Fault) -> None:
    assert not needs_repair(fault)
    rec, work = run(GpuRecord(uuid=U, index=0), fault)
    assert rec.stage is Stage.HEALTHY and work == [] and rec.timeline == ()


def test_breaker_open_holds_the_reset_and_the_reboot_request_text_says_so() -> None:
    rec, _ = run(GpuRecord(uuid=U, index=0), DBE, breaker=True)
    assert rec.stage is Stage.DRAINED and "breaker" in rec.waiting
    rec, work = run(rec, DBE, breaker=False)
    assert Work.RESET in work


def test_a_failed_reset_asks_for_a_reboot_and_then_waits_without_trying_again() -> None:
    rec, work = run(GpuRecord(uuid=U, index=0), DBE, reset_ok=False)
    assert work == [Work.RESET] and rec.stage is Stage.REBOOT and rec.boot_id == "b1"
    for t in range(200):
        rec, work = run(rec, DBE, now=200 + t)
        assert work == [] and rec.stage is Stage.REBOOT
    assert "reboot" in rec.waiting


def test_after_a_reboot_a_failed_burn_in_is_final() -> None:
    rec, _ = run(GpuRecord(uuid=U, index=0), DBE, burn_ok=False)
    assert rec.stage is Stage.REBOOT
    rec, work = run(rec, DBE, boot="b2", burn_ok=False)
    assert work == [Work.BURN_IN] and rec.stage is Stage.FAILED
    for _ in range(100):  # no reboot is requested, nothing is tried: a person decides
        rec, work = run(rec, DBE, boot="b2")
        assert work == [] and rec.stage is Stage.FAILED and "needs a person" in rec.waiting
    rec, work = run(rec, DBE, boot="b3", burn_ok=False)  # a person rebooted it: one more burn-in
    assert work == [Work.BURN_IN] and rec.stage is Stage.FAILED
    rec, work = run(rec, None, boot="b4")  # repaired: back
    assert work == [Work.BURN_IN] and rec.stage is Stage.HEALTHY


def test_a_gpu_repaired_too_often_within_the_window_gets_a_reboot_instead_of_a_reset() -> None:
    policy = LoopPolicy(max_repairs=2, window_s=1000)
    rec = GpuRecord(uuid=U, index=0)
    for t in (0.0, 10.0):
        rec, work = run(rec, DBE, now=t, policy=policy)
        rec, _ = run(rec, None, now=t + 1, policy=policy)
        assert rec.stage is Stage.HEALTHY
    rec, work = run(rec, DBE, now=20, policy=policy)
    assert work == [] and rec.stage is Stage.REBOOT
    assert "repaired 2 times" in rec.timeline[-1].note


def test_an_agent_that_stopped_mid_reset_retries_once_then_asks_for_a_reboot() -> None:
    rec, work = advance(
        GpuRecord(uuid=U, index=0), fault=DBE, pods=(), breaker_open=False, boot_id="b1", now=0, policy=P
    )
    assert rec.stage is Stage.RESET and work is Work.RESET  # ... and the agent died here
    rec, work = advance(rec, fault=DBE, pods=(), breaker_open=False, boot_id="b1", now=1, policy=P)
    assert work is Work.RESET and rec.attempts == 2
    rec, work = advance(rec, fault=DBE, pods=(), breaker_open=False, boot_id="b1", now=2, policy=P)
    assert work is None and rec.stage is Stage.REBOOT


def test_records_round_trip_through_the_annotation_and_bad_ones_name_it() -> None:
    rec, _ = run(GpuRecord(uuid=U, index=3), DBE, reset_ok=False)
    text = encode_records({U: rec})
    assert decode_records(text) == {U: rec}
    assert decode_records(text)[U].timeline == rec.timeline
    assert encode_records({}) == "{}"
    with pytest.raises(AnnotationError, match=LOOP_ANNOTATION):
        decode_records(json.dumps({U: {"stage": "exploded"}}))
    with pytest.raises(AnnotationError, match=LOOP_ANNOTATION):
        decode_records("[1]")


def test_policy_fields_are_validated() -> None:
    with pytest.raises(ValueError, match="max_resets"):
        LoopPolicy(max_resets=0)
    with pytest.raises(ValueError, match="settle_s"):
        LoopPolicy(settle_s=0)


# ---- the remediator on nodes that run the loop ----------------------------------------------------


def unhealthy_node(name: str, loop: dict[str, GpuRecord] | None) -> dict[str, object]:
    node = node_object(name)
    annotations = {FAULTS_ANNOTATION: encode_faults({U: DBE})}
    if loop is not None:
        annotations[LOOP_ANNOTATION] = encode_records(loop)
    node["metadata"]["annotations"] = annotations
    node["status"]["conditions"].append(
        {
            "type": CONDITION_TYPE,
            "status": "False",
            "reason": "GPUXidError",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    )
    return node


def taints(nodes: list[dict[str, object]], now: float = 1767225600.0) -> list[tuple[str, str]]:
    decision = decide(nodes, pods=[], pdbs=[], policy=Policy(), history={}, now=now)
    return [(a.node, a.patch["spec"]["taints"][-1]["value"]) for a in decision.actions if a.kind is ActionKind.TAINT]


def test_a_node_that_runs_the_loop_is_tainted_only_once_its_loop_asks_for_a_reboot() -> None:
    healthy = [node_object(f"ok-{i}") for i in range(9)]
    assert taints([unhealthy_node("n", None), *healthy]) == [("n", "reset-gpu")]  # no loop: as before
    assert taints([unhealthy_node("n", {}), *healthy]) == []  # the loop will take it
    for stage in (Stage.QUARANTINED, Stage.DRAINED, Stage.RESET, Stage.BURN_IN, Stage.FAILED):
        assert taints([unhealthy_node("n", {U: GpuRecord(uuid=U, index=0, stage=stage)}), *healthy]) == []
    assert taints([unhealthy_node("n", {U: GpuRecord(uuid=U, index=0, stage=Stage.REBOOT)}), *healthy]) == [
        ("n", "reboot-node")
    ]


def test_a_reboot_the_loop_asked_for_taints_even_when_the_fault_left_needs_nothing() -> None:
    """A GPU whose reset activated a pending retirement that reached DCGM's limit (a probe whose
    resolution is none) and whose burn-in then failed on something a repair is for (its memory
    test, say) asked for a reboot: the node is tainted for it. Without the reboot request the same
    fault is only reported."""
    limit = Fault(uuid=U, gpu=U, probes=("retired-pages-limit",), covers=(U,))
    healthy = [node_object(f"ok-{i}") for i in range(9)]
    for loop, expected in (
        ({U: GpuRecord(uuid=U, index=3, stage=Stage.REBOOT)}, [("n", "reboot-node")]),
        ({}, []),
        (None, []),
    ):
        node = unhealthy_node("n", loop)
        node["metadata"]["annotations"][FAULTS_ANNOTATION] = encode_faults({U: limit})  # type: ignore[index]
        assert taints([node, *healthy]) == expected, loop


def test_gpu_0_keeps_its_index_in_the_annotation() -> None:
    """An index of 0 is written (the doctor names GPU 0, not GPU ?)."""
    assert json.loads(encode_records({U: GpuRecord(uuid=U, index=0, stage=Stage.QUARANTINED)}))[U]["index"] == 0
    assert decode_records(encode_records({U: GpuRecord(uuid=U, index=0)}))[U].index == 0
    assert "index" not in json.loads(encode_records({U: GpuRecord(uuid=U)}))[U]


def test_the_breaker_holds_reboot_taints_when_many_nodes_fail() -> None:
    failing = [unhealthy_node(f"n-{i}", {U: GpuRecord(uuid=U, index=0, stage=Stage.REBOOT)}) for i in range(4)]
    decision = decide(
        [*failing, *(node_object(f"ok-{i}") for i in range(4))],
        pods=[],
        pdbs=[],
        policy=Policy(),
        history={},
        now=1767225600.0,
    )
    assert decision.breaker.tripped and decision.actions == ()
    assert {h.why for h in decision.held} == {HoldReason.BREAKER}


# ---- the agent ------------------------------------------------------------------------------------


def agent_rig(breaker: str | None) -> tuple[MemoryCluster, SimBackend, GpuLoopAgent]:
    backend = SimBackend.from_preset("h100-80gb-x8", node="n")
    uuid = backend.inventory().gpu(2).uuid
    node = node_object("n")
    node["status"]["nodeInfo"] = {"bootID": "b1"}
    node["metadata"]["annotations"] = {
        FAULTS_ANNOTATION: encode_faults({uuid: Fault(uuid=uuid, gpu=uuid, xids=(48,), covers=(uuid,))})
    }
    objects: list[dict[str, object]] = [node]
    if breaker is not None:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": STATUS_NAME, "namespace": "gpuchain"},
                "data": {"breaker": breaker},
            }
        )
    cluster = MemoryCluster(objects)
    return cluster, backend, GpuLoopAgent(backend, cluster=cluster, node_name="n", clock=lambda: 1000.0)


def test_agent_with_the_breaker_open_resets_nothing_and_requests_no_reboot() -> None:
    cluster, backend, agent = agent_rig("open")
    backend.fail_reset(2)
    for _ in range(3):
        agent.run_once()
    uuid = backend.inventory().gpu(2).uuid
    annotations = cluster.get(NODE, name="n")["metadata"]["annotations"]
    assert decode_records(annotations[LOOP_ANNOTATION])[uuid].stage is Stage.DRAINED
    assert decode_quarantine(annotations[QUARANTINE_ANNOTATION]) == {uuid}
    assert REBOOT_ANNOTATION not in annotations
    assert agent.metrics.outcomes == {}


def test_agent_resumes_from_the_node_after_a_restart() -> None:
    cluster, backend, agent = agent_rig("closed")
    backend.fail_reset(2)
    agent.run_once()
    uuid = backend.inventory().gpu(2).uuid
    fresh = GpuLoopAgent(
        backend, cluster=cluster, node_name="n", clock=lambda: 2000.0
    )  # a new process: nothing in memory
    result = fresh.run_once()
    assert result.records[uuid].stage is Stage.REBOOT and not result.written
    assert fresh.metrics.outcomes == {}  # no second reset
    assert uuid in cluster.get(NODE, name="n")["metadata"]["annotations"][REBOOT_ANNOTATION]


def test_a_probed_fault_round_trips_and_needs_a_reset() -> None:
    from gpuchain.remediation.model import decode_faults

    probed = Fault(uuid=U, gpu=U, xids=(), covers=(U,), probes=("row-remap-pending",))
    assert decode_faults(encode_faults({U: probed})) == {U: probed}
    assert "row remapping pending" in probed.summary() and not probed.harmless
    assert needs_repair(probed)
    _, work = run(GpuRecord(uuid=U, index=0), probed)
    assert work == [Work.RESET, Work.BURN_IN]


def test_the_loop_evidence_names_faults_it_leaves_alone_only_on_a_node_that_runs_it() -> None:
    contained = Fault(uuid=U, gpu=U, xids=(94,), covers=(U,))  # NVIDIA's RESTART_APP: evict, no reset
    annotations = {FAULTS_ANNOTATION: encode_faults({U: contained}), LOOP_ANNOTATION: encode_records({})}
    (line,) = loop_evidence({"metadata": {"annotations": annotations}})
    assert line.startswith(f"repair loop: leaves {U}: XID 94 (") and line.endswith(
        "alone (needs restart-app): its pods are evicted; the GPU is not reset and takes new pods"
    )
    del annotations[LOOP_ANNOTATION]
    assert loop_evidence({"metadata": {"annotations": annotations}}) == []
    held = {FAULTS_ANNOTATION: encode_faults({U: DBE}), LOOP_ANNOTATION: encode_records({})}
    assert loop_evidence({"metadata": {"annotations": held}}) == []  # the loop is about to take it


class RefusedReacquire:
    """Make ``backend.reacquire`` fail as nvmlInit does with the driver gone, until ``refusing`` is
    cleared (NVML cannot be taken back after a reset)."""

    def __init__(self, backend: SimBackend) -> None:
        self.refusing = True
        self._real = backend.reacquire
        backend.reacquire = self._reacquire  # type: ignore[method-assign]

    def _reacquire(self) -> None:
        if self.refusing:
            raise GpuError("nvmlInit: driver not loaded")
        self._real()


def test_agent_takes_nvml_back_when_a_reset_left_it_let_go_and_a_release_is_no_verdict() -> None:
    """NVML could not be taken back right after a reset: the next pass takes it back before any
    work. While it cannot, a burn-in refused with ReleasedError is no verdict: the GPU waits in its
    stage, nothing fails, no reboot is asked for; once NVML is back the burn-in runs and passes."""
    cluster, backend, agent = agent_rig("closed")
    uuid = backend.inventory().gpu(2).uuid
    driver = RefusedReacquire(backend)
    real_reset = backend.reset_gpu

    def reset_then_stay_let_go(index: int) -> None:
        real_reset(index)
        backend.release()  # as NvmlBackend.reset_gpu leaves it when nvmlInit fails after the reset
        raise NotReacquiredError(f"GPU {index} was reset, but NVML could not be taken back")

    backend.reset_gpu = reset_then_stay_let_go  # type: ignore[method-assign]
    first = agent.run_once().records[uuid]
    assert first.stage is Stage.BURN_IN and "NVML" in first.waiting and backend.released
    second = agent.run_once().records[uuid]
    assert second.stage is Stage.BURN_IN and not second.passed
    assert agent.metrics.outcomes == {"reset-ok": 1, "reacquire-failed": 1}
    assert REBOOT_ANNOTATION not in cluster.get(NODE, name="n")["metadata"]["annotations"]
    driver.refusing = False
    third = agent.run_once().records[uuid]
    assert not backend.released and third.passed
    assert agent.metrics.outcomes["burn-in-ok"] == 1


def test_agent_without_nvml_asks_no_agent_to_let_go_and_uses_no_reset_attempt(tmp_path: Path) -> None:
    """gpu-health could not take NVML back: a GPU reaching its reset neither posts a release request
    (every agent on the node would let go for nothing) nor counts a failed reset (which would
    end in a reboot request); it stays drained and waits, and resets once NVML is back."""
    from gpuchain.gpu.nvmlrelease import ReleaseBoard

    cluster, backend, _ = agent_rig("open")  # held drained by the breaker while it sees the GPUs
    board = ReleaseBoard(tmp_path)
    agent = GpuLoopAgent(backend, cluster=cluster, node_name="n", clock=lambda: 1000.0, board=board, release_wait=0.2)
    uuid = backend.inventory().gpu(2).uuid
    assert agent.run_once().records[uuid].stage is Stage.DRAINED
    cluster.patch(CONFIGMAP, name=STATUS_NAME, patch={"data": {"breaker": "closed"}}, namespace="gpuchain")
    posted: list[object] = []
    post = board.post
    board.post = lambda request: (posted.append(request), post(request))[1]  # type: ignore[method-assign]
    driver = RefusedReacquire(backend)
    backend.release()
    for _ in range(3):
        rec = agent.run_once().records[uuid]
        assert rec.stage is Stage.DRAINED and "NVML" in rec.waiting and rec.attempts == 0
    assert posted == [] and "reset-failed" not in agent.metrics.outcomes
    driver.refusing = False
    rec = agent.run_once().records[uuid]
    assert rec.stage is Stage.BURN_IN and rec.passed and len(posted) == 1
