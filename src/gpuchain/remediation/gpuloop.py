"""The per-GPU repair loop as pure functions: where each GPU stands, and the next step for it.

A GPU whose fault the driver can clear with a reset goes round one loop, one GPU at a time,
while the node's other GPUs keep serving::

    healthy -> quarantined -> drained -> reset -> burn-in -> healthy
                                           |         |
                                           v         v
                                     reboot-requested -> (node rebooted) -> burn-in -> healthy
                                                                               |
                                                                               v
                                                                            failed

- quarantined: the device plugin and DRA plugin withhold the GPU (``gpu.quarantine``); the
  remediator evicts the pods on it, within their PodDisruptionBudgets;
- drained: no container holds the GPU or any of its MIG devices any more;
- reset: the backend's reset of that GPU (``GpuBackend.reset_gpu``), not while the remediator's
  breaker is open;
- burn-in: ``GpuBackend.burn_in``; once it passed, the GPU is healthy again when its health agrees
  (the quiet period after the reset's recovery event), or at once when what is left needs no
  repair (retired pages at DCGM's limit: no reset or reboot lowers them);
- reboot-requested: a reset or burn-in failed, or the GPU was repaired too often within the
  window. The node gets the ``gpuchain.io/reboot-requested`` annotation a reboot daemon acts on,
  a ``GPURebootRequired`` condition, and the remediator's taint; all of it only while the breaker
  is closed. The loop leaves this stage only when the node's boot ID changes;
- failed: the burn-in failed after a reboot. The GPU stays withheld and no reboot is requested, so
  the loop never cycles; after a person repaired and rebooted the node (a new boot ID) the GPU is
  burned in once more (healthy, or failed again).

Everything is recorded in annotation ``gpuchain.io/gpu-loop`` on the Node (stage, cause, attempts,
the stage timeline), so a restarted agent resumes where the last one stopped. No I/O, no clock:
``advance`` and ``complete`` take the time and return the new record; the agent does the work.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpuchain.gpu.xid import Resolution, XidOverride, xid_table
from gpuchain.remediation.model import FAULTS_ANNOTATION, AnnotationError, Fault, decode_faults, load_annotation

LOOP_ANNOTATION = "gpuchain.io/gpu-loop"
REBOOT_ANNOTATION = "gpuchain.io/reboot-requested"
"""Set (to the reason) while a GPU needs the node rebooted; a reboot daemon such as kured can
watch for it (its ``--reboot-sentinel-command`` can test for the annotation)."""
REBOOT_CONDITION = "GPURebootRequired"


class Stage(enum.StrEnum):
    """Where one GPU stands in the loop."""

    HEALTHY = "healthy"
    QUARANTINED = "quarantined"
    DRAINED = "drained"
    RESET = "reset"
    BURN_IN = "burn-in"
    REBOOT = "reboot-requested"
    FAILED = "failed"


IN_REPAIR = frozenset({Stage.QUARANTINED, Stage.DRAINED, Stage.RESET, Stage.BURN_IN})
"""Stages where the loop repairs the GPU on its own: the node is not tainted for it."""


class Work(enum.StrEnum):
    """What the agent must do on the node for a GPU before the next ``complete``."""

    RESET = "reset"
    BURN_IN = "burn-in"


@dataclass(frozen=True, kw_only=True)
class LoopPolicy:
    """How hard the loop tries. Validated on construction; errors name the field."""

    max_resets: int = 1
    """Resets tried within one repair before a reboot is requested."""
    max_repairs: int = 3
    """Repairs of one GPU allowed within ``window_s``; one more asks for a reboot instead."""
    window_s: float = 86400.0
    settle_s: float = 300.0
    """After a passed burn-in, how long to wait for the GPU's health to clear; still unhealthy after
    that means a new fault, and a new repair."""
    timeline_len: int = 32
    xid_resolutions: Mapping[int, XidOverride] = field(default_factory=dict)
    """Per-XID overrides of the XID table (``gpu-health --xid-resolution 109=none``)."""

    def __post_init__(self) -> None:
        for name in ("max_resets", "max_repairs", "timeline_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: {getattr(self, name)} must be at least 1")
        for name in ("window_s", "settle_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: {getattr(self, name)} must be positive (seconds)")


@dataclass(frozen=True)
class Step:
    """One entry of a GPU's timeline: the stage it entered, when, and why."""

    stage: Stage
    at: float
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class GpuRecord:
    """One GPU's place in the loop, as kept on the Node."""

    uuid: str
    index: int | None = None
    stage: Stage = Stage.HEALTHY
    since: float = 0.0
    cause: str = ""
    attempts: int = 0
    """Resets tried in the current repair."""
    repairs: tuple[float, ...] = ()
    """When each repair within the window started."""
    boot_id: str = ""
    """The node's boot ID when the reboot was requested."""
    rebooted: bool = False
    """The node has rebooted during this repair (a failed burn-in now means failed)."""
    passed: bool = False
    """The burn-in passed; waiting for the GPU's health to agree."""
    waiting: str = ""
    """What the loop waits for now, in words (for the doctor and ``describe node``)."""
    timeline: tuple[Step, ...] = field(default=(), compare=False)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"stage": self.stage.value, "since": round(self.since, 3)}
        if self.index is not None:  # GPU 0 too: an index of 0 is not an absent one
            data["index"] = self.index
        optional: dict[str, Any] = {
            "cause": self.cause,
            "attempts": self.attempts,
            "repairs": [round(t, 3) for t in self.repairs],
            "bootID": self.boot_id,
            "rebooted": self.rebooted,
            "passed": self.passed,
            "waiting": self.waiting,
        }
        data.update({k: v for k, v in optional.items() if v not in (None, "", 0, False, [])})
        data["timeline"] = [
            {"stage": s.stage.value, "at": round(s.at, 3), **({"note": s.note} if s.note else {})}
            for s in self.timeline
        ]
        return data


