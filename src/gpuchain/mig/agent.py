"""The node agent's decisions: a pure state machine over what the node looks like now.

One MIG change walks ``nvidia.com/mig.config.state`` pending -> success | failed | rebooting:

    idle -> check (already there? layout valid?) -> workloads (GPU pods must be gone: drained,
    or evicted under the evict policy) -> pause (deploy labels of the GPU operands set to
    ``paused-for-mig-change``) -> wait for operand pods to go -> apply -> restore -> idle

``step`` takes the machine and an ``Observation`` and returns the next machine plus the
``Action``s the shell (``gpuchain.mig.manager``) must perform; it never does I/O and takes the
time as an argument, so every path (timeouts included) is a plain function call in tests. Every
path out of a change goes through ``restore``, which puts back each label it paused (and any
left paused by an earlier, interrupted run): the node is never left wedged with its operands off.

A node that has its layout (``success``) is looked at again when the shell says a GPU reset may
have destroyed MIG devices (``Observation.recarve``: the repair loop resets a GPU in MIG mode, which
keeps MIG mode but drops its GPU and compute instances). When that is the only difference, those
GPUs are carved again without the workloads phase: a MIG GPU without instances runs no CUDA work, so
no pod is using it. It is still a MIG change: ``pending`` is written first and the check after it
leaves out the GPUs the DRA driver owns by then (``LayoutCheck.recarve``, ``kube.mig_owner``). The
operands are still paused and put back, as for any change, because that is how the device plugin,
feature discovery and the exporter learn of the new MIG devices (the device plugin reads its devices
when it starts).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gpuchain.common.labels import DEPLOY_PREFIX, MIG_CONFIG, MIG_CONFIG_STATE, PAUSED_FOR_MIG_CHANGE

OPERANDS: tuple[str, ...] = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm")
"""GPU clients that hold the devices open and must stop while the layout changes (as upstream)."""


class State(enum.StrEnum):
    """Values of ``nvidia.com/mig.config.state``."""

    PENDING = "pending"
    REBOOTING = "rebooting"
    SUCCESS = "success"
    FAILED = "failed"


class Phase(enum.StrEnum):
    IDLE = "idle"
    CHECK = "check"
    WORKLOADS = "workloads"
    PAUSE = "pause"
    OPERANDS = "operands"
    APPLY = "apply"
    RESTORE = "restore"


@dataclass(frozen=True, kw_only=True)
class Policy:
    """How patient and how forceful the agent is, and what a node without a layout label gets.

    ``default_config`` is the operator's ``migManager.config.default`` (env ``DEFAULT_MIG_CONFIG``):
    a node with no ``nvidia.com/mig.config`` label is treated as if the label named it, so freshly
    joined MIG nodes get the cluster's layout without anyone labelling them. None: leave them alone.
    """

    timeout_s: float = 300.0
    evict: bool = False
    operands: tuple[str, ...] = OPERANDS
    default_config: str | None = None

    def wanted(self, labels: Mapping[str, str]) -> str | None:
        """The layout a node with these labels should have: its label, else the default."""
        return labels.get(MIG_CONFIG) or self.default_config or None


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class LayoutCheck:
    """The node against the wanted layout: ``error`` when it cannot be applied at all. For a
    recarve, ``recarve``: the GPUs still to carve (none: ``has_layout``)."""

    has_layout: bool = False
    error: str | None = None
    recarve: tuple[int, ...] = ()


class ApplyOutcome(enum.StrEnum):
    DONE = "done"
    RESET_REQUIRED = "reset-required"
    FAILED = "failed"


@dataclass(frozen=True, kw_only=True)
class Observation:
    """The node as the shell saw it just now. ``layout`` is filled in the check phase,
    ``applied`` after an Apply action, ``evict_errors`` after an Evict action."""

    labels: Mapping[str, str]
    operand_pods: tuple[PodRef, ...] = ()
    workload_pods: tuple[PodRef, ...] = ()
    layout: LayoutCheck | None = None
    applied: tuple[ApplyOutcome, str] | None = None
    evict_errors: tuple[str, ...] = ()
    recarve: tuple[int, ...] = ()
    """GPUs that lost their MIG devices to a reset and nothing else (``plan.recarvable``); looked
    for only while idle, and only when the shell has news of a reset."""


@dataclass(frozen=True)
class SetLabels:
    """One merge patch of node labels (None removes) and the reason annotation."""

    labels: Mapping[str, str | None]
    reason: str | None = None
    clear_reason: bool = False


@dataclass(frozen=True)
class Evict:
    pods: tuple[PodRef, ...]


@dataclass(frozen=True)
class Apply:
    """Apply the layout; with ``gpus``, to those GPUs only (a re-carve after a reset)."""

    config: str
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class RecordEvent:
    reason: str
    message: str
    warning: bool = False


Action = SetLabels | Evict | Apply | RecordEvent


@dataclass(frozen=True, kw_only=True)
class Machine:
    """The agent's memory. ``config`` is the layout being (or last) worked on; ``outcome`` and
    ``message`` what the change ended with; ``paused`` the labels to put back, each with the
    value it had (None: it was absent, and is removed again)."""

    phase: Phase = Phase.IDLE
    config: str | None = None
    started: float = 0.0
    paused: tuple[tuple[str, str | None], ...] = ()
    outcome: State | None = None
    message: str = ""
    evict_errors: tuple[str, ...] = field(default=())
    recarve: tuple[int, ...] = ()
    """The GPUs this change carves again after a reset (empty: a whole layout change)."""

    @property
    def waiting(self) -> bool:
        """Phases that wait on the world (pods going away, hardware) rather than act."""
        return self.phase in (Phase.IDLE, Phase.WORKLOADS, Phase.OPERANDS)

    @property
    def waits_on_pods(self) -> bool:
        """Phases that wait for pods on the node to go: a pod change is news only then."""
        return self.phase in (Phase.WORKLOADS, Phase.OPERANDS)


PAST_DEADLINE = 0.01
"""How long after a timeout's deadline ``next_timer`` wakes: a timeout counts strictly after it."""


