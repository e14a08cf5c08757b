"""The node agent on MemoryCluster + SimBackend: every path ends with the operands' labels
restored and the state label saying what happened."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from fakes.fake_pynvml import FakeNvml

from gpuchain.api.config.v1.config import parse_config as plugin_config
from gpuchain.common.labels import MIG_CONFIG, MIG_CONFIG_STATE, MIG_CONFIG_STATE_REASON, PAUSED_FOR_MIG_CHANGE
from gpuchain.deviceplugin.resources import map_resources
from gpuchain.discovery.labels import gfd_labels
from gpuchain.dra.claims import allocation_status, resource_claim
from gpuchain.dra.kinds import RESOURCE_CLAIM
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import NODE, POD, Kind, MemoryCluster
from gpuchain.kube.errors import ForbiddenError
from gpuchain.mig.agent import (
    Apply,
    ApplyOutcome,
    LayoutCheck,
    Machine,
    Observation,
    Phase,
    PodRef,
    Policy,
    SetLabels,
    State,
    next_timer,
    step,
)
from gpuchain.mig.apply import apply
from gpuchain.mig.config import default_config
from gpuchain.mig.manager import MigManager, classify_pods

NODE_NAME = "gpu-node-1"
OPERANDS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter")
DEPLOY = {f"nvidia.com/gpu.deploy.{op}": "true" for op in OPERANDS}


def nvml_over(sim: SimBackend) -> NvmlBackend:
    """NvmlBackend over the fake pynvml answering from ``sim`` (the NVML code path, no driver)."""
    return NvmlBackend(nvml=FakeNvml(sim))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _node(labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE_NAME, "labels": labels}}


def _pod(
    name: str,
    namespace: str = "gpu-operator",
    selector: dict[str, str] | None = None,
    gpus: dict[str, int] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "x"}
    if gpus:
        container["resources"] = {"limits": {k: str(v) for k, v in gpus.items()}}
    spec: dict[str, Any] = {"nodeName": NODE_NAME, "containers": [container]}
    if selector:
        spec["nodeSelector"] = selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": spec,
        "status": {"phase": "Running"},
    }


def _operand_pods() -> list[dict[str, Any]]:
    return [_pod(f"{op}-abcde", selector={f"nvidia.com/gpu.deploy.{op}": "true"}) for op in OPERANDS]


def _labels(cluster: MemoryCluster) -> dict[str, str]:
    return dict(cluster.get(NODE, name=NODE_NAME)["metadata"]["labels"])


def _reason(cluster: MemoryCluster) -> str | None:
    return cluster.get(NODE, name=NODE_NAME)["metadata"].get("annotations", {}).get(MIG_CONFIG_STATE_REASON)


def _setup(
    backend: GpuBackend, extra: list[dict[str, Any]] | None = None, policy: Policy | None = None
) -> tuple[MemoryCluster, MigManager, Clock]:
    cluster = MemoryCluster([_node(dict(DEPLOY)), *_operand_pods(), *(extra or [])])
    clock = Clock()
    manager = MigManager(
        cluster,
        backend=backend,
        node=NODE_NAME,
        config=default_config(),
        policy=policy or Policy(timeout_s=60),
        clock=clock,
    )
    return cluster, manager, clock


def _relabel(cluster: MemoryCluster, config: str) -> None:
    cluster.patch(NODE, name=NODE_NAME, patch={"metadata": {"labels": {MIG_CONFIG: config}}})


def _stop_operands(cluster: MemoryCluster) -> None:
    """What the DaemonSet controller does once the deploy labels no longer select the node."""
    for pod in classify_pods(cluster.list(POD, field_selector=f"spec.nodeName={NODE_NAME}"), OPERANDS)[0]:
        cluster.delete(POD, name=pod.name, namespace=pod.namespace)


MIXED = plugin_config("version: v1\nflags:\n  migStrategy: mixed\n")


def _resources(backend: GpuBackend) -> dict[str, int]:
    """What the device plugin announces (mixed strategy) when it restarts on this inventory."""
    return {r.name: len(r.devices) for r in map_resources(backend.inventory(), MIXED)}


def _mig_count_label(backend: GpuBackend) -> str | None:
    """What feature discovery labels the node with for the 1g.10gb profile (mixed strategy)."""
    return gfd_labels(backend.inventory(), config=MIXED).get("nvidia.com/mig-1g.10gb.count")


def test_h100_node_goes_to_56_mig_devices_and_back_to_8_gpus() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    cluster, manager, _ = _setup(sim)
    assert _resources(sim) == {"nvidia.com/gpu": 8}

    _relabel(cluster, "all-1g.10gb")
    manager.reconcile()
    labels = _labels(cluster)
    assert labels[MIG_CONFIG_STATE] == "pending"
    assert all(labels[k] == PAUSED_FOR_MIG_CHANGE for k in DEPLOY)
    assert manager.machine.phase is Phase.OPERANDS and not sim.inventory().mig_devices  # waits for the pods

    _stop_operands(cluster)
    manager.reconcile()
    labels = _labels(cluster)
    assert labels[MIG_CONFIG_STATE] == "success" and all(labels[k] == "true" for k in DEPLOY)
    assert _resources(sim) == {"nvidia.com/mig-1g.10gb": 56}
    assert _mig_count_label(sim) == "56"

    cluster.create(_operand_pods()[0])  # the restored operands come back ...
    _relabel(cluster, "all-disabled")
    manager.reconcile()
    assert _labels(cluster)[MIG_CONFIG_STATE] == "pending"
    _stop_operands(cluster)  # ... and go again for the next change
    manager.reconcile()
    assert _labels(cluster)[MIG_CONFIG_STATE] == "success"
    assert _resources(sim) == {"nvidia.com/gpu": 8}
    assert _mig_count_label(sim) is None
    reasons = [e["reason"] for e in cluster.events_for(cluster.get(NODE, name=NODE_NAME))]
    assert reasons == ["MigConfigSuccess", "MigConfigSuccess"]


def test_invalid_layout_fails_with_a_reason_and_leaves_the_node_unchanged() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
    before = sim.inventory()
    cluster, manager, _ = _setup(sim)
    _relabel(cluster, "all-1g.18gb")  # an H200 layout on an H100 node
    manager.reconcile()
    assert _labels(cluster) == {**DEPLOY, MIG_CONFIG: "all-1g.18gb", MIG_CONFIG_STATE: "failed"}
    assert "selects none of this node's GPUs (models: H100-80GB)" in (_reason(cluster) or "")
    assert sim.inventory() == before
    events = cluster.events_for(cluster.get(NODE, name=NODE_NAME))
    assert [(e["reason"], e["type"]) for e in events] == [("MigConfigFailed", "Warning")]

    _relabel(cluster, "no-such-layout")
    manager.reconcile()
    assert _labels(cluster)[MIG_CONFIG_STATE] == "failed"
    assert "no MIG layout named 'no-such-layout'" in (_reason(cluster) or "")


def test_timeout_waiting_for_operands_restores_the_labels() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    cluster, manager, clock = _setup(sim)
    _relabel(cluster, "all-1g.10gb")
    manager.reconcile()
    assert all(_labels(cluster)[k] == PAUSED_FOR_MIG_CHANGE for k in DEPLOY)
    clock.now += 30
    manager.reconcile()
    assert _labels(cluster)[MIG_CONFIG_STATE] == "pending"
    clock.now += 31  # past the 60 s timeout; the operand pods never went
    manager.reconcile()
    labels = _labels(cluster)
    assert labels[MIG_CONFIG_STATE] == "failed" and all(labels[k] == "true" for k in DEPLOY)
    assert "timed out after 60s waiting for GPU operand pods" in (_reason(cluster) or "")
    assert not sim.inventory().mig_devices
    manager.reconcile()  # settled: no retry loop on the same failed layout
    assert manager.machine.phase is Phase.IDLE and _labels(cluster)[MIG_CONFIG_STATE] == "failed"


def test_gpu_workloads_block_the_change_with_a_clear_reason() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    train = _pod("train-0", "ml", gpus={"nvidia.com/gpu": 2})
    cpu_only = _pod("web-0", "default")
    cluster, manager, _ = _setup(sim, [train, cpu_only])
    _relabel(cluster, "all-1g.10gb")
    manager.reconcile()
    labels = _labels(cluster)
    assert labels[MIG_CONFIG_STATE] == "failed" and all(labels[k] == "true" for k in DEPLOY)
    assert _reason(cluster) == (
        "1 pods still use GPUs on this node (ml/train-0); drain the node (kubectl drain) "
        "or run the MIG manager with --evict"
    )
    assert cluster.calls.by_verb["evict"] == 0 and not sim.inventory().mig_devices

    _relabel(cluster, "all-balanced")  # draining the node unblocks it
    cluster.delete(POD, name="train-0", namespace="ml")
    manager.reconcile()
    _stop_operands(cluster)
    manager.reconcile()
    assert _labels(cluster)[MIG_CONFIG_STATE] == "success"


def test_evict_policy_evicts_gpu_pods_through_the_eviction_api() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    pods = [_pod("infer-0", "ml", gpus={"nvidia.com/mig-1g.10gb": 1}), _pod("web-0", "default")]
    cluster, manager, _ = _setup(sim, pods, Policy(timeout_s=60, evict=True))
    _relabel(cluster, "all-1g.10gb")
    manager.reconcile()
    assert cluster.calls.by_verb["evict"] == 1
    assert cluster.get_or_none(POD, name="web-0", namespace="default") is not None
    _stop_operands(cluster)
    manager.reconcile()
    assert _labels(cluster)[MIG_CONFIG_STATE] == "success"


def test_eviction_blocked_by_a_pdb_times_out_naming_it() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "train-pdb", "namespace": "ml"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}},
    }
    train = _pod("train-0", "ml", gpus={"nvidia.com/gpu": 8}, labels={"app": "train"})
    cluster, manager, clock = _setup(sim, [train, pdb], Policy(timeout_s=60, evict=True))
    _relabel(cluster, "all-1g.10gb")
    manager.reconcile()
    assert _labels(cluster)[MIG_CONFIG_STATE] == "pending" and manager.machine.phase is Phase.WORKLOADS
    assert _labels(cluster)["nvidia.com/gpu.deploy.device-plugin"] == "true"  # not paused yet
    clock.now += 61
    manager.reconcile()
    assert _labels(cluster)[MIG_CONFIG_STATE] == "failed"
    assert "PodDisruptionBudget ml/train-pdb" in (_reason(cluster) or "")
    assert all(_labels(cluster)[k] == "true" for k in DEPLOY)


def test_node_already_in_the_layout_succeeds_without_pausing_operands() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    cluster, manager, _ = _setup(sim)
    _relabel(cluster, "all-disabled")
    manager.reconcile()
    assert _labels(cluster)[MIG_CONFIG_STATE] == "success"
    patches = cluster.calls.by_verb["patch"]
    assert patches == 3  # our relabel, pending, success: the operands were never paused


def test_labels_left_paused_by_an_interrupted_run_are_restored() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    cluster, manager, _ = _setup(sim)
    cluster.patch(
        NODE,
        name=NODE_NAME,
        patch={
            "metadata": {
                "labels": {
                    "nvidia.com/gpu.deploy.device-plugin": PAUSED_FOR_MIG_CHANGE,
                    MIG_CONFIG: "all-disabled",
                    MIG_CONFIG_STATE: "pending",
                }
            }
        },
    )
    manager.reconcile()
    labels = _labels(cluster)
    assert labels[MIG_CONFIG_STATE] == "success" and labels["nvidia.com/gpu.deploy.device-plugin"] == "true"


def test_pending_reset_is_reported_as_rebooting_and_labels_restored() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    sim.mig_mode_needs_reset = True
    cluster, manager, _ = _setup(nvml_over(sim))
    _relabel(cluster, "all-1g.10gb")
    manager.reconcile()
    _stop_operands(cluster)
    manager.reconcile()
    labels = _labels(cluster)
    assert labels[MIG_CONFIG_STATE] == "rebooting" and all(labels[k] == "true" for k in DEPLOY)
    assert "pending a GPU reset" in (_reason(cluster) or "")
    for i in range(8):
        sim.reset_gpu(i)  # the node reboots; a fresh agent picks the change up again
    fresh = MigManager(
        cluster, backend=nvml_over(sim), node=NODE_NAME, config=default_config(), policy=Policy(timeout_s=60)
    )
    fresh.reconcile()
    _stop_operands(cluster)
    fresh.reconcile()
    assert _labels(cluster)[MIG_CONFIG_STATE] == "success" and _reason(cluster) is None
    assert len(sim.inventory().mig_devices) == 56


async def test_run_reacts_to_the_label() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    cluster = MemoryCluster([_node({})])
    manager = MigManager(cluster, backend=sim, node=NODE_NAME, config=default_config(), policy=Policy(timeout_s=5))
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(interval=5.0, stop=stop))
    await asyncio.sleep(0.05)
    _relabel(cluster, "all-7g.80gb")
    for _ in range(100):
        if _labels(cluster).get(MIG_CONFIG_STATE) == "success":
            break
        await asyncio.sleep(0.02)
    stop.set()
    task.cancel()
    assert _labels(cluster).get(MIG_CONFIG_STATE) == "success"  # woken by the watch, not the 5 s timer
    assert len(sim.inventory().mig_devices) == 8


async def test_run_is_not_woken_by_another_nodes_changes() -> None:
    other = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-2", "labels": {}}}
    cluster = MemoryCluster([_node({}), other])
    manager = MigManager(
        cluster, backend=SimBackend.from_preset("h100-80gb-x8"), node=NODE_NAME, config=default_config()
    )
    rounds: list[None] = []
    reconcile = manager.reconcile

    def counted() -> Any:
        rounds.append(None)
        return reconcile()

    manager.reconcile = counted  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(interval=5.0, stop=stop))

    async def settled() -> int:
        before = -1
        while before != len(rounds):
            before = len(rounds)
            await asyncio.sleep(0.05)
        return before

    try:
        start = await settled()
        for i in range(5):
            cluster.patch(NODE, name="gpu-node-2", patch={"metadata": {"labels": {MIG_CONFIG: f"c{i}"}}})
        assert await settled() == start  # the watch follows this node only
        cluster.patch(NODE, name=NODE_NAME, patch={"metadata": {"labels": {"other": "1"}}})
        assert await settled() > start
    finally:
        stop.set()
        task.cancel()


async def _rounds_settled(rounds: list[None], quiet: float = 0.3) -> int:
    """The number of reconcile rounds once none has come for ``quiet`` seconds."""
    before = -1
    while before != len(rounds):
        before = len(rounds)
        await asyncio.sleep(quiet)
    return before


async def _until(condition: Any, timeout: float = 20.0) -> None:
    """Poll ``condition()`` (bounded: a loaded CI machine may be slow, never this slow)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def _counting(manager: MigManager) -> list[None]:
    rounds: list[None] = []
    reconcile = manager.reconcile

    def counted() -> Any:
        rounds.append(None)
        return reconcile()

    manager.reconcile = counted  # type: ignore[method-assign]
    return rounds