def resolution(fault: Fault, overrides: Mapping[int, XidOverride] | None = None) -> Resolution:
    """What the GPU needs for this fault, by the XID table (NVIDIA's catalog: RESTART_BM and a lost
    GPU need the node rebooted, RESET_GPU and the workflows ending in one a reset; an XID that
    crossed its threshold needs the threshold's resolution) with the config's ``overrides``;
    without overrides, the node's published verdict (``Fault.action``)."""
    return fault.needs(xid_table().with_overrides(overrides)) if overrides else fault.action


def needs_repair(fault: Fault | None, overrides: Mapping[int, XidOverride] | None = None) -> bool:
    """A whole-GPU fault with evidence (an XID, a probe or the GPU lost) whose resolution is a reset
    or a reboot. A fault without evidence (the event stream broke) is not a reason to reset
    anything, and a fault on one MIG device is left to the remediator's eviction."""
    if fault is None or fault.uuid != fault.gpu or (not fault.xids and not fault.lost and not fault.probes):
        return False
    return resolution(fault, overrides).repairs


def advance(
    rec: GpuRecord,
    *,
    fault: Fault | None,
    pods: tuple[str, ...],
    breaker_open: bool,
    boot_id: str,
    now: float,
    policy: LoopPolicy,
) -> tuple[GpuRecord, Work | None]:
    """Move one GPU on as far as this pass allows; the work the agent must do next, if any.

    ``pods`` are the containers still holding the GPU or its MIG devices; ``boot_id`` is the node's
    current boot ID (``status.nodeInfo.bootID``).
    """
    for _ in range(len(Stage)):
        nxt, work = _advance_once(rec, fault, pods, breaker_open, boot_id, now, policy)
        if work is not None or nxt.stage is rec.stage:
            return nxt, work
        rec = nxt
    return rec, None


