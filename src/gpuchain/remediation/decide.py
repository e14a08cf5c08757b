"""The remediation decision: plain data in, actions out. No I/O, no clock; the caller passes ``now``.

Given the Nodes (with what their publishers wrote), the Pods on unhealthy nodes, the
PodDisruptionBudgets, the policy and the circuit breaker's memory, ``decide`` answers:

- which pods to evict: only those the node says hold a failed device (``gpu-pods`` annotation),
  never in a protected namespace, and not when a budget would refuse (predicted with the same
  PDB arithmetic the Eviction API uses, so a blocked pod is reported instead of retried blindly);
- whether to taint or cordon the node: when a fault's XID asks for a GPU reset or a node reboot
  (the shared XID table), and to lift gpuchain's own taint/cordon once the node is healthy again;
- whether the breaker is open: more than ``breaker_share`` of the GPU nodes affected within the
  window (and at least ``breaker_min_nodes``) means something bigger than a bad GPU is going on
  (a driver rollout, a power event), and evicting everything would make it worse: act on nothing.

Running it again on the state its actions produced yields no actions (evicted pods are gone, the
taint is there): the controller is idempotent by construction.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuchain.gpu.xid import Resolution
from gpuchain.kube.objects import Obj
from gpuchain.kube.pdb import blocking_budget
from gpuchain.remediation.gpuloop import Stage, loop_stages, node_action
from gpuchain.remediation.model import (
    CORDONED_BY_ANNOTATION,
    CORDONED_BY_REMEDIATOR,
    TAINT_KEY,
    Fault,
    NodeGpus,
    node_view,
)

SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
DEFAULT_NAMESPACE = "gpuchain"
"""Where the remediator runs and keeps its status; also protected (operands live there)."""

_NODE_WIDE = frozenset({Resolution.RESET_GPU, Resolution.REBOOT_NODE})


class NodeAction(enum.StrEnum):
    """What to do to a node whose fault needs a GPU reset or a reboot."""

    TAINT = "taint"
    CORDON = "cordon"
    BOTH = "both"
    NONE = "none"


class ActionKind(enum.StrEnum):
    EVICT = "evict"
    TAINT = "taint"
    UNTAINT = "untaint"
    CORDON = "cordon"
    UNCORDON = "uncordon"


class HoldReason(enum.StrEnum):
    """Why something that looked like it needed acting on was left alone."""

    PROTECTED_NAMESPACE = "protected-namespace"
    PDB = "pdb-blocked"
    BREAKER = "breaker-open"
    BAD_ANNOTATION = "bad-annotation"
    NO_FAULT_DATA = "no-fault-data"
    UNVERIFIED = "unverified-writes"


@dataclass(frozen=True, kw_only=True)
class Policy:
    """How far the remediator may go. Validated on construction; errors name the field."""

    protected_namespaces: frozenset[str] = SYSTEM_NAMESPACES | {DEFAULT_NAMESPACE, "gpu-operator"}
    node_action: NodeAction = NodeAction.TAINT
    evict: bool = True
    breaker_share: float = 0.3
    breaker_min_nodes: int = 2
    window_s: float = 600.0

    def __post_init__(self) -> None:
        if not 0 < self.breaker_share <= 1:
            raise ValueError(f"breaker_share: {self.breaker_share} must be in (0, 1], e.g. 0.3 for 30% of GPU nodes")
        if self.breaker_min_nodes < 1:
            raise ValueError(f"breaker_min_nodes: {self.breaker_min_nodes} must be at least 1")
        if self.window_s <= 0:
            raise ValueError(f"window_s: {self.window_s} must be positive, e.g. 600 for 10 minutes")


@dataclass(frozen=True, kw_only=True)
class Action:
    """One change to make. ``patch`` is the Node merge patch for node actions; ``pod`` is ``ns/name``."""

    kind: ActionKind
    node: str
    reason: str
    message: str
    pod: str | None = None
    devices: tuple[str, ...] = ()
    xids: tuple[int, ...] = ()
    patch: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def cause(self) -> str:
        """``XID 79 on GPU-…``: the short why (``message`` has the meanings too)."""
        if not self.devices:
            return self.message
        return f"{', '.join(f'XID {x}' for x in self.xids) or 'lost'} on {', '.join(self.devices)}"


@dataclass(frozen=True, kw_only=True)
class Held:
    """Something left alone on purpose, and why (``pdb`` names the blocking budget)."""

    node: str
    why: HoldReason
    detail: str
    pod: str | None = None
    pdb: str | None = None


@dataclass(frozen=True, kw_only=True)
class Breaker:
    """The circuit breaker's reading this pass."""

    tripped: bool
    affected: tuple[str, ...]
    gpu_nodes: int
    share: float
    limit: float
    window_s: float
    min_nodes: int

    @property
    def message(self) -> str:
        state = "open: remediation paused" if self.tripped else "closed"
        return (
            f"breaker {state}; {len(self.affected)} of {self.gpu_nodes} GPU nodes affected within "
            f"{self.window_s:g}s ({self.share:.0%}, limit {self.limit:.0%}, at least {self.min_nodes} nodes)"
        )