async def test_run_does_not_poll_an_idle_node() -> None:
    """Idle, the agent reads nothing between events: with a 0.05 s --interval the old loop read
    the Node and listed its pods 20 times a second; pod churn on the node does not wake it either."""
    cluster, manager, _ = _setup(SimBackend.from_preset("h100-80gb-x8"))
    manager.clock = time.monotonic
    rounds = _counting(manager)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(interval=0.05, stop=stop, resync=60))
    try:
        await _until(lambda: cluster.calls.by_verb["watch"] == 2)  # their opening events wake one round
        start = await _rounds_settled(rounds)
        cluster.calls.reset()
        await asyncio.sleep(0.5)
        cluster.create(_pod("web-0", namespace="default"))
        cluster.delete(POD, name="web-0", namespace="default")
        await asyncio.sleep(0.2)
        assert len(rounds) == start
        assert cluster.calls.by_verb["get"] == cluster.calls.by_verb["list"] == 0
    finally:
        stop.set()
        task.cancel()


async def test_run_resyncs_as_a_safety_net() -> None:
    _, manager, _ = _setup(SimBackend.from_preset("h100-80gb-x8"))
    rounds = _counting(manager)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(interval=5.0, stop=stop, resync=0.1))
    try:
        await _until(lambda: len(rounds) >= 4)  # no event comes: every round after the first is a resync
    finally:
        stop.set()
        task.cancel()


