"""The remediator's imperative shell: read the cluster, ``decide``, apply through the Cluster port.

One pass (``Remediator.run_once``):

1. list Nodes; for the unhealthy ones list their Pods (field selector) and the PDBs, and for each
   namespace with both, every Pod in it: a budget counts the replicas on healthy nodes too (the
   disruption controller does, and the Eviction API decides from that count);
2. read the status ConfigMap (``gpuchain-remediator`` in the remediator's namespace): the
   breaker's memory and the pods already reported as blocked;
3. ``decide`` (pure);
4. unless dry-run: apply each action (evictions through the Eviction API, so a budget that
   changed since the read still holds; a refusal is reported, never retried in a loop), record an
   Event for each, write the status ConfigMap, and record a Warning Event on it when the breaker
   opens (Normal when it closes).

Dry-run writes nothing at all and reports every action as ``would``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from gpuchain.common.supervise import wait_event
from gpuchain.kube.errors import EvictionBlockedError, KubeError, NotFoundError
from gpuchain.kube.kinds import CONFIGMAP, NODE, PDB, POD
from gpuchain.kube.objects import Obj
from gpuchain.kube.port import Cluster
from gpuchain.remediation.admission import (
    POLICY_NAME,
    VAP,
    VAP_BINDING,
    trusted_since,
    verify_writes,
    written_under_policy,
)
from gpuchain.remediation.decide import (
    DEFAULT_NAMESPACE,
    Action,
    ActionKind,
    Breaker,
    Held,
    HoldReason,
    Policy,
    decide,
)
from gpuchain.remediation.model import CONDITION_TYPE, find_condition

log = logging.getLogger(__name__)

STATUS_NAME = "gpuchain-remediator"
COMPONENT = "gpuchain-remediator"
EVENT_BLOCKED = "GPUEvictionBlocked"
EVENT_PAUSED = "RemediationPaused"
EVENT_RESUMED = "RemediationResumed"

Result = Literal["done", "would", "blocked", "gone", "failed"]


@dataclass(frozen=True)
class Outcome:
    """What became of one action: done, would (dry-run), blocked (PDB), gone (pod already gone), failed."""

    action: Action
    result: Result
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        a = self.action
        data: dict[str, Any] = {"kind": a.kind.value, "node": a.node, "result": self.result, "message": a.message}
        if a.pod:
            data["pod"] = a.pod
        if a.devices:
            data["devices"] = list(a.devices)
        if a.xids:
            data["xids"] = list(a.xids)
        if self.detail:
            data["detail"] = self.detail
        return data


@dataclass(frozen=True, kw_only=True)
class Report:
    """One pass: what was done (or would be), what was left alone and why, and the breaker."""

    dry_run: bool
    breaker: Breaker
    outcomes: tuple[Outcome, ...]
    held: tuple[Held, ...]
    unhealthy: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        b = self.breaker
        return {
            "dryRun": self.dry_run,
            "unhealthyNodes": list(self.unhealthy),
            "breaker": {
                "state": "open" if b.tripped else "closed",
                "affectedNodes": list(b.affected),
                "gpuNodes": b.gpu_nodes,
                "share": round(b.share, 4),
                "limit": b.limit,
                "windowSeconds": b.window_s,
                "minNodes": b.min_nodes,
                "message": b.message,
            },
            "actions": [o.to_dict() for o in self.outcomes],
            "held": [
                {
                    k: v
                    for k, v in {
                        "node": h.node,
                        "pod": h.pod,
                        "why": h.why.value,
                        "detail": h.detail,
                        "pdb": h.pdb,
                    }.items()
                    if v
                }
                for h in self.held
            ],
        }


@dataclass(frozen=True, kw_only=True)
class Memory:
    """What the status ConfigMap remembers between passes."""

    history: dict[str, float]
    blocked: frozenset[str]
    tripped: bool
    live: Obj | None = None
    """The ConfigMap as read (None: absent), so writing it back needs no second read."""


def budget_pods(pods: list[Obj], *, pdbs: list[Obj], list_pods: Callable[..., list[Obj]]) -> list[Obj]:
    """The pods budgets count that ``pods`` (those on unhealthy nodes) lack: every other pod of
    each namespace that has both a budget and a pod on an unhealthy node. Predicting a budget from
    the unhealthy nodes alone would count only the replicas about to go and hold every eviction."""
    budgeted = {str(b.get("metadata", {}).get("namespace")) for b in pdbs}
    have = {(p["metadata"].get("namespace"), p["metadata"].get("name")) for p in pods}
    extra: list[Obj] = []
    for namespace in sorted(budgeted & {str(p["metadata"].get("namespace")) for p in pods}):
        for pod in list_pods(POD, namespace=namespace):
            key = (pod["metadata"].get("namespace"), pod["metadata"].get("name"))
            if key not in have:
                have.add(key)
                extra.append(pod)
    return extra


class Remediator:
    """Runs passes of the controller against one cluster."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        policy: Policy | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        dry_run: bool = False,
        clock: Callable[[], float] = time.time,
        verify_node_writes: bool = True,
    ) -> None:
        """``verify_node_writes``: act only on GPU health the admission policy vouches for
        (``gpuchain.remediation.admission``); off only where the policy cannot exist (< 1.30)."""
        self.cluster = cluster
        self.policy = policy or Policy()
        self.namespace = namespace
        self.dry_run = dry_run
        self.clock = clock
        self.verify_node_writes = verify_node_writes
        self._refusal: str | None = None

    def trusted_nodes(self, nodes: list[Obj]) -> tuple[list[Obj], list[Held]]:
        """The nodes whose GPU health the admission policy vouches for, and a Held for each other
        node that reports GPU health. Untrusted nodes are left out of the decision entirely (not
        even a taint of ours is lifted on their word)."""
        if not self.verify_node_writes:
            return nodes, []
        binding = self.cluster.get_or_none(VAP_BINDING, name=POLICY_NAME)
        refusal = verify_writes(self.cluster.get_or_none(VAP, name=POLICY_NAME), binding)
        if refusal != self._refusal:
            if refusal:
                log.error("not acting on any node's GPU health: %s", refusal)
            self._refusal = refusal
        trusted: list[Obj] = []
        held: list[Held] = []
        for node in nodes:
            name = str(node["metadata"]["name"])
            if refusal is None and binding is not None and written_under_policy(node, since=trusted_since(binding)):
                trusted.append(node)
            elif find_condition(node) is not None:
                why = refusal or (
                    f"its {CONDITION_TYPE} condition was written before ValidatingAdmissionPolicy {POLICY_NAME} "
                    "was bound; waiting for gpu-health to publish again"
                )
                held.append(Held(node=name, why=HoldReason.UNVERIFIED, detail=why))
        return trusted, held

    def read_memory(self) -> Memory:
        """The status ConfigMap's memory; an absent or unreadable one starts empty (logged)."""
        cm = self.cluster.get_or_none(CONFIGMAP, name=STATUS_NAME, namespace=self.namespace)
        data = (cm or {}).get("data") or {}
        try:
            history = {str(k): float(v) for k, v in json.loads(data.get("history") or "{}").items()}
            blocked = frozenset(str(p) for p in json.loads(data.get("blocked") or "[]"))
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("status ConfigMap %s/%s unreadable (%s); starting fresh", self.namespace, STATUS_NAME, exc)
            history, blocked = {}, frozenset()
        return Memory(history=history, blocked=blocked, tripped=data.get("breaker") == "open", live=cm)

    def run_once(self) -> Report:
        """One pass; see the module docstring."""
        nodes = self.cluster.list(NODE)
        unhealthy = [n for n in nodes if (c := find_condition(n)) is not None and not c.healthy]
        pods: list[Obj] = []
        for node in unhealthy:
            pods.extend(self.cluster.list(POD, field_selector=f"spec.nodeName={node['metadata']['name']}"))
        pdbs = self.cluster.list(PDB) if unhealthy else []
        pods.extend(budget_pods(pods, pdbs=pdbs, list_pods=self.cluster.list))
        memory = self.read_memory()
        decision = decide(nodes, pods=pods, pdbs=pdbs, policy=self.policy, history=memory.history, now=self.clock())
        if decision.actions and self.verify_node_writes:
            # act only on what the admission policy vouches for (checked only when there is
            # something to do, so a quiet pass stays two reads)
            trusted, untrusted = self.trusted_nodes(nodes)
            if untrusted:
                decision = decide(
                    trusted, pods=pods, pdbs=pdbs, policy=self.policy, history=memory.history, now=self.clock()
                )
                decision = replace(decision, held=(*untrusted, *decision.held))
        if self.dry_run:
            outcomes = tuple(Outcome(a, "would") for a in decision.actions)
            return Report(
                dry_run=True,
                breaker=decision.breaker,
                outcomes=outcomes,
                held=decision.held,
                unhealthy=decision.unhealthy,
            )
        outcomes = tuple(self._apply(a, memory.blocked) for a in decision.actions)
        blocked = {h.pod for h in decision.held if h.why is HoldReason.PDB and h.pod}
        blocked |= {o.action.pod for o in outcomes if o.result == "blocked" and o.action.pod}
        for held in decision.held:
            if held.why is HoldReason.PDB and held.pod and held.pod not in memory.blocked:
                self._event_on_pod(
                    held.pod, EVENT_BLOCKED, f"not evicted from node {held.node}: {held.detail}", "Warning"
                )
        status = self._write_status(decision.breaker, decision.history, blocked, memory.live)
        if decision.breaker.tripped != memory.tripped:
            if decision.breaker.tripped:
                self.cluster.record_event(
                    status, reason=EVENT_PAUSED, message=decision.breaker.message, type="Warning", component=COMPONENT
                )
            else:
                self.cluster.record_event(
                    status, reason=EVENT_RESUMED, message=decision.breaker.message, type="Normal", component=COMPONENT
                )
        return Report(
            dry_run=False, breaker=decision.breaker, outcomes=outcomes, held=decision.held, unhealthy=decision.unhealthy
        )

    def _apply(self, action: Action, reported: frozenset[str] = frozenset()) -> Outcome:
        """Carry out one action and record its Event; an API error fails this action only.

        A refused eviction gets its Warning Event only the first time (``reported``: pods already
        reported as blocked by an earlier pass)."""
        try:
            if action.kind is ActionKind.EVICT and action.pod:
                namespace, name = action.pod.split("/")
                try:
                    self.cluster.evict(name, namespace)
                except EvictionBlockedError as exc:
                    detail = f"PodDisruptionBudget {namespace}/{exc.pdb} allows no disruption"
                    if action.pod not in reported:
                        self._event_on_pod(
                            action.pod, EVENT_BLOCKED, f"not evicted from node {action.node}: {detail}", "Warning"
                        )
                    return Outcome(action, "blocked", detail)
                except NotFoundError:
                    return Outcome(action, "gone", "pod already gone")
                self._event_on_pod(action.pod, action.reason, action.message, "Warning")
            else:
                node = self.cluster.patch(NODE, name=action.node, patch=dict(action.patch or {}))
                self.cluster.record_event(
                    node, reason=action.reason, message=action.message, type="Normal", component=COMPONENT
                )
        except KubeError as exc:
            log.error("%s on node %s failed: %s", action.kind.value, action.node, exc)
            return Outcome(action, "failed", str(exc))
        return Outcome(action, "done")

    def _event_on_pod(self, pod: str, reason: str, message: str, kind: Literal["Normal", "Warning"]) -> None:
        namespace, name = pod.split("/")
        regarding = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}}
        self.cluster.record_event(regarding, reason=reason, message=message, type=kind, component=COMPONENT)

    def _write_status(self, breaker: Breaker, history: Mapping[str, float], blocked: set[str], live: Obj | None) -> Obj:
        """The breaker state where people and alerts can see it; written only when it changed."""
        cm = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": STATUS_NAME,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "gpuchain", "app.kubernetes.io/component": "remediator"},
            },
            "data": {
                "breaker": "open" if breaker.tripped else "closed",
                "message": breaker.message,
                "affectedNodes": json.dumps(list(breaker.affected)),
                "history": json.dumps(dict(sorted(dict(history).items()))),
                "blocked": json.dumps(sorted(blocked)),
            },
        }
        return self.cluster.apply(cm, live=live, known_live=True).object

    async def run(self, interval: float = 10.0, stop: asyncio.Event | None = None) -> None:
        """Pass after pass every ``interval`` seconds until ``stop`` is set; a failed pass is logged, not fatal."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                report = await asyncio.to_thread(self.run_once)
            except KubeError as exc:
                log.error("remediation pass failed: %s", exc)
            except Exception:  # a bug must not end remediation silently: log it whole, retry next pass
                log.exception("remediation pass failed unexpectedly; retrying in %g s", interval)
            else:
                for outcome in report.outcomes:
                    log.info("%s %s: %s", outcome.result, outcome.action.kind.value, outcome.action.message)
            await wait_event(stop, interval)
