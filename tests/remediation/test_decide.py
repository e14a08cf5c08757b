"""The pure decision: which pods, which node actions, when the breaker opens, and idempotence."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from gpuchain.kube.objects import Obj
from gpuchain.remediation.decide import ActionKind, Decision, HoldReason, NodeAction, Policy, decide, parse_time
from gpuchain.remediation.model import (
    CONDITION_TYPE,
    CORDONED_BY_ANNOTATION,
    FAULTS_ANNOTATION,
    PODS_ANNOTATION,
    TAINT_KEY,
    Fault,
    encode_faults,
    encode_pods,
)
from gpuchain.sim.remediation import node_object, pdb_object, pod_object

NOW = parse_time("2026-01-01T12:00:00Z") or 0.0
RECENT = "2026-01-01T11:59:00Z"
GPU0, GPU1 = "GPU-0000", "GPU-1111"
MIG_A, MIG_B = "MIG-aaaa", "MIG-bbbb"


def node(
    name: str,
    faults: Mapping[str, Fault] | None = None,
    pods: Mapping[str, tuple[str, ...]] | None = None,
    healthy: bool | None = None,
    since: str = RECENT,
    **spec: Any,
) -> Obj:
    obj = node_object(name)
    annotations = obj["metadata"].setdefault("annotations", {})
    if faults:
        annotations[FAULTS_ANNOTATION] = encode_faults(faults)
    if pods:
        annotations[PODS_ANNOTATION] = encode_pods(pods)
    if healthy is None:
        healthy = not faults
    obj["status"]["conditions"].append(
        {"type": CONDITION_TYPE, "status": "True" if healthy else "False", "lastTransitionTime": since}
    )
    obj["spec"].update(spec)
    return obj


def fault(uuid: str, *xids: int, lost: bool = False, covers: tuple[str, ...] = ()) -> dict[str, Fault]:
    return {uuid: Fault(uuid=uuid, gpu=uuid, xids=xids, lost=lost, covers=covers or (uuid,))}


def healthy_nodes(n: int) -> list[Obj]:
    return [node(f"ok-{i}") for i in range(n)]


def run(
    nodes: list[Obj],
    pods: list[Obj],
    pdbs: Sequence[Obj] = (),
    policy: Policy | None = None,
    history: Mapping[str, float] | None = None,
    now: float = NOW,
) -> Decision:
    return decide(nodes, pods=pods, pdbs=pdbs, policy=policy or Policy(), history=history or {}, now=now)


PODS = {GPU0: ("ml/a/main", "ml/a/side"), GPU1: ("ml/b/main",)}
RUNNING = [pod_object("ml", name="a", node="n0"), pod_object("ml", name="b", node="n0")]


def test_xid79_evicts_only_pods_on_that_gpu_and_taints() -> None:
    d = run([node("n0", fault(GPU0, 79), PODS), *healthy_nodes(3)], RUNNING)
    kinds = [(a.kind, a.pod) for a in d.actions]
    assert kinds == [(ActionKind.TAINT, None), (ActionKind.EVICT, "ml/a")]
    taint = d.actions[0]
    assert taint.patch == {"spec": {"taints": [{"key": TAINT_KEY, "value": "reboot-node", "effect": "NoSchedule"}]}}
    assert d.actions[1].xids == (79,) and d.actions[1].devices == (GPU0,)
    assert not d.breaker.tripped


def test_taint_keeps_existing_taints() -> None:
    other = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    d = run([node("n0", fault(GPU0, 48), PODS, taints=[other]), *healthy_nodes(3)], RUNNING)
    assert d.actions[0].patch == {
        "spec": {"taints": [other, {"key": TAINT_KEY, "value": "reset-gpu", "effect": "NoSchedule"}]}
    }


def test_contained_ecc_evicts_but_does_not_taint() -> None:
    """XID 94 is fatal to the application on that GPU but asks only for an app restart."""
    d = run([node("n0", fault(GPU0, 94), PODS), *healthy_nodes(3)], RUNNING)
    assert [(a.kind, a.pod) for a in d.actions] == [(ActionKind.EVICT, "ml/a")]


def test_an_xid_nvidia_says_to_ignore_does_nothing() -> None:
    """XID 63 (a row marked for remapping; IGNORE in NVIDIA's catalog): the pods keep running."""
    d = run([node("n0", fault(GPU0, 63), PODS), *healthy_nodes(3)], RUNNING)
    assert d.actions == () and d.held == ()


def test_an_enabled_application_xid_evicts_without_a_taint() -> None:
    """XID 13 published (DP_ENABLE_HEALTHCHECKS=13): RESTART_APP, like 94."""
    d = run([node("n0", fault(GPU0, 13), PODS), *healthy_nodes(3)], RUNNING)
    assert [(a.kind, a.pod) for a in d.actions] == [(ActionKind.EVICT, "ml/a")]


def test_whole_gpu_fault_covers_its_mig_devices_and_mig_fault_only_itself() -> None:
    pods = {MIG_A: ("ml/a/main",), MIG_B: ("ml/b/main",)}
    whole = fault(GPU0, 79, covers=(GPU0, MIG_A, MIG_B))
    d = run([node("n0", whole, pods), *healthy_nodes(3)], RUNNING)
    assert [a.pod for a in d.actions if a.kind is ActionKind.EVICT] == ["ml/a", "ml/b"]
    one = {MIG_A: Fault(uuid=MIG_A, gpu=GPU0, xids=(48,), lost=False, covers=(MIG_A,))}
    d = run([node("n0", one, pods), *healthy_nodes(3)], RUNNING)
    assert [a.pod for a in d.actions if a.kind is ActionKind.EVICT] == ["ml/a"]


def test_protected_namespaces_are_never_touched() -> None:
    pods = {GPU0: ("kube-system/dcgm/main", "gpuchain/validator/main", "team/x/main")}
    running = [
        pod_object(ns, name=n, node="n0")
        for ns, n in (("kube-system", "dcgm"), ("gpuchain", "validator"), ("team", "x"))
    ]
    policy = Policy(protected_namespaces=Policy().protected_namespaces | {"team"})
    d = run([node("n0", fault(GPU0, 79), pods), *healthy_nodes(3)], running, policy=policy)
    assert [a.kind for a in d.actions] == [ActionKind.TAINT]
    assert {(h.pod, h.why) for h in d.held} == {
        ("kube-system/dcgm", HoldReason.PROTECTED_NAMESPACE),
        ("gpuchain/validator", HoldReason.PROTECTED_NAMESPACE),
        ("team/x", HoldReason.PROTECTED_NAMESPACE),
    }


def test_pdb_predicted_in_order_each_eviction_uses_up_the_budget() -> None:
    pods = {GPU0: ("ml/a/main", "ml/b/main")}
    running = [pod_object("ml", name=n, node="n0", labels={"app": "serve"}) for n in ("a", "b", "c")]
    budget = pdb_object(
        "ml", name="serve", match_labels={"app": "serve"}, min_available=2
    )  # 3 healthy, 2 required: one may go
    d = run([node("n0", fault(GPU0, 79), pods), *healthy_nodes(3)], running, [budget])
    assert [a.pod for a in d.actions if a.kind is ActionKind.EVICT] == ["ml/a"]
    assert [(h.pod, h.why, h.pdb) for h in d.held] == [("ml/b", HoldReason.PDB, "serve")]


def test_breaker_opens_above_share_and_acts_on_nothing() -> None:
    nodes = [node(f"n{i}", fault(GPU0, 48), {GPU0: (f"ml/p{i}/main",)}) for i in range(2)] + healthy_nodes(2)
    running = [pod_object("ml", name=f"p{i}", node=f"n{i}") for i in range(2)]
    d = run(nodes, running)
    assert d.breaker.tripped and d.breaker.affected == ("n0", "n1") and d.breaker.share == 0.5
    assert d.actions == ()
    assert {h.why for h in d.held} == {HoldReason.BREAKER} and len(d.held) == 4
    assert "open" in d.breaker.message and "2 of 4" in d.breaker.message


def test_breaker_needs_min_nodes() -> None:
    """One failure in a two-node cluster is 50%, but one node is a bad GPU, not a storm."""
    d = run([node("n0", fault(GPU0, 79), PODS), *healthy_nodes(1)], RUNNING)
    assert not d.breaker.tripped and d.actions


def test_breaker_remembers_recovered_nodes_within_window_then_forgets() -> None:
    nodes = [node("n0", fault(GPU0, 79), PODS), *healthy_nodes(3)]
    history = {"ok-0": NOW - 60}  # recovered a minute ago
    d = run(nodes, RUNNING, history=history)
    assert d.breaker.tripped and d.breaker.affected == ("n0", "ok-0")
    assert d.history == {"ok-0": NOW - 60, "n0": parse_time(RECENT)}
    later = run(nodes, RUNNING, history=history, now=NOW + 600)
    assert not later.breaker.tripped and "ok-0" not in later.history


def test_long_unhealthy_nodes_keep_counting() -> None:
    nodes = [node(f"n{i}", fault(GPU0, 48), since="2025-01-01T00:00:00Z") for i in range(2)] + healthy_nodes(2)
    assert run(nodes, []).breaker.tripped


def test_rerun_on_the_result_is_a_no_op() -> None:
    tainted = node(
        "n0", fault(GPU0, 79), PODS, taints=[{"key": TAINT_KEY, "value": "reboot-node", "effect": "NoSchedule"}]
    )
    d = run([tainted, *healthy_nodes(3)], [pod_object("ml", name="b", node="n0")])  # ml/a is gone
    assert d.actions == ()


def test_pod_elsewhere_or_finished_is_left() -> None:
    moved = pod_object("ml", name="a", node="n7")
    done = pod_object("ml", name="b", node="n0")
    done["status"]["phase"] = "Succeeded"
    pods = {GPU0: ("ml/a/main", "ml/b/main")}
    d = run([node("n0", fault(GPU0, 94), pods), *healthy_nodes(3)], [moved, done])
    assert d.actions == ()


@pytest.mark.parametrize(
    ("mode", "kinds"),
    [
        (NodeAction.CORDON, [ActionKind.CORDON]),
        (NodeAction.BOTH, [ActionKind.TAINT, ActionKind.CORDON]),
        (NodeAction.NONE, []),
    ],
)
def test_node_action_modes(mode: NodeAction, kinds: list[ActionKind]) -> None:
    d = run([node("n0", fault(GPU0, 79)), *healthy_nodes(3)], [], policy=Policy(node_action=mode))
    assert [a.kind for a in d.actions] == kinds
    if mode is NodeAction.CORDON:
        assert d.actions[0].patch == {
            "spec": {"unschedulable": True},
            "metadata": {"annotations": {CORDONED_BY_ANNOTATION: "remediator"}},
        }


def test_no_evict_only_taints() -> None:
    d = run([node("n0", fault(GPU0, 79), PODS), *healthy_nodes(3)], RUNNING, policy=Policy(evict=False))
    assert [a.kind for a in d.actions] == [ActionKind.TAINT]


def test_recovered_node_gets_only_our_taint_and_cordon_lifted() -> None:
    other = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    mine = {"key": TAINT_KEY, "value": "reboot-node", "effect": "NoSchedule"}
    n0 = node("n0", taints=[other, mine], unschedulable=True)
    n0["metadata"]["annotations"][CORDONED_BY_ANNOTATION] = "remediator"
    n1 = node("n1", unschedulable=True)  # cordoned by a person: not ours to lift
    d = run([n0, n1], [])
    assert [(a.kind, a.node) for a in d.actions] == [(ActionKind.UNTAINT, "n0"), (ActionKind.UNCORDON, "n0")]
    assert d.actions[0].patch == {"spec": {"taints": [other]}}


def test_a_cordon_annotated_by_someone_else_is_not_lifted() -> None:
    n0 = node("n0", unschedulable=True)
    n0["metadata"]["annotations"][CORDONED_BY_ANNOTATION] = "node-problem-detector"
    n1 = node("n1", unschedulable=True)
    n1["metadata"]["annotations"][CORDONED_BY_ANNOTATION] = ""
    assert run([n0, n1, *healthy_nodes(3)], []).actions == ()


def test_bad_annotation_is_reported_not_acted_on() -> None:
    bad = node("n0", healthy=False)
    bad["metadata"]["annotations"][FAULTS_ANNOTATION] = "{not json"
    missing = node("n1", healthy=False)
    d = run([bad, missing, *healthy_nodes(6)], [])
    assert d.actions == ()
    assert [(h.node, h.why) for h in d.held] == [("n0", HoldReason.BAD_ANNOTATION), ("n1", HoldReason.NO_FAULT_DATA)]
    assert FAULTS_ANNOTATION in d.held[0].detail


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"breaker_share": 0}, "breaker_share"),
        ({"breaker_min_nodes": 0}, "breaker_min_nodes"),
        ({"window_s": -1}, "window_s"),
    ],
)
def test_policy_rejects_bad_values_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Policy(**kwargs)


def test_taint_value_follows_the_worst_fault() -> None:
    """A node tainted for a GPU reset that now needs a reboot gets its taint's value updated, once."""
    reset = {"key": TAINT_KEY, "value": "reset-gpu", "effect": "NoSchedule"}
    faults = {**fault(GPU0, 48), **fault(GPU1, 79)}
    d = run([node("n0", faults, taints=[reset]), *healthy_nodes(3)], [])
    assert d.actions[0].patch == {
        "spec": {"taints": [{"key": TAINT_KEY, "value": "reboot-node", "effect": "NoSchedule"}]}
    }
    done = node("n0", faults, taints=[d.actions[0].patch["spec"]["taints"][0]])  # type: ignore[index]
    assert run([done, *healthy_nodes(3)], []).actions == ()
