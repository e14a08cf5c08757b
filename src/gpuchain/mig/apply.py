"""Carry out a plan on a backend: the imperative shell around ``gpuchain.mig.plan``.

``apply`` validates the whole layout against the node before it touches anything, so bad input
changes nothing. If the hardware refuses a step half-way, the node is put back the way it was
found (best effort, reported if that fails too). A MIG mode change that waits for a GPU reset
is reset through the backend where it can; otherwise ``ResetRequiredError`` says which GPUs
need a reset or a reboot, which is the `rebooting` state of the node agent.

A ``ReleasedError`` (the backend let go of NVML for a GPU reset on this node) says nothing about
the layout: it stops the apply where it is, without a restore (which could not read the GPUs
either), and reaches the caller, who applies again once NVML is back. ``plan`` clears and carves
again every GPU that differs, so that apply finishes the layout from whatever part was done.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import GpuError, NotSupportedError, ReleasedError
from gpuchain.mig.config import MigPartedConfig
from gpuchain.mig.plan import (
    GpuTarget,
    NodeMigState,
    Step,
    StepKind,
    differences,
    matches,
    observe,
    plan,
    recarvable,
    resolve,
    snapshot,
)


class MigApplyError(RuntimeError):
    """Applying a layout failed on the hardware; the message says what and in what state it left the node."""


class ResetRequiredError(MigApplyError):
    """MIG mode changed on some GPUs but only takes effect after a GPU reset or a reboot."""

    def __init__(self, gpus: Sequence[int]) -> None:
        self.gpus = tuple(gpus)
        names = ", ".join(map(str, self.gpus))
        super().__init__(
            f"MIG mode change on GPU {names} is pending a GPU reset: reset the GPUs (nvidia-smi -r) "
            "or reboot the node, then apply the layout again"
        )


@dataclass(frozen=True, kw_only=True)
class ApplyResult:
    """What apply did (or, on a dry run, would do). No steps: the node already had the layout."""

    config: str
    steps: tuple[Step, ...]
    applied: bool
    targets: tuple[GpuTarget, ...] = ()
    """What each GPU the layout selects has after the apply (or would have, on a dry run)."""

    @property
    def changed_gpus(self) -> tuple[int, ...]:
        return tuple(sorted({s.gpu for s in self.steps}))


class _StepFailed(Exception):
    def __init__(self, step: Step, cause: GpuError) -> None:
        super().__init__(f"{step.describe()}: {cause}")
        self.step = step
        self.cause = cause


def execute(backend: GpuBackend, steps: Sequence[Step]) -> None:
    """Run steps in order. Pending mode changes are reset before the first create (and at the end)."""
    pending: list[int] = []
    for step in steps:
        if step.kind is StepKind.CREATE_MIG_DEVICE and pending:
            _reset(backend, pending)
            pending = []
        try:
            if step.kind is StepKind.DESTROY_GPU_INSTANCE:
                assert step.gi_id is not None
                backend.destroy_gpu_instance(step.gpu, step.gi_id)
            elif step.kind is StepKind.SET_MIG_MODE:
                assert step.enabled is not None
                if backend.set_mig_mode(step.gpu, step.enabled).reset_pending:
                    pending.append(step.gpu)
            else:
                assert step.profile is not None and step.start is not None
                gi_id = backend.create_gpu_instance(step.gpu, profile=step.profile, start=step.start)
                if not step.compute:
                    backend.create_compute_instance(step.gpu, gi_id=gi_id)
                for slices in step.compute:
                    backend.create_compute_instance(step.gpu, gi_id=gi_id, slices=slices)
        except ReleasedError:
            raise
        except GpuError as exc:
            raise _StepFailed(step, exc) from exc
    if pending:
        _reset(backend, pending)


def _reset(backend: GpuBackend, gpus: Sequence[int]) -> None:
    try:
        for gpu in gpus:
            backend.reset_gpu(gpu)
    except NotSupportedError:
        raise ResetRequiredError(gpus) from None
    still = [g for g in gpus if backend.mig_mode(g).reset_pending]
    if still:
        raise ResetRequiredError(still)


def apply(
    backend: GpuBackend, *, config: MigPartedConfig, name: str, dry_run: bool = False, gpus: Sequence[int] = ()
) -> ApplyResult:
    """Give the node the named layout (with ``gpus``, only those of its GPUs: the others are not
    touched even where they differ). Raises LayoutError (nothing touched), ResetRequiredError
    or MigApplyError (the node restored to what it was, or the message says it could not be), or
    ReleasedError (stopped where it was: apply again once NVML is back)."""
    before = observe(backend)
    targets = resolve(before, config=config, name=name)
    if gpus:
        targets = tuple(t for t in targets if t.index in gpus)
    steps = tuple(plan(before, targets))
    if dry_run or not steps:
        return ApplyResult(config=name, steps=steps, applied=False, targets=targets)
    try:
        execute(backend, steps)
    except _StepFailed as exc:
        raise MigApplyError(f"applying {name!r} failed at {exc}; {_restore(backend, before)}") from exc
    left = differences(observe(backend), targets)
    if left:
        raise MigApplyError(f"applying {name!r} did not take effect: {'; '.join(left)}")
    return ApplyResult(config=name, steps=steps, applied=True, targets=targets)


def _restore(backend: GpuBackend, before: NodeMigState) -> str:
    """Put the node back to ``before``; say whether that worked."""
    original: tuple[GpuTarget, ...] = snapshot(before)
    try:
        execute(backend, plan(observe(backend), original))
    except ReleasedError:
        raise
    except (_StepFailed, MigApplyError, GpuError) as exc:
        return f"restoring the previous layout failed too ({exc}); check the GPUs with `gpuchain gpus`"
    return "the previous layout was restored"


def check(backend: GpuBackend, *, config: MigPartedConfig, name: str) -> list[str]:
    """What differs between the node and the named layout; empty when it already has it."""
    state = observe(backend)
    return differences(state, resolve(state, config=config, name=name))


def gpus_to_change(backend: GpuBackend, *, config: MigPartedConfig, name: str) -> tuple[int, ...]:
    """The GPUs the named layout would change (those without their target yet); empty when the
    node has the layout."""
    state = observe(backend)
    return tuple(t.index for t in resolve(state, config=config, name=name) if not matches(state.gpu(t.index), t))


def lost_to_reset_gpus(backend: GpuBackend, *, config: MigPartedConfig, name: str) -> tuple[int, ...]:
    """The GPUs whose MIG devices a GPU reset destroyed, to carve again (``plan.recarvable``):
    empty when the node has the layout or differs from it in any other way."""
    state = observe(backend)
    return recarvable(state, resolve(state, config=config, name=name))