@dataclass(frozen=True, kw_only=True)
class Decision:
    """Everything ``decide`` concluded. ``history`` is the breaker's memory to keep for the next pass."""

    actions: tuple[Action, ...]
    held: tuple[Held, ...]
    breaker: Breaker
    history: Mapping[str, float]
    unhealthy: tuple[str, ...]


def parse_time(stamp: str) -> float | None:
    """An RFC 3339 timestamp as epoch seconds; None when absent or unreadable."""
    if not stamp:
        return None
    try:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def decide(
    nodes: Iterable[Obj],
    *,
    pods: Iterable[Obj],
    pdbs: Iterable[Obj],
    policy: Policy,
    history: Mapping[str, float],
    now: float,
) -> Decision:
    """Decide what to do about every node (see the module docstring). Pure."""
    nodes_list = list(nodes)
    views = [node_view(n) for n in nodes_list]
    breaker, new_history = _breaker(views, policy, history, now)
    pod_list = list(pods)
    pdb_list = list(pdbs)
    actions: list[Action] = []
    held: list[Held] = []
    # per node, its repair loop's GPU stages (None: the node runs no loop)
    stages = {str((n.get("metadata") or {}).get("name", "")): loop_stages(n) for n in nodes_list}
    for view in sorted(views, key=lambda v: v.name):
        if view.unhealthy:
            node_actions, node_held = _remediate(view, pod_list, pdb_list, policy, stages.get(view.name))
        else:
            node_actions, node_held = _restore(view), []
        actions.extend(node_actions)
        held.extend(node_held)
    if breaker.tripped:
        held.extend(
            Held(
                node=a.node,
                why=HoldReason.BREAKER,
                detail=f"{a.kind.value} paused by the breaker: {a.cause}",
                pod=a.pod,
            )
            for a in actions
        )
        actions = []
    unhealthy = tuple(sorted(v.name for v in views if v.unhealthy))
    return Decision(actions=tuple(actions), held=tuple(held), breaker=breaker, history=new_history, unhealthy=unhealthy)


def _breaker(
    views: Sequence[NodeGpus], policy: Policy, history: Mapping[str, float], now: float
) -> tuple[Breaker, dict[str, float]]:
    """Affected = unhealthy now, or became unhealthy within the window (and recovered since).

    Currently unhealthy nodes always count, however long ago they failed, so a storm keeps the
    breaker open until the nodes actually recover. The memory keeps when each node turned
    unhealthy (its condition's lastTransitionTime), which is stable, so an unchanged cluster
    leaves an unchanged history.
    """
    since = now - policy.window_s
    remembered = {n: t for n, t in history.items() if t >= since}
    for view in views:
        if view.unhealthy and view.condition is not None:
            remembered[view.name] = parse_time(view.condition.last_transition) or remembered.get(view.name, now)
    current = {v.name for v in views if v.unhealthy}
    affected = tuple(sorted(current | {n for n, t in remembered.items() if t >= since}))
    gpu_nodes = sum(1 for v in views if v.gpu_node)
    share = len(affected) / gpu_nodes if gpu_nodes else 0.0
    tripped = len(affected) >= policy.breaker_min_nodes and share > policy.breaker_share
    return (
        Breaker(
            tripped=tripped,
            affected=affected,
            gpu_nodes=gpu_nodes,
            share=share,
            limit=policy.breaker_share,
            window_s=policy.window_s,
            min_nodes=policy.breaker_min_nodes,
        ),
        remembered,
    )