async def test_run_is_woken_by_the_operand_pods_going() -> None:
    """While the change waits for the operands' pods, their deletion wakes it (no 5 s timer, no resync)."""
    sim = SimBackend.from_preset("h100-80gb-x8")
    cluster, manager, _ = _setup(sim, policy=Policy(timeout_s=60, operands=OPERANDS))
    manager.clock = time.monotonic
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(interval=5.0, stop=stop, resync=60))
    try:
        await asyncio.sleep(0.05)
        _relabel(cluster, "all-1g.10gb")
        await _until(lambda: manager.machine.phase is Phase.OPERANDS)
        _stop_operands(cluster)
        started = time.monotonic()
        await _until(lambda: _labels(cluster).get(MIG_CONFIG_STATE) == "success")
        assert time.monotonic() - started < 5.0  # woken by the pods going: its timeout and resync are 60 s
        assert len(sim.inventory().mig_devices) == 56
    finally:
        stop.set()
        task.cancel()


def test_next_timer_only_while_waiting_for_pods() -> None:
    policy = Policy(timeout_s=300)
    evicting = Policy(timeout_s=300, evict=True)
    assert next_timer(Machine(), policy=policy, now=1000.0, retry=2.0) is None
    assert next_timer(Machine(phase=Phase.IDLE, config="all-1g.10gb"), policy=evicting, now=1000.0, retry=2.0) is None
    operands = Machine(phase=Phase.OPERANDS, config="all-1g.10gb", started=1000.0)
    assert next_timer(operands, policy=policy, now=1100.0, retry=2.0) == pytest.approx(
        200.01
    )  # the timeout, just past it
    assert next_timer(operands, policy=policy, now=1400.0, retry=2.0) == pytest.approx(0.01)
    workloads = Machine(phase=Phase.WORKLOADS, config="all-1g.10gb", started=1000.0)
    assert next_timer(workloads, policy=evicting, now=1100.0, retry=2.0) == 2.0  # evictions retried
    assert next_timer(workloads, policy=evicting, now=1299.5, retry=2.0) == pytest.approx(0.51)


