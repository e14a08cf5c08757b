"""The node agent's shell: observes the node and its pods through the `Cluster` port, feeds the
state machine in ``gpuchain.mig.agent`` and carries out its actions (label patches, evictions,
Events, the MIG apply on the GPU backend).

``reconcile()`` is synchronous and runs transitions until the machine waits; ``run()`` calls it
when the node (or, while a change waits for pods, one of its pods) changes, on the machine's own
timer (timeouts, eviction retries) and on a slow resync; it never polls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpuchain.common.labels import DEPLOY_PREFIX, MIG_CONFIG, MIG_CONFIG_STATE_REASON
from gpuchain.common.supervise import spawn
from gpuchain.dra.claims import pod_claims
from gpuchain.dra.kinds import DRIVER as DRA_DRIVER
from gpuchain.dra.kinds import RESOURCE_CLAIM
from gpuchain.dra.slices import gpu_index_of
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import GpuError, ReleasedError
from gpuchain.gpu.quarantine import QUARANTINE_ANNOTATION, decode_quarantine
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import NODE, POD, Cluster, EvictionBlockedError, Kind, KubeError, follow
from gpuchain.kube import NotFoundError as KubeNotFoundError
from gpuchain.kube.errors import ForbiddenError
from gpuchain.kube.gpu_resources import uses_gpus
from gpuchain.kube.mig_owner import DRA_MIG_GPUS, dra_mig_gpus
from gpuchain.mig.agent import (
    Action,
    Apply,
    ApplyOutcome,
    Evict,
    LayoutCheck,
    Machine,
    Observation,
    Phase,
    PodRef,
    Policy,
    SetLabels,
    next_timer,
    step,
)
from gpuchain.mig.apply import MigApplyError, ResetRequiredError, apply, gpus_to_change, lost_to_reset_gpus
from gpuchain.mig.config import LayoutError, MigPartedConfig

log = logging.getLogger(__name__)

_DONE_PHASES = ("Succeeded", "Failed")
_MAX_TRANSITIONS = 32
RESYNC_SECONDS = 300.0
"""The safety-net round of ``run`` when no event came (watches drive it otherwise)."""


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _node_label_keys(pod: Mapping[str, Any]) -> set[str]:
    """Node label keys the pod is scheduled by: nodeSelector and required node affinity."""
    spec = _spec(pod)
    keys = set(spec.get("nodeSelector") or {})
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or []:
        keys.update(str(e.get("key")) for e in term.get("matchExpressions") or [])
    return keys


def is_operand_pod(pod: Mapping[str, Any], operands: tuple[str, ...]) -> bool:
    """A pod of a GPU operand: it is scheduled by one of the deploy labels the agent pauses
    (nodeSelector as NVIDIA's operator writes it, or node affinity as gpuchain's does)."""
    keys = _node_label_keys(pod)
    return any(f"{DEPLOY_PREFIX}{op}" in keys for op in operands)


def _ref(pod: Mapping[str, Any]) -> PodRef:
    meta = pod.get("metadata") or {}
    return PodRef(str(meta.get("namespace", "default")), str(meta.get("name", "")))


def classify_pods(
    pods: list[dict[str, Any]], operands: tuple[str, ...]
) -> tuple[tuple[PodRef, ...], tuple[PodRef, ...]]:
    """(operand pods, GPU workload pods) among the node's pods that have not finished."""
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in _DONE_PHASES]
    operand = tuple(_ref(p) for p in live if is_operand_pod(p, operands))
    workload = tuple(_ref(p) for p in live if not is_operand_pod(p, operands) and uses_gpus(p))
    return operand, workload