def _remediate(
    view: NodeGpus, pods: list[Obj], pdbs: list[Obj], policy: Policy, stages: Mapping[str, Stage] | None
) -> tuple[list[Action], list[Held]]:
    if view.error:
        return [], [Held(node=view.name, why=HoldReason.BAD_ANNOTATION, detail=view.error)]
    # a GPU whose loop asked for a reboot needs it whatever its fault says now (its burn-in failed
    # after the reset, while the fault left is one that needs nothing, e.g. retired pages at DCGM's limit)
    reboot = {u for u, s in (stages or {}).items() if s is Stage.REBOOT}
    faults = [f for f in view.faults.values() if not f.harmless or f.gpu in reboot]
    if not view.faults:
        return [], [
            Held(node=view.name, why=HoldReason.NO_FAULT_DATA, detail="GPUHealthy=False but no gpu-faults annotation")
        ]
    if not faults:
        return [], []
    actions = _node_actions(view, faults, policy, stages)
    held: list[Held] = []
    if policy.evict:
        evict, held = _evictions(view, faults, pods, pdbs, policy)
        actions.extend(evict)
    return actions, held


def _node_actions(
    view: NodeGpus, faults: list[Fault], policy: Policy, stages: Mapping[str, Stage] | None = None
) -> list[Action]:
    """Taint and/or cordon when a fault needs a GPU reset or a reboot; nothing if already done.

    A GPU the node's repair loop (``gpuloop``) is repairing on its own needs nothing node-wide;
    one whose loop asked for a reboot needs the node rebooted, whatever its XIDs say."""
    needs = {f.uuid: node_action(f, stages) for f in faults}
    wide = [f for f in faults if needs[f.uuid] in _NODE_WIDE]
    if not wide or policy.node_action is NodeAction.NONE:
        return []
    worst = max((needs[f.uuid] for f in wide), key=lambda a: a.severity)
    devices = tuple(sorted(f.uuid for f in wide))
    xids = tuple(sorted({x for f in wide for x in f.xids}))
    why = f"{', '.join(f.summary() for f in wide)} needs {worst.value}"
    actions: list[Action] = []
    ours = [t for t in view.taints if t.get("key") == TAINT_KEY]
    current = [t.get("value") for t in ours]
    if policy.node_action in (NodeAction.TAINT, NodeAction.BOTH) and current != [worst.value]:
        taint = {"key": TAINT_KEY, "value": worst.value, "effect": "NoSchedule"}
        others = [dict(t) for t in view.taints if t.get("key") != TAINT_KEY]
        actions.append(
            Action(
                kind=ActionKind.TAINT,
                node=view.name,
                reason="GPUNodeTainted",
                message=f"tainted {TAINT_KEY}={worst.value}:NoSchedule: {why}",
                devices=devices,
                xids=xids,
                patch=_taints_patch(view, [*others, taint]),
            )
        )
    if policy.node_action in (NodeAction.CORDON, NodeAction.BOTH) and not view.unschedulable:
        actions.append(
            Action(
                kind=ActionKind.CORDON,
                node=view.name,
                reason="GPUNodeCordoned",
                message=f"cordoned: {why}",
                devices=devices,
                xids=xids,
                patch={
                    "spec": {"unschedulable": True},
                    "metadata": {"annotations": {CORDONED_BY_ANNOTATION: CORDONED_BY_REMEDIATOR}},
                },
            )
        )
    return actions