def next_timer(m: Machine, *, policy: Policy, now: float, retry: float) -> float | None:
    """Seconds until the machine must be stepped although nothing it watches changed, or None.

    Only the phases that wait for pods have a timer: both end at their timeout (counted from the
    start of the change), and under the evict policy evictions a PodDisruptionBudget refused are
    tried again every ``retry`` seconds. Idle waits for its Node to change, and nothing else.
    """
    if not m.waits_on_pods:
        return None
    until_timeout = max(0.0, m.started + policy.timeout_s - now) + PAST_DEADLINE
    if m.phase is Phase.WORKLOADS and policy.evict:
        return min(retry, until_timeout)
    return until_timeout


def _finish(m: Machine, outcome: State, message: str) -> Machine:
    return replace(m, phase=Phase.RESTORE, outcome=outcome, message=message)


def leftover_paused(labels: Mapping[str, str]) -> tuple[str, ...]:
    """Deploy labels still paused (by this or an earlier, interrupted agent)."""
    return tuple(sorted(k for k, v in labels.items() if k.startswith(DEPLOY_PREFIX) and v == PAUSED_FOR_MIG_CHANGE))


def to_pause(labels: Mapping[str, str], operands: tuple[str, ...]) -> tuple[tuple[str, str | None], ...]:
    """The operands' deploy labels to pause, with their current values.

    Every operand not switched off (``false``) is paused, also where its label is absent: NVIDIA's
    operator writes ``true`` on every GPU node, gpuchain's operator selects on "not false and not
    paused", so an absent label still runs the operand there.
    """
    keys = (f"{DEPLOY_PREFIX}{op}" for op in operands)
    return tuple((k, labels.get(k)) for k in keys if labels.get(k) not in ("false", PAUSED_FOR_MIG_CHANGE))


def _pods(pods: tuple[PodRef, ...]) -> str:
    shown = ", ".join(map(str, pods[:5]))
    return shown + (f" and {len(pods) - 5} more" if len(pods) > 5 else "")