# ---- the pure state machine ------------------------------------------------------------------


def test_step_walks_the_phases_and_every_end_restores() -> None:
    policy = Policy(timeout_s=10, operands=(*OPERANDS, "dcgm", "nvsm"))
    # dcgm is switched off on this node; nvsm has no label (runs under gpuchain's "not false" affinity)
    labels = {**DEPLOY, "nvidia.com/gpu.deploy.dcgm": "false", MIG_CONFIG: "all-1g.10gb"}
    m, actions = step(Machine(), obs=Observation(labels=labels), policy=policy, now=0.0)
    assert m.phase is Phase.CHECK and actions == [SetLabels({MIG_CONFIG_STATE: State.PENDING})]
    m, _ = step(m, obs=Observation(labels=labels, layout=LayoutCheck()), policy=policy, now=1.0)
    m, _ = step(m, obs=Observation(labels=labels), policy=policy, now=1.0)
    assert m.phase is Phase.PAUSE
    m, actions = step(m, obs=Observation(labels=labels), policy=policy, now=1.0)
    nvsm = "nvidia.com/gpu.deploy.nvsm"
    assert actions == [SetLabels(dict.fromkeys([*DEPLOY, nvsm], PAUSED_FOR_MIG_CHANGE))]
    assert dict(m.paused) == {**DEPLOY, nvsm: None}
    busy = Observation(labels=labels, operand_pods=(PodRef("gpu-operator", "dp"),))
    m, actions = step(m, obs=busy, policy=policy, now=5.0)
    assert m.phase is Phase.OPERANDS and actions == []
    m, actions = step(m, obs=Observation(labels=labels), policy=policy, now=6.0)
    assert actions == [Apply("all-1g.10gb")]
    m, _ = step(m, obs=Observation(labels=labels, applied=(ApplyOutcome.FAILED, "boom")), policy=policy, now=7.0)
    assert (m.phase, m.outcome) == (Phase.RESTORE, State.FAILED)
    m, actions = step(m, obs=Observation(labels=labels), policy=policy, now=7.0)
    restore = actions[0]
    assert isinstance(restore, SetLabels)
    assert restore.labels == {**DEPLOY, nvsm: None, MIG_CONFIG_STATE: State.FAILED} and restore.reason == "boom"
    assert m.phase is Phase.IDLE