def _advance_once(
    rec: GpuRecord,
    fault: Fault | None,
    pods: tuple[str, ...],
    breaker_open: bool,
    boot_id: str,
    now: float,
    policy: LoopPolicy,
) -> tuple[GpuRecord, Work | None]:
    stage = rec.stage
    if stage is Stage.HEALTHY:
        if fault is None or not needs_repair(fault, policy.xid_resolutions):
            return rec, None
        repairs = (*_recent(rec.repairs, now, policy), now)
        entered = replace(rec, cause=fault.summary(), attempts=0, repairs=repairs, passed=False, rebooted=False)
        return _to(entered, Stage.QUARANTINED, now, policy, fault.summary()), None
    if stage is Stage.QUARANTINED:
        if pods:
            return _wait(rec, f"waiting for {len(pods)} container(s) to leave the GPU: {', '.join(sorted(pods))}"), None
        return _to(rec, Stage.DRAINED, now, policy), None
    if stage is Stage.DRAINED:
        if breaker_open:
            return _wait(rec, "held: the remediator's breaker is open (too many GPU nodes failing at once)"), None
        if fault is not None and resolution(fault, policy.xid_resolutions) is Resolution.REBOOT_NODE:
            why = "the GPU is lost" if fault.lost else "the XID table's resolution is reboot-node (NVIDIA's RESTART_BM)"
            return _reboot(rec, boot_id, now, policy, why), None
        if len(_recent(rec.repairs, now, policy)) > policy.max_repairs:
            note = f"repaired {len(rec.repairs) - 1} times within {policy.window_s:g}s"
            return _reboot(rec, boot_id, now, policy, note), None
        return _to(replace(rec, attempts=rec.attempts + 1), Stage.RESET, now, policy), Work.RESET
    if stage is Stage.RESET:
        # Only reached when the agent stopped before the reset's result was recorded.
        if rec.attempts >= policy.max_resets + 1:
            return _reboot(rec, boot_id, now, policy, "the reset did not finish"), None
        return replace(rec, attempts=rec.attempts + 1, waiting="resetting the GPU"), Work.RESET
    if stage is Stage.BURN_IN:
        if not rec.passed:
            return _wait(rec, "running the burn-in"), Work.BURN_IN
        if not needs_repair(fault, policy.xid_resolutions):
            # Cleared, or left with what no repair changes (retired pages at DCGM's limit): a GPU
            # in that state that never entered the loop serves, so this one does too.
            return _to(
                replace(rec, attempts=0, passed=False, boot_id=""), Stage.HEALTHY, now, policy, "re-admitted"
            ), None
        if now - rec.since >= policy.settle_s:
            back = _to(replace(rec, passed=False), Stage.HEALTHY, now, policy, "unhealthy again after its burn-in")
            return back, None
        return _wait(rec, "burn-in passed; waiting for the GPU's health to clear (the recovery quiet period)"), None
    if stage is Stage.REBOOT:
        if rec.boot_id and boot_id and boot_id != rec.boot_id:
            after = replace(rec, rebooted=True, passed=False, boot_id="")
            return _to(after, Stage.BURN_IN, now, policy, "node rebooted"), None
        held = " (held: the remediator's breaker is open)" if breaker_open else ""
        return _wait(rec, f"waiting for the node to reboot ({REBOOT_ANNOTATION}){held}"), None
    if rec.boot_id and boot_id and boot_id != rec.boot_id:
        return _to(
            replace(rec, passed=False, boot_id=""), Stage.BURN_IN, now, policy, "node rebooted by a person"
        ), None
    return _wait(rec, f"needs a person: {rec.cause}; repair the GPU and reboot the node to burn it in again"), None