def step(m: Machine, *, obs: Observation, policy: Policy, now: float) -> tuple[Machine, list[Action]]:
    """One transition. Call again with a fresh observation until the machine is ``waiting``
    and returns no actions; call on every node change and on a timer (for the timeouts)."""
    wanted = policy.wanted(obs.labels)
    state = obs.labels.get(MIG_CONFIG_STATE)

    if m.phase is Phase.IDLE:
        if not wanted:
            leftover = leftover_paused(obs.labels)
            return m, [SetLabels(dict.fromkeys(leftover, "true"))] if leftover else []
        settled = m.config == wanted and state in (State.SUCCESS, State.FAILED, State.REBOOTING)
        if settled and not leftover_paused(obs.labels):
            if obs.recarve and state == State.SUCCESS:
                gpus = ", ".join(map(str, obs.recarve))
                event = RecordEvent(
                    "MigConfigRecarve",
                    f"MIG layout {m.config!r}: GPU {gpus} lost its MIG devices to a GPU reset; creating them again",
                )
                return Machine(phase=Phase.CHECK, config=m.config, started=now, recarve=obs.recarve), [
                    event,
                    SetLabels({MIG_CONFIG_STATE: State.PENDING}),
                ]
            return m, []
        # Labels an interrupted run left paused: their old value is lost, "true" brings them back.
        start = Machine(
            phase=Phase.CHECK,
            config=wanted,
            started=now,
            paused=tuple((k, "true") for k in leftover_paused(obs.labels)),
        )
        return start, [SetLabels({MIG_CONFIG_STATE: State.PENDING})]

    if m.phase is Phase.CHECK:
        check = obs.layout
        if check is None:
            return m, []
        if check.error is not None:
            return _finish(m, State.FAILED, check.error), []
        if check.has_layout and m.recarve:
            return _finish(m, State.SUCCESS, f"the GPUs to carve again are the DRA driver's now: {m.config!r}"), []
        if check.has_layout:
            return _finish(m, State.SUCCESS, f"node already has MIG layout {m.config!r}"), []
        if m.recarve:  # no pod uses a GPU without MIG devices: straight to the operands
            return replace(m, phase=Phase.PAUSE, recarve=check.recarve), []
        return replace(m, phase=Phase.WORKLOADS), []

    if m.phase is Phase.WORKLOADS:
        if not obs.workload_pods:
            return replace(m, phase=Phase.PAUSE), []
        if not policy.evict:
            return _finish(
                m,
                State.FAILED,
                f"{len(obs.workload_pods)} pods still use GPUs on this node ({_pods(obs.workload_pods)}); "
                "drain the node (kubectl drain) or run the MIG manager with --evict",
            ), []
        m = replace(m, evict_errors=obs.evict_errors or m.evict_errors)
        if now - m.started > policy.timeout_s:
            blocked = f": {'; '.join(m.evict_errors)}" if m.evict_errors else ""
            return _finish(
                m,
                State.FAILED,
                f"timed out after {policy.timeout_s:g}s evicting GPU pods ({_pods(obs.workload_pods)}){blocked}",
            ), []
        return m, [Evict(obs.workload_pods)]

    if m.phase is Phase.PAUSE:
        running = to_pause(obs.labels, policy.operands)
        paused = tuple(sorted({**dict(running), **dict(m.paused)}.items()))
        actions: list[Action] = [SetLabels({k: PAUSED_FOR_MIG_CHANGE for k, _ in running})] if running else []
        return replace(m, phase=Phase.OPERANDS, paused=paused), actions

    if m.phase is Phase.OPERANDS:
        if not obs.operand_pods:
            return replace(m, phase=Phase.APPLY), [Apply(m.config or "", m.recarve)]
        if now - m.started > policy.timeout_s:
            return _finish(
                m,
                State.FAILED,
                f"timed out after {policy.timeout_s:g}s waiting for GPU operand pods to stop "
                f"({_pods(obs.operand_pods)}); MIG layout unchanged",
            ), []
        return m, []

    if m.phase is Phase.APPLY:
        if obs.applied is None:
            return m, []
        result, message = obs.applied
        state_for = {
            ApplyOutcome.DONE: State.SUCCESS,
            ApplyOutcome.RESET_REQUIRED: State.REBOOTING,
            ApplyOutcome.FAILED: State.FAILED,
        }
        return _finish(m, state_for[result], message), []

    # RESTORE: put every paused label back and publish the outcome, in one patch.
    outcome = m.outcome or State.FAILED
    labels: dict[str, str | None] = dict(m.paused)
    labels[MIG_CONFIG_STATE] = outcome
    ok = outcome is State.SUCCESS
    done = Machine(phase=Phase.IDLE, config=m.config, outcome=outcome, message=m.message)
    return done, [
        SetLabels(labels, reason=None if ok else m.message, clear_reason=ok),
        RecordEvent("MigConfig" + outcome.capitalize(), f"MIG layout {m.config!r}: {m.message}", warning=not ok),
    ]