@pytest.mark.parametrize("state", ["success", "failed", "rebooting"])
def test_step_is_quiet_once_settled(state: str) -> None:
    labels = {MIG_CONFIG: "all-disabled", MIG_CONFIG_STATE: state}
    m = Machine(phase=Phase.IDLE, config="all-disabled")
    assert step(m, obs=Observation(labels=labels), policy=Policy(), now=0.0) == (m, [])
    assert step(Machine(), obs=Observation(labels={}), policy=Policy(), now=0.0) == (Machine(), [])


def test_step_restores_leftover_paused_labels_even_without_a_layout_label() -> None:
    labels = {"nvidia.com/gpu.deploy.dcgm": PAUSED_FOR_MIG_CHANGE, "nvidia.com/gpu.deploy.driver": "true"}
    m, actions = step(Machine(), obs=Observation(labels=labels), policy=Policy(), now=0.0)
    assert m == Machine() and actions == [SetLabels({"nvidia.com/gpu.deploy.dcgm": "true"})]


def test_an_unexpected_apply_crash_still_restores_the_labels() -> None:
    class Broken(SimBackend):
        def set_mig_mode(self, gpu_index: int, enabled: bool):  # type: ignore[no-untyped-def]
            raise RuntimeError("driver wedged")

    sim = Broken(SimBackend.from_preset("h100-80gb-x8").topology)
    cluster, manager, _ = _setup(sim)
    _relabel(cluster, "all-1g.10gb")
    manager.reconcile()
    _stop_operands(cluster)
    manager.reconcile()
    labels = _labels(cluster)
    assert labels[MIG_CONFIG_STATE] == "failed" and all(labels[k] == "true" for k in DEPLOY)
    assert "driver wedged" in (_reason(cluster) or "")


