"""Readiness gating: the startup taint stays until the chain is up on the node, GPUReady names the
missing link; the gpu-not-ready-scale-up scenario plays it on a joining node."""

from __future__ import annotations

from typing import Any

import pytest

from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.kinds import NODE
from gpuchain.kube.memory import MemoryCluster
from gpuchain.remediation.model import find_condition
from gpuchain.remediation.readiness import CONDITION, STARTUP_TAINT, ChainFacts, ReadinessGate, assess, gate_patch
from gpuchain.sim.remediation import node_object
from gpuchain.sim.repair import play

UP = ChainFacts(driver_error=None, toolkit_ready=True, gpus=8, units=8)
OTHER = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


def joining(gpus: int | None) -> dict[str, Any]:
    node = node_object("n")
    node["metadata"]["resourceVersion"] = "7"
    node["spec"]["taints"] = [OTHER, {"key": STARTUP_TAINT, "value": "true", "effect": "NoSchedule"}]
    if gpus is None:
        del node["status"]["capacity"], node["status"]["allocatable"]
    else:
        node["status"]["capacity"] = node["status"]["allocatable"] = {"nvidia.com/gpu": str(gpus)}
    return node


@pytest.mark.parametrize(
    ("facts", "gpus", "reason"),
    [
        (ChainFacts(driver_error="NVML: driver not loaded", toolkit_ready=None, gpus=0, units=0), 8, "DriverNotReady"),
        (ChainFacts(driver_error=None, toolkit_ready=None, gpus=0, units=0), 8, "DriverNotReady"),
        (ChainFacts(driver_error=None, toolkit_ready=False, gpus=8, units=8), 8, "ToolkitNotReady"),
        (UP, None, "PluginNotRegistered"),
        (UP, 7, "GpusMissing"),
        (
            ChainFacts(
                driver_error=None,
                toolkit_ready=True,
                gpus=8,
                units=8,
                burn_in="GPU 2: memory: memory test found errors",
            ),
            8,
            "BurnInFailed",
        ),
        (UP, 8, "ChainReady"),
        (
            ChainFacts(driver_error=None, toolkit_ready=None, gpus=8, units=8),
            32,
            "ChainReady",
        ),  # toolkit unchecked; time-slicing x4 is fine
        (
            ChainFacts(driver_error=None, toolkit_ready=True, gpus=2, units=14),
            8,
            "GpusMissing",
        ),  # MIG: one unit per MIG device
    ],
)
def test_the_first_missing_link_is_named(facts: ChainFacts, gpus: int | None, reason: str) -> None:
    verdict = assess(joining(gpus), facts)
    assert verdict.reason == reason and verdict.ready is (reason == "ChainReady")


def test_only_the_startup_taint_is_removed_and_only_when_ready() -> None:
    node = joining(8)
    assert (
        gate_patch(node, verdict=assess(node, ChainFacts(driver_error=None, toolkit_ready=True, gpus=8, units=9)))
        is None
    )
    patch = gate_patch(node, verdict=assess(node, UP))
    assert patch == {"spec": {"taints": [OTHER]}, "metadata": {"resourceVersion": "7"}}
    node["spec"]["taints"] = [OTHER]
    assert gate_patch(node, verdict=assess(node, UP)) is None  # already lifted: nothing to write


def test_gate_with_burn_in_holds_a_node_whose_gpu_fails_it() -> None:
    gpus = SimBackend.from_preset("h100-80gb-x8", node="n")
    gpus.fail_burn_in(5, check="cuda")
    node = joining(8)
    cluster = MemoryCluster([node])
    gate = ReadinessGate(gpus, cluster=cluster, node_name="n", burn_in=True)
    assert gate.run_once().reason == "BurnInFailed"
    live = cluster.get(NODE, name="n")
    assert any(t["key"] == STARTUP_TAINT for t in live["spec"]["taints"])
    cond = find_condition(live, CONDITION)
    assert cond is not None and cond.status == "False" and "GPU 5: " in cond.message


def test_scale_up_scenario_holds_the_taint_until_the_chain_is_up_then_lifts_it_once() -> None:
    data = play("gpu-not-ready-scale-up")
    steps = data["readiness"]
    reasons = [s["reason"] for s in steps]
    assert reasons[:3] == ["DriverNotReady"] * 3
    assert reasons[3] == "ToolkitNotReady" and reasons[4:6] == ["PluginNotRegistered"] * 2
    assert reasons[6:8] == ["GpusMissing"] * 2 and set(reasons[8:]) == {"ChainReady"}
    assert [s["tainted"] for s in steps] == [True] * 8 + [False] * 4
    assert data["condition"]["status"] == "True"
    assert [e["reason"] for e in data["events"]] == ["GPUChainReady"]


def test_a_burn_in_cut_short_by_a_release_is_no_verdict_and_runs_again() -> None:
    """The repair loop lets go of NVML (a GPU reset) while the gate burns in GPU 2: the gate says
    BurnInPending, caches nothing, and on its next check burns every GPU in and lifts the taint."""
    gpus = SimBackend.from_preset("h100-80gb-x8", node="n")
    cluster = MemoryCluster([joining(8)])
    gate = ReadinessGate(gpus, cluster=cluster, node_name="n", burn_in=True)
    real = gpus.burn_in

    def interrupted(index: int) -> Any:
        if index == 2:
            gpus.release()
        return real(index)

    gpus.burn_in = interrupted  # type: ignore[method-assign]
    verdict = gate.run_once()
    assert verdict.reason == "BurnInPending" and not verdict.ready
    assert any(t["key"] == STARTUP_TAINT for t in cluster.get(NODE, name="n")["spec"]["taints"])
    gpus.burn_in = real  # type: ignore[method-assign]
    gpus.reacquire()
    assert gate.run_once().reason == "ChainReady"
    assert not any(t["key"] == STARTUP_TAINT for t in cluster.get(NODE, name="n")["spec"]["taints"] or [])