def complete(
    rec: GpuRecord, *, work: Work, ok: bool, detail: str, boot_id: str, now: float, policy: LoopPolicy
) -> GpuRecord:
    """Record the result of the work ``advance`` asked for."""
    if work is Work.RESET:
        if ok:
            return _to(rec, Stage.BURN_IN, now, policy, detail or "reset done")
        if rec.attempts < policy.max_resets:
            return _to(rec, Stage.DRAINED, now, policy, f"reset failed: {detail}; retrying")
        return _reboot(rec, boot_id, now, policy, f"reset failed: {detail}")
    if ok:
        return replace(
            rec,
            passed=True,
            waiting="",
            timeline=_trim((*rec.timeline, Step(Stage.BURN_IN, now, "passed: " + detail)), policy),
        )
    if rec.rebooted:
        return _to(replace(rec, boot_id=boot_id), Stage.FAILED, now, policy, f"burn-in failed after a reboot: {detail}")
    return _reboot(rec, boot_id, now, policy, f"burn-in failed: {detail}")


def _reboot(rec: GpuRecord, boot_id: str, now: float, policy: LoopPolicy, note: str) -> GpuRecord:
    if rec.rebooted:
        return _to(replace(rec, boot_id=boot_id), Stage.FAILED, now, policy, f"{note} after a reboot")
    return _to(replace(rec, boot_id=boot_id, passed=False), Stage.REBOOT, now, policy, note)


def _to(rec: GpuRecord, stage: Stage, now: float, policy: LoopPolicy, note: str = "") -> GpuRecord:
    steps = _trim((*rec.timeline, Step(stage, now, note)), policy)
    return replace(rec, stage=stage, since=now, waiting="", timeline=steps)


def _wait(rec: GpuRecord, what: str) -> GpuRecord:
    return rec if rec.waiting == what else replace(rec, waiting=what)


def _trim(steps: tuple[Step, ...], policy: LoopPolicy) -> tuple[Step, ...]:
    return steps[-policy.timeline_len :]


def _recent(repairs: tuple[float, ...], now: float, policy: LoopPolicy) -> tuple[float, ...]:
    return tuple(t for t in repairs if t >= now - policy.window_s)


# ---- what the node shows ------------------------------------------------------------------------


def withheld(records: Mapping[str, GpuRecord]) -> frozenset[str]:
    """The GPUs the device plugin and DRA plugin must not hand out: every one not healthy."""
    return frozenset(u for u, r in records.items() if r.stage is not Stage.HEALTHY)


def reboot_reason(records: Mapping[str, GpuRecord]) -> str | None:
    """Why the node needs a reboot (None: it does not): the GPUs waiting for one and their causes."""
    waiting = sorted((u, r) for u, r in records.items() if r.stage is Stage.REBOOT)
    if not waiting:
        return None
    return "; ".join(f"{u}: {r.timeline[-1].note if r.timeline else r.cause}" for u, r in waiting)


def keep(rec: GpuRecord, *, now: float, policy: LoopPolicy) -> bool:
    """Whether a record still belongs on the Node: any stage but healthy, or a repair within the window."""
    return rec.stage is not Stage.HEALTHY or bool(_recent(rec.repairs, now, policy))


# ---- the annotation -------------------------------------------------------------------------------


def encode_records(records: Mapping[str, GpuRecord]) -> str:
    """The ``gpuchain.io/gpu-loop`` value (sorted keys, stable). ``{}`` when every GPU is healthy:
    the annotation's presence tells the remediator this node repairs its own GPUs."""
    return json.dumps({u: r.to_json() for u, r in sorted(records.items())}, sort_keys=True, separators=(",", ":"))