# ---- migManager.config.default (DEFAULT_MIG_CONFIG) --------------------------------------------


def test_unlabelled_node_gets_the_default_layout_through_the_same_phases() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    cluster, manager, _ = _setup(sim, policy=Policy(timeout_s=60, default_config="all-1g.10gb"))
    assert MIG_CONFIG not in _labels(cluster)
    manager.reconcile()
    labels = _labels(cluster)
    assert labels[MIG_CONFIG_STATE] == "pending" and all(labels[k] == PAUSED_FOR_MIG_CHANGE for k in DEPLOY)
    assert manager.machine.phase is Phase.OPERANDS and not sim.inventory().mig_devices
    _stop_operands(cluster)
    manager.reconcile()
    labels = _labels(cluster)
    assert labels[MIG_CONFIG_STATE] == "success" and all(labels[k] == "true" for k in DEPLOY)
    assert MIG_CONFIG not in labels, "the default is applied as if labelled, the label is not written"
    assert _resources(sim) == {"nvidia.com/mig-1g.10gb": 56}
    manager.reconcile()
    assert manager.machine.phase is Phase.IDLE and _labels(cluster)[MIG_CONFIG_STATE] == "success"


def test_a_label_wins_over_the_default() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    cluster, manager, _ = _setup(sim, policy=Policy(timeout_s=60, default_config="all-1g.10gb"))
    _relabel(cluster, "all-disabled")
    manager.reconcile()
    assert _labels(cluster)[MIG_CONFIG_STATE] == "success" and manager.machine.config == "all-disabled"
    assert not sim.inventory().mig_devices


def test_step_uses_the_default_only_without_a_label() -> None:
    policy = Policy(default_config="all-1g.10gb")
    m, actions = step(Machine(), obs=Observation(labels={}), policy=policy, now=0.0)
    assert (m.phase, m.config) == (Phase.CHECK, "all-1g.10gb")
    assert actions == [SetLabels({MIG_CONFIG_STATE: State.PENDING})]
    m, _ = step(Machine(), obs=Observation(labels={MIG_CONFIG: "all-disabled"}), policy=policy, now=0.0)
    assert m.config == "all-disabled"
    assert step(Machine(), obs=Observation(labels={}), policy=Policy(), now=0.0) == (Machine(), [])


def _claim(name: str, namespace: str, device: str, pool: str = NODE_NAME) -> dict[str, Any]:
    """A ResourceClaim the scheduler allocated ``device`` of gpuchain's DRA driver, from ``pool``."""
    return {**resource_claim(name, namespace=namespace), "status": allocation_status(pool, [("gpu", device)])}


