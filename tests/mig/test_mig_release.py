"""The MIG manager while it has let go of NVML for a GPU reset on its node (``gpu.nvmlrelease``):
no round starts, so no layout is checked or applied half-blind and nothing is marked failed; once
NVML is back the change waiting on the label goes through. A release that lands during a round (the
follower lets go on its own thread) is no verdict either: the round ends where it is and the next
one, once NVML is back, finishes the layout from what the GPUs then have."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable

import pytest
from fakes.fake_pynvml import FakeNvml
from fakes.releasable import ReleasableView

from gpuchain.common.labels import (
    DEPLOY_PREFIX,
    MIG_CONFIG,
    MIG_CONFIG_STATE,
    MIG_CONFIG_STATE_REASON,
    PAUSED_FOR_MIG_CHANGE,
)
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import GpuError, ReleasedError
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import NODE, MemoryCluster
from gpuchain.mig.agent import Phase, Policy
from gpuchain.mig.apply import apply, check
from gpuchain.mig.config import default_config
from gpuchain.mig.manager import MigManager

NODE_NAME = "gpu-node-1"


def _labels(cluster: MemoryCluster) -> dict[str, str]:
    return dict(cluster.get(NODE, name=NODE_NAME)["metadata"].get("labels") or {})


async def _until(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_no_round_while_released_then_the_waiting_change_applies() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    view = ReleasableView(sim)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE_NAME, "labels": {}}}
    cluster = MemoryCluster([node])
    manager = MigManager(
        cluster, backend=view, node=NODE_NAME, config=default_config(), policy=Policy(timeout_s=60, operands=())
    )
    manager.clock = time.monotonic
    view.release()
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(interval=0.05, stop=stop, resync=60))
    try:
        cluster.patch(NODE, name=NODE_NAME, patch={"metadata": {"labels": {MIG_CONFIG: "all-1g.10gb"}}})
        await asyncio.sleep(0.5)  # ten intervals: a round would have read the GPUs by now
        assert view.reads_while_released == 0
        assert _labels(cluster).get(MIG_CONFIG_STATE) != "failed"
        assert not sim.inventory().mig_devices
        view.reacquire()
        await _until(lambda: _labels(cluster).get(MIG_CONFIG_STATE) == "success")
        assert len(sim.inventory().mig_devices) == 56
    finally:
        stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# ---- a release that lands during a round (the follower lets go of NVML on its own thread) ------

MUTATING = ("destroy_gpu_instance", "set_mig_mode", "reset_gpu", "create_gpu_instance", "create_compute_instance")
"""The backend calls that change the GPUs, in the order ``plan`` makes them."""


def release_before_call(backend: GpuBackend, methods: tuple[str, ...], n: int) -> None:
    """Let go of NVML just before the ``n``-th call (1-based) to any of ``methods``, as the release
    board's follower would from its own thread at that moment; that call then meets the release."""
    calls = itertools.count(1)
    for name in methods:
        real = getattr(backend, name)

        def call(*args: object, _real: Callable[..., object] = real, **kwargs: object) -> object:
            if next(calls) == n:
                backend.release()
            return _real(*args, **kwargs)

        setattr(backend, name, call)


def nvml_over(sim: SimBackend) -> NvmlBackend:
    """The NVML adapter over the fake pynvml answering from ``sim``: its own release, not a test view."""
    return NvmlBackend(nvml=FakeNvml(sim))


def _manager(cluster: MemoryCluster, backend: GpuBackend) -> MigManager:
    policy = Policy(timeout_s=60, operands=("device-plugin",))
    return MigManager(cluster, backend=backend, node=NODE_NAME, config=default_config(), policy=policy)


def _node(labels: dict[str, str]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE_NAME, "labels": labels}}


# (layout on the GPUs, layout asked for, mode changes need a reset, the call the release lands on).
# From all-1g.10gb on 8 H100s: calls 1-56 destroy the 56 GPU instances; to all-3g.40gb calls 57+
# create a GPU instance then its compute instance, two per GPU; to all-disabled calls 57-64 set the
# mode. From MIG off with resets: calls 1-8 ask for MIG, 9 resets GPU 0 (before the first create).
MIDWAY = {
    "first-destroy": ("all-1g.10gb", "all-3g.40gb", False, 1),
    "destroys-half-done": ("all-1g.10gb", "all-3g.40gb", False, 29),
    "destroyed-nothing-created": ("all-1g.10gb", "all-3g.40gb", False, 57),
    "gpu-instance-without-compute-instance": ("all-1g.10gb", "all-3g.40gb", False, 58),
    "creates-half-done": ("all-1g.10gb", "all-3g.40gb", False, 73),
    "mode-changes-half-done": ("all-1g.10gb", "all-disabled", False, 60),
    "mode-pending-a-reset": (None, "all-1g.10gb", True, 9),
}