class MigManager:
    """One node's MIG agent over a cluster and a GPU backend."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        backend: GpuBackend,
        node: str,
        config: MigPartedConfig,
        policy: Policy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.backend = backend
        self.node = node
        self.config = config
        self.policy = policy or Policy()
        self.clock = clock
        self.machine = Machine()
        self._applied: tuple[ApplyOutcome, str] | None = None
        self._evict_errors: tuple[str, ...] = ()
        self._reset_news = False
        """NVML was let go (a GPU reset on this node) since the node was last looked at again."""
        self._quarantine_seen: str | None = None
        self._changing: frozenset[int] = frozenset()
        """The GPUs the change under way touches, as its check found them (``_dra_pods``)."""

    # ---- observe -----------------------------------------------------------------------------

    def observe(self) -> Observation:
        node = self.cluster.get(NODE, name=self.node)
        labels = dict((node.get("metadata") or {}).get("labels") or {})
        pods = [
            p
            for p in self.cluster.list(POD, field_selector=f"spec.nodeName={self.node}")
            if _spec(p).get("nodeName") == self.node  # also where a server ignores field selectors
        ]
        operand, workload = classify_pods(pods, self.policy.operands)
        if self.machine.phase is Phase.WORKLOADS:
            workload += self._dra_pods(pods, operand, workload)
        layout = self._check(node) if self.machine.phase is Phase.CHECK else None
        quarantine = ((node.get("metadata") or {}).get("annotations") or {}).get(QUARANTINE_ANNOTATION)
        recarve = self._lost_to_reset(quarantine, dra_mig_gpus(node)) if self.machine.phase is Phase.IDLE else ()
        return Observation(
            labels=labels,
            operand_pods=operand,
            workload_pods=workload,
            layout=layout,
            applied=self._applied,
            evict_errors=self._evict_errors,
            recarve=recarve,
        )

    def _dra_pods(
        self, pods: list[dict[str, Any]], operand: tuple[PodRef, ...], counted: tuple[PodRef, ...]
    ) -> tuple[PodRef, ...]:
        """The node's other running pods that hold a claim the DRA driver allocated a device of one of
        the GPUs this change touches (``_changing``): the whole GPU, a MIG device or a share of it. Such
        a pod asks for no ``nvidia.com/*`` resource, so ``uses_gpus`` does not see it, and the change
        would destroy its MIG device or reset its GPU's mode under it. Read only while the change waits
        for the GPUs' pods, one claim at a time."""
        seen = set(operand) | set(counted)
        found: list[PodRef] = []
        for pod in pods:
            ref = _ref(pod)
            if ref in seen or (pod.get("status") or {}).get("phase") in _DONE_PHASES:
                continue
            if any(self._claim_on_changing(ref.namespace, name) for name in sorted(pod_claims(pod))):
                found.append(ref)
        return tuple(found)

    def _claim_on_changing(self, namespace: str, name: str) -> bool:
        """Whether the claim has a device on a GPU to change. A claim the MIG manager may not read (a
        role without ``get`` on ResourceClaims, as NVIDIA's) counts as none, as before claims were
        read: the change goes on, and the error says what to grant."""
        try:
            claim = self.cluster.get_or_none(RESOURCE_CLAIM, name=name, namespace=namespace) or {}
        except ForbiddenError as exc:
            log.error(
                "MIG manager: cannot read ResourceClaim %s/%s (%s): a pod holding a GPU of this node through it "
                "does not block the change; grant the MIG manager get on resourceclaims",
                namespace,
                name,
                exc,
            )
            return False
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        return any(
            r.get("driver") == DRA_DRIVER
            and r.get("pool") == self.node
            and gpu_index_of(str(r.get("device", ""))) in self._changing
            for r in results
        )

    def _lost_to_reset(self, quarantine: str | None, dra_owned: frozenset[int]) -> tuple[int, ...]:
        """The GPUs a reset left without their MIG devices (``apply.lost_to_reset_gpus``), looked
        for only with news of a reset: NVML was let go since the last look, the repair loop's
        quarantine changed (a GPU taken out or given back), or it still holds a GPU (each step of
        its repair changes the Node). Otherwise the GPUs are not read at all. An error reading
        them is no news: the node is left as it is, as before. The GPUs whose MIG layout the DRA
        driver owns (``dra_owned``, ``kube.mig_owner``) are never among them: such a GPU holds only
        its claims' instances, none at first, which the layout would take for a reset's loss."""
        due = self._reset_news or quarantine != self._quarantine_seen or bool(decode_quarantine(quarantine))
        self._reset_news, self._quarantine_seen = False, quarantine
        if not due or not self.machine.config:
            return ()
        try:
            lost = lost_to_reset_gpus(self.backend, config=self.config, name=self.machine.config)
        except ReleasedError:
            self._reset_news = True  # look again once NVML is back
            raise
        except (LayoutError, GpuError) as exc:
            log.warning("MIG manager: cannot look for MIG devices lost to a GPU reset: %s", exc)
            return ()
        return tuple(i for i in lost if i not in dra_owned)

    def _check(self, node: Mapping[str, Any]) -> LayoutCheck:
        """The node against the layout, refused when it would change a GPU whose MIG layout the DRA
        driver owns (``kube.mig_owner``: read after this change's ``pending`` state was written); for
        a recarve, its GPUs less those the driver owns now. A
        ``ReleasedError`` is no verdict on it: it ends the round (see ``reconcile``), and the check is
        made again once NVML is back."""
        name = self.machine.config or ""
        if self.machine.recarve:  # the GPUs the DRA driver took since they were found are left to it
            recarve = tuple(i for i in self.machine.recarve if i not in dra_mig_gpus(node))
            return LayoutCheck(has_layout=not recarve, recarve=recarve)
        try:
            todo = gpus_to_change(self.backend, config=self.config, name=name)
            self._changing = frozenset(todo)
            owned = sorted(set(todo) & dra_mig_gpus(node))
            if owned:
                gpus = ", ".join(map(str, owned))
                return LayoutCheck(
                    error=f"layout {name!r} would change GPU {gpus}, whose MIG devices the DRA driver {DRA_DRIVER} "
                    f"creates for claims (Node annotation {DRA_MIG_GPUS}); the MIG manager and the DRA driver never "
                    "change one GPU at once: run the DRA plugin without --partitionable-mig on this node, or remove "
                    f"the {MIG_CONFIG} label"
                )
            return LayoutCheck(has_layout=not todo)
        except ReleasedError:
            raise
        except LayoutError as exc:
            return LayoutCheck(error=str(exc))
        except GpuError as exc:
            return LayoutCheck(error=f"cannot read the GPUs: {exc}")

    # ---- act ---------------------------------------------------------------------------------

    def _perform(self, action: Action) -> None:
        if isinstance(action, SetLabels):
            meta: dict[str, Any] = {"labels": dict(action.labels)}
            if action.reason is not None:
                meta["annotations"] = {MIG_CONFIG_STATE_REASON: action.reason}
            elif action.clear_reason:
                meta["annotations"] = {MIG_CONFIG_STATE_REASON: None}
            self.cluster.patch(NODE, name=self.node, patch={"metadata": meta})
        elif isinstance(action, Evict):
            errors = []
            for pod in action.pods:
                try:
                    self.cluster.evict(pod.name, pod.namespace)
                except EvictionBlockedError as exc:
                    errors.append(str(exc))
                except KubeNotFoundError:
                    continue
            self._evict_errors = tuple(errors)
        elif isinstance(action, Apply):
            self._applied = self._apply(action.config, action.gpus)
        else:
            node = self.cluster.get(NODE, name=self.node)
            simulated = isinstance(self.backend, SimBackend)  # a test cluster must not read as real GPUs
            self.cluster.record_event(
                node,
                reason=action.reason,
                message=f"{action.message} (simulated GPUs)" if simulated else action.message,
                type="Warning" if action.warning else "Normal",
                component="gpuchain-mig-manager",
            )

    def _apply(self, name: str, gpus: tuple[int, ...] = ()) -> tuple[ApplyOutcome, str]:
        """Apply the layout (to ``gpus`` only, if given) and say how it went. A ``ReleasedError`` is
        no outcome: it ends the round with the machine still before the apply, which the next round
        makes again."""
        try:
            result = apply(self.backend, config=self.config, name=name, gpus=gpus)
        except ReleasedError:
            raise
        except ResetRequiredError as exc:
            return ApplyOutcome.RESET_REQUIRED, str(exc)
        except (LayoutError, MigApplyError, GpuError) as exc:
            return ApplyOutcome.FAILED, str(exc)
        except Exception as exc:  # any failure must still end in restore: never leave the node wedged
            log.exception("MIG apply failed unexpectedly")
            return ApplyOutcome.FAILED, f"unexpected error while applying {name!r}: {exc!r}"
        changed = ", ".join(map(str, result.changed_gpus)) or "none"
        return ApplyOutcome.DONE, f"applied MIG layout {name!r} ({len(result.steps)} steps, GPUs changed: {changed})"

    # ---- loop --------------------------------------------------------------------------------

    def reconcile(self) -> Machine:
        """Run transitions until the machine waits on the world. A Kubernetes error, or a
        ``ReleasedError`` (NVML let go for a GPU reset on this node, on another thread, while the
        round ran), leaves the machine where it was and propagates: the same transition is made
        again next time, so nothing is marked failed for it and a layout stopped half-way is
        finished from what the GPUs then have."""
        for _ in range(_MAX_TRANSITIONS):
            before = self.machine
            acted = self.transition()
            if self.machine.phase is before.phase and (self.machine.waiting or not acted):
                break
        return self.machine

    def transition(self) -> bool:
        """One transition: observe, step, perform its actions; whether there were any. ``reconcile``
        runs them until the machine waits; one at a time, another node agent's steps can be put
        between them (``tests/dra/test_dra_mig_owner.py`` does)."""
        before = self.machine
        nxt, actions = step(before, obs=self.observe(), policy=self.policy, now=self.clock())
        if before.phase is Phase.IDLE and nxt.phase is not Phase.IDLE:  # a new change starts
            self._applied, self._evict_errors = None, ()
        for action in actions:
            self._perform(action)
        self.machine = nxt
        return bool(actions)

    async def run(
        self, interval: float = 2.0, *, stop: asyncio.Event | None = None, resync: float = RESYNC_SECONDS
    ) -> None:
        """Reconcile when something the machine waits on changes, until ``stop`` (a round in
        progress is finished first: a layout is never cut off half-applied); never on a poll.

        It wakes on every change of this Node (its labels drive the machine), on every change of
        a pod on this node while a change waits for pods to go (``Machine.waits_on_pods``), on
        the machine's own timer (``next_timer``: the timeout, evictions retried every
        ``interval``), ``interval`` after a Kubernetes API error, and every ``resync`` seconds as
        a safety net: a watch event lost between a watch ending and the next one starting would
        otherwise wait for the next change. An idle node costs nothing between resyncs. While the
        backend has let go of NVML for a GPU reset (``gpu.nvmlrelease``) no round starts: it looks
        again every ``interval`` until NVML is back, so no layout is checked or applied half-blind.
        A release that lands during a round ends it without a verdict (``reconcile``); the next
        round comes once NVML is back, without waiting for the node to change. NVML let go is
        also news of a GPU reset: that round looks for MIG devices a reset destroyed
        (``_lost_to_reset``). A release and take-back while no round was due is not seen here;
        the repair loop's resets are, through its quarantine on the Node.
        """
        wake = asyncio.Event()
        watchers = [
            spawn("MIG manager: node watch", run=lambda: self._watch(NODE, f"metadata.name={self.node}", wake)),
            spawn("MIG manager: pod watch", run=lambda: self._watch(POD, f"spec.nodeName={self.node}", wake)),
        ]
        try:
            while stop is None or not stop.is_set():
                wake.clear()  # before reconciling: a change seen during it wakes the next round
                timeout: float | None
                if self.backend.released:  # NVML let go for a GPU reset on this node: no round until it is back
                    self._reset_news = True
                    await _first(interval, stop)
                    continue
                try:
                    machine = await asyncio.to_thread(self.reconcile)
                    timer = next_timer(machine, policy=self.policy, now=self.clock(), retry=interval)
                    timeout = resync if timer is None else min(timer, resync)
                except KubeError as exc:
                    log.warning("MIG manager: Kubernetes API error, retrying in %g s: %s", interval, exc)
                    timeout = interval
                except ReleasedError as exc:
                    log.info("MIG manager: NVML let go during a round, retrying once it is back: %s", exc)
                    timeout = interval  # then the check above waits for NVML; never a tight loop
                await _first(timeout, wake, stop)
        finally:
            for watcher in watchers:
                watcher.cancel()

    async def _watch(self, kind: Kind, field_selector: str, wake: asyncio.Event) -> None:
        """Wake the reconcile on the changes it cares about. Each watch asks the API server for
        this node's objects only (by field), so other nodes' events never reach the agent; pod
        events wake it only while a change waits on pods. A watch that ends or fails is started
        again (``kube.follow.events``: at once after its timeout or a first 410, else after a
        jittered backoff), and its opening ADDED events wake a round that sees what happened in
        between."""
        what = f"MIG manager: {kind.kind}s ({field_selector})"
        async for _event in follow.events(self.cluster, kind=kind, what=what, field_selector=field_selector):
            if kind == NODE or self.machine.waits_on_pods:
                wake.set()


async def _first(timeout: float, *events: asyncio.Event | None) -> None:
    """Wait until one of ``events`` is set, or ``timeout`` seconds."""
    waits = [asyncio.ensure_future(e.wait()) for e in events if e is not None]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