def decode_records(text: str | None) -> dict[str, GpuRecord]:
    """Parse the annotation; absent or empty means every GPU healthy. Raises AnnotationError naming it."""
    data = load_annotation(LOOP_ANNOTATION, text=text, empty={})
    records: dict[str, GpuRecord] = {}
    for uuid, item in data.items():
        try:
            steps = tuple(
                Step(Stage(s["stage"]), float(s["at"]), str(s.get("note", ""))) for s in item.get("timeline", ())
            )
            index = item.get("index")
            records[uuid] = GpuRecord(
                uuid=uuid,
                index=None if index is None else int(index),
                stage=Stage(item["stage"]),
                since=float(item.get("since", 0.0)),
                cause=str(item.get("cause", "")),
                attempts=int(item.get("attempts", 0)),
                repairs=tuple(float(t) for t in item.get("repairs", ())),
                boot_id=str(item.get("bootID", "")),
                rebooted=bool(item.get("rebooted", False)),
                passed=bool(item.get("passed", False)),
                waiting=str(item.get("waiting", "")),
                timeline=steps,
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise AnnotationError(
                f"{LOOP_ANNOTATION}: {uuid}: {exc!r}; expected stage one of {', '.join(s.value for s in Stage)}"
            ) from None
    return records


def loop_stages(node: Mapping[str, Any]) -> dict[str, Stage] | None:
    """Each GPU's stage as the Node shows it; None when the node runs no repair loop (no annotation)
    or its annotation is unreadable: the remediator then treats the node as before the loop."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    if LOOP_ANNOTATION not in annotations:
        return None
    try:
        return {u: r.stage for u, r in decode_records(annotations.get(LOOP_ANNOTATION)).items()}
    except AnnotationError:
        return None


def node_action(fault: Fault, stages: Mapping[str, Stage] | None) -> Resolution:
    """What the node as a whole needs for ``fault``. On a node whose loop repairs its own GPUs,
    nothing node-wide (restart-app) until the loop asks for a reboot: the failed GPU is withheld,
    its pods evicted, and the node's other GPUs keep serving."""
    if stages is None:
        return fault.action
    if stages.get(fault.gpu) is Stage.REBOOT:
        return Resolution.REBOOT_NODE
    return Resolution.RESTART_APP


STAGE_MEANS: Mapping[Stage, str] = {
    Stage.HEALTHY: "serving",
    Stage.QUARANTINED: "withheld from new pods; its pods are being evicted",
    Stage.DRAINED: "withheld, no pod on it; the reset comes next",
    Stage.RESET: "being reset",
    Stage.BURN_IN: "reset; being burned in before it takes work again",
    Stage.REBOOT: "needs the node rebooted (gpuchain.io/reboot-requested is set)",
    Stage.FAILED: "failed its burn-in after a reboot; withheld until a person repairs the node",
}
"""What each stage means for the GPU, in words (the doctor's evidence)."""


LEFT_ALONE: Mapping[Resolution, str] = {
    Resolution.NONE: "reported for a person; the GPU keeps serving and its pods keep running",
    Resolution.RESTART_APP: "its pods are evicted; the GPU is not reset and takes new pods",
}
"""What happens to a published fault the loop does not repair, by its resolution (the doctor's evidence)."""


def loop_evidence(node: Mapping[str, Any]) -> list[str]:
    """One line per GPU the node's repair loop holds: its stage, what that means and what the loop
    waits for; and, on a node that runs the loop, one per published fault it leaves alone (its
    resolution is ``none`` or ``restart-app``: nothing for the loop to wait for). Empty when the
    node runs no loop or nothing is held or published."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    if LOOP_ANNOTATION not in annotations:
        return []
    try:
        records = decode_records(annotations.get(LOOP_ANNOTATION))
    except AnnotationError as exc:
        return [f"repair loop: {exc}"]
    lines = []
    for uuid, rec in sorted(records.items()):
        if rec.stage is Stage.HEALTHY:
            continue
        index = "?" if rec.index is None else rec.index
        waiting = f"; waiting for: {rec.waiting}" if rec.waiting else ""
        lines.append(f"repair loop: GPU {index} ({uuid}) is {rec.stage.value}: {STAGE_MEANS[rec.stage]}{waiting}")
    try:
        faults = decode_faults(annotations.get(FAULTS_ANNOTATION))
    except AnnotationError:
        return lines  # the gpu-faults annotation's own finding names it
    for _, fault in sorted(faults.items()):
        held = records.get(fault.gpu)
        if (held is not None and held.stage is not Stage.HEALTHY) or needs_repair(fault):
            continue
        if fault.action in LEFT_ALONE:
            lines.append(
                f"repair loop: leaves {fault.summary()} alone (needs {fault.action.value}): {LEFT_ALONE[fault.action]}"
            )
    return lines