# The NVML adapter resets only for the repair loop (allow_reset): a reset case is the view's alone.
RUNS = [
    (make, case)
    for case, (*_, needs_reset, _n) in MIDWAY.items()
    for make in (ReleasableView, nvml_over)
    if not (needs_reset and make is nvml_over)
]


@pytest.mark.parametrize(
    ("make", "case"), RUNS, ids=[f"{case}-{'nvml' if make is nvml_over else 'view'}" for make, case in RUNS]
)
def test_a_release_mid_apply_is_no_verdict_and_the_next_round_finishes_the_layout(
    make: Callable[[SimBackend], GpuBackend], case: str
) -> None:
    before, wanted, needs_reset, n = MIDWAY[case]
    sim = SimBackend.from_preset("h100-80gb-x8")
    sim.mig_mode_needs_reset = needs_reset
    if before:
        apply(sim, config=default_config(), name=before)
    backend = make(sim)
    cluster = MemoryCluster([_node({MIG_CONFIG: wanted, f"{DEPLOY_PREFIX}device-plugin": "true"})])
    manager = _manager(cluster, backend)
    release_before_call(backend, MUTATING, n)

    with pytest.raises(ReleasedError):
        manager.reconcile()
    labels = _labels(cluster)
    assert labels[MIG_CONFIG_STATE] == "pending"  # no verdict, neither failed nor success
    assert MIG_CONFIG_STATE_REASON not in (cluster.get(NODE, name=NODE_NAME)["metadata"].get("annotations") or {})
    assert labels[f"{DEPLOY_PREFIX}device-plugin"] == PAUSED_FOR_MIG_CHANGE  # off while the GPUs are half-carved
    assert manager.machine.phase is Phase.OPERANDS  # before the apply, which the next round makes again
    assert check(sim, config=default_config(), name=wanted)  # the apply was cut off

    backend.reacquire()
    assert manager.reconcile().phase is Phase.IDLE
    labels = _labels(cluster)
    assert labels[MIG_CONFIG_STATE] == "success"
    assert labels[f"{DEPLOY_PREFIX}device-plugin"] == "true"
    assert check(sim, config=default_config(), name=wanted) == []
    assert all(gi.compute_instances for g in range(8) if sim.mig_mode(g).current for gi in sim.gpu_instances(g))


@pytest.mark.parametrize("where", ["check", "apply"])
async def test_a_release_mid_round_under_run_converges_after_reacquire_without_a_relabel(where: str) -> None:
    """The reviewer's repro: the state must never read failed, and once NVML is back the waiting
    change goes through without anyone touching the node's labels again."""
    sim = SimBackend.from_preset("h100-80gb-x8")
    view = ReleasableView(sim)
    cluster = MemoryCluster([_node({})])
    manager = _manager(cluster, view)
    manager.clock = time.monotonic
    if where == "check":  # the check's first read of the GPUs
        release_before_call(view, ("inventory",), 1)
    else:  # MIG mode is on for GPUs 0-7 (calls 1-8), GPU 0's first MIG device is carved (9-10)
        release_before_call(view, MUTATING, 12)
    states: list[str | None] = []
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(interval=0.05, stop=stop, resync=60))
    try:
        cluster.patch(NODE, name=NODE_NAME, patch={"metadata": {"labels": {MIG_CONFIG: "all-1g.10gb"}}})
        await _until(lambda: view.released)
        for _ in range(10):  # ten intervals: a round would have run (and given a verdict) by now
            states.append(_labels(cluster).get(MIG_CONFIG_STATE))
            await asyncio.sleep(0.05)
        assert set(states) == {"pending"}
        view.reacquire()
        await _until(lambda: _labels(cluster).get(MIG_CONFIG_STATE) == "success")
        assert len(sim.inventory().mig_devices) == 56
    finally:
        stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_a_release_during_the_restore_of_a_refused_step_is_no_verdict_either() -> None:
    """The hardware refuses a create and NVML is let go before the restore: apply stops where it
    is (a restore that cannot read the GPUs proves nothing) and says it was released."""
    sim = SimBackend.from_preset("h100-80gb-x8")
    view = ReleasableView(sim)

    def refused(gpu: int, profile: str, start: int) -> int:
        view.release()
        raise GpuError(f"GPU {gpu}: insufficient resources for {profile} at {start}")

    view.create_gpu_instance = refused  # type: ignore[method-assign]
    with pytest.raises(ReleasedError):
        apply(view, config=default_config(), name="all-1g.10gb")