def _evictions(
    view: NodeGpus, faults: list[Fault], pods: list[Obj], pdbs: list[Obj], policy: Policy
) -> tuple[list[Action], list[Held]]:
    """Evict the pods holding a failed device, predicting PDB refusals in order (each eviction
    lowers what the next one in the same budget may take)."""
    by_device = {d: f for f in faults for d in f.covers}
    targets: dict[str, list[Fault]] = {}
    for device, refs in view.pods.items():
        fault = by_device.get(device)
        if fault is None:
            continue
        for ref in refs:
            namespace, name, _ = ref.split("/")
            hit = targets.setdefault(f"{namespace}/{name}", [])
            if fault not in hit:
                hit.append(fault)
    remaining = list(pods)
    actions: list[Action] = []
    held: list[Held] = []
    for key in sorted(targets):
        namespace, name = key.split("/")
        hit = targets[key]
        cause = "; ".join(f.summary() for f in hit)
        if namespace in policy.protected_namespaces:
            held.append(
                Held(
                    node=view.name,
                    why=HoldReason.PROTECTED_NAMESPACE,
                    detail=f"namespace {namespace} is protected",
                    pod=key,
                )
            )
            continue
        pod = _find_pod(remaining, namespace, name, view.name)
        if pod is None or _finished(pod):
            continue
        same_ns = [p for p in remaining if p.get("metadata", {}).get("namespace") == namespace]
        budget = blocking_budget(
            pod, pdbs=[b for b in pdbs if b.get("metadata", {}).get("namespace") == namespace], pods=same_ns
        )
        if budget is not None:
            pdb = str(budget["metadata"]["name"])
            held.append(
                Held(
                    node=view.name,
                    why=HoldReason.PDB,
                    detail=f"PodDisruptionBudget {namespace}/{pdb} allows no disruption",
                    pod=key,
                    pdb=pdb,
                )
            )
            continue
        remaining.remove(pod)
        actions.append(
            Action(
                kind=ActionKind.EVICT,
                node=view.name,
                reason="GPUWorkloadEvicted",
                message=f"evicted from node {view.name}: its GPU failed ({cause})",
                pod=key,
                devices=tuple(sorted({f.uuid for f in hit})),
                xids=tuple(sorted({x for f in hit for x in f.xids})),
            )
        )
    return actions, held


def _find_pod(pods: list[Obj], namespace: str, name: str, node: str) -> Obj | None:
    """The pod, if it still exists on this node (a same-named pod elsewhere is a new one: leave it)."""
    for pod in pods:
        meta = pod.get("metadata", {})
        if meta.get("namespace") == namespace and meta.get("name") == name:
            return pod if (pod.get("spec") or {}).get("nodeName") == node else None
    return None


def _finished(pod: Obj) -> bool:
    """Already going or gone: being deleted, or ended (a completed pod holds no GPU)."""
    phase = (pod.get("status") or {}).get("phase")
    return bool(pod.get("metadata", {}).get("deletionTimestamp")) or phase in ("Succeeded", "Failed")


def _taints_patch(view: NodeGpus, taints: list[dict[str, Any]]) -> dict[str, Any]:
    """Replace the node's taints as read, guarded by the version read: a taint another controller
    added meanwhile (e.g. node.kubernetes.io/unreachable) makes the API refuse with a conflict
    instead of being dropped; the next pass reads again and retries."""
    patch: dict[str, Any] = {"spec": {"taints": taints or None}}
    if view.resource_version is not None:
        patch["metadata"] = {"resourceVersion": view.resource_version}
    return patch


def _restore(view: NodeGpus) -> list[Action]:
    """Lift gpuchain's own taint and cordon once the node reports its GPUs healthy again."""
    if view.condition is None or view.error:
        return []
    actions: list[Action] = []
    if view.tainted:
        keep = [dict(t) for t in view.taints if t.get("key") != TAINT_KEY]
        actions.append(
            Action(
                kind=ActionKind.UNTAINT,
                node=view.name,
                reason="GPUNodeUntainted",
                message=f"removed taint {TAINT_KEY}: GPUs healthy again",
                patch=_taints_patch(view, keep),
            )
        )
    if view.cordoned_by_us and view.unschedulable:
        actions.append(
            Action(
                kind=ActionKind.UNCORDON,
                node=view.name,
                reason="GPUNodeUncordoned",
                message="uncordoned: GPUs healthy again",
                patch={"spec": {"unschedulable": None}, "metadata": {"annotations": {CORDONED_BY_ANNOTATION: None}}},
            )
        )
    return actions