def _claim_pod(name: str, namespace: str, claim: str, generated: bool = False) -> dict[str, Any]:
    """A pod that uses ``claim``: by name, or made from a template (named in its status)."""
    pod = _pod(name, namespace)
    entry = (
        {"name": "gpu", "resourceClaimTemplateName": "t"} if generated else {"name": "gpu", "resourceClaimName": claim}
    )
    pod["spec"]["resourceClaims"] = [entry]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    if generated:
        pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim}]
    return pod


def test_pods_with_dra_claims_on_the_gpus_to_change_block_the_change() -> None:
    """A pod that holds a GPU through a DRA claim asks for no nvidia.com/* resource; the change counts
    it when its claim has a device of gpuchain's driver on one of the GPUs it changes (a whole GPU, a
    MIG device, a share), from this node's pool, and leaves the other claims' pods alone."""
    sim = SimBackend.from_preset("h100-80gb-x8")
    apply(sim, config=default_config(), name="all-1g.10gb", gpus=(4, 5, 6, 7))  # those GPUs have the layout already
    claims = [
        _claim("whole-2", "ml", "gpu-2"),
        _claim("made-from-template", "ml", "gpu-3-mig-1g10gb-9-0"),
        _claim("mig-on-5", "ml", "gpu-5-mig-1g10gb-9-0"),  # a GPU the layout does not change
        _claim("elsewhere", "ml", "gpu-1", pool="gpu-node-2"),  # another node's GPU
    ]
    pods = [
        _claim_pod("train-0", "ml", "whole-2"),
        _claim_pod("train-1", "ml", "made-from-template", generated=True),
        _claim_pod("infer-0", "ml", "mig-on-5"),
        _claim_pod("remote-0", "ml", "elsewhere"),
    ]
    cluster, manager, _ = _setup(sim, [*claims, *pods])
    _relabel(cluster, "all-1g.10gb")
    manager.reconcile()
    assert _labels(cluster)[MIG_CONFIG_STATE] == "failed"
    assert _reason(cluster) == (
        "2 pods still use GPUs on this node (ml/train-0, ml/train-1); drain the node (kubectl drain) "
        "or run the MIG manager with --evict"
    )
    assert len(sim.inventory().mig_devices) == 4 * 7  # GPUs 0 to 3 untouched

    for name in ("train-0", "train-1"):
        cluster.delete(POD, name=name, namespace="ml")
    _relabel(cluster, "all-balanced")  # their GPUs drained: infer-0's GPU 5 changes too, and blocks it
    manager.reconcile()
    assert _reason(cluster) == (
        "1 pods still use GPUs on this node (ml/infer-0); drain the node (kubectl drain) "
        "or run the MIG manager with --evict"
    )
    cluster.delete(POD, name="infer-0", namespace="ml")
    _relabel(cluster, "all-1g.10gb")
    manager.reconcile()
    _stop_operands(cluster)
    manager.reconcile()
    assert _labels(cluster)[MIG_CONFIG_STATE] == "success" and len(sim.inventory().mig_devices) == 8 * 7


class _NoClaimsRole(MemoryCluster):
    """A cluster whose RBAC gives the MIG manager no ResourceClaims (NVIDIA's mig-manager role)."""

    def get_or_none(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        if kind is RESOURCE_CLAIM:
            raise ForbiddenError(f'resourceclaims.resource.k8s.io "{name}" is forbidden')
        return super().get_or_none(kind, name=name, namespace=namespace)


def test_a_claim_it_may_not_read_leaves_the_change_as_before(caplog: pytest.LogCaptureFixture) -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    cluster = _NoClaimsRole(
        [
            _node(dict(DEPLOY)),
            *_operand_pods(),
            _claim("whole-2", "ml", "gpu-2"),
            _claim_pod("train-0", "ml", "whole-2"),
        ]
    )
    manager = MigManager(
        cluster, backend=sim, node=NODE_NAME, config=default_config(), policy=Policy(timeout_s=60), clock=Clock()
    )
    _relabel(cluster, "all-1g.10gb")
    manager.reconcile()
    _stop_operands(cluster)
    manager.reconcile()
    assert _labels(cluster)[MIG_CONFIG_STATE] == "success"
    assert (
        "cannot read ResourceClaim ml/whole-2" in caplog.text
        and "grant the MIG manager get on resourceclaims" in caplog.text
    )
