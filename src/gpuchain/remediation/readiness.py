"""Readiness gating: a new GPU node takes GPU pods only once its chain is up.

A node reports Ready long before its GPUs are usable (driver container still compiling, plugin
not registered), so autoscalers think their new capacity is there and pods land on a node that
cannot run them. The fix autoscalers already support is a *startup taint*: the node joins with
``gpuchain.io/gpu-not-ready=true:NoSchedule`` (set it in the node pool, and list it in
cluster-autoscaler's ``--startup-taint`` / Karpenter's ``spec.template.spec.startupTaints`` so they
do not treat the node as unschedulable for ever), and gpuchain removes it when the chain is
validated on that node:

1. driver: the GPU backend answers (driver loaded, GPUs enumerate);
2. toolkit: the validator's ``toolkit-ready`` file exists (when a validations directory is given);
3. plugin: the kubelet reports GPU capacity (the device plugin registered);
4. allocatable: the node offers at least one unit per physical GPU, or per MIG device on a GPU in
   MIG mode (more is fine: time-slicing replicas multiply units);
5. burn-in (optional): every GPU passed the backend's burn-in.

The ``GPUReady`` node condition says which link is missing (reason ``DriverNotReady``,
``ToolkitNotReady``, ``PluginNotRegistered``, ``GpusMissing``, ``BurnInFailed``) or ``ChainReady``.
The taint is removed once and never put back (it is a startup taint); the condition keeps
following the chain. ``assess`` is pure; ``ReadinessGate`` reads the facts and writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuchain.common.supervise import wait_event
from gpuchain.gpu.backend import GpuBackend, SeenInventory
from gpuchain.gpu.errors import GpuError, ReleasedError
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.kinds import NODE
from gpuchain.kube.objects import Obj
from gpuchain.kube.port import Cluster, now_rfc3339
from gpuchain.remediation.model import find_condition
from gpuchain.validator.ready import ReadyFiles

log = logging.getLogger(__name__)

STARTUP_TAINT = "gpuchain.io/gpu-not-ready"
CONDITION = "GPUReady"
COMPONENT = "gpuchain-gpu-readiness"


@dataclass(frozen=True, kw_only=True)
class ChainFacts:
    """What the node agent found on the node itself.

    ``driver_error``: None when the backend answered; ``toolkit_ready``: None when not checked (no
    validations directory); ``units``: GPUs not in MIG mode plus MIG devices; ``burn_in``: None
    when not required, else the failing summary ("" when every GPU passed).
    """

    driver_error: str | None
    toolkit_ready: bool | None
    gpus: int
    units: int
    burn_in: str | None = None
    burn_in_waiting: str | None = None
    """Why a required burn-in has no verdict yet (NVML is let go for a GPU reset): not ready, not failed."""


@dataclass(frozen=True)
class Readiness:
    """The verdict: ready, or the first missing link (``reason``) and what is missing, in words."""

    ready: bool
    reason: str
    message: str


def assess(node: Mapping[str, Any], facts: ChainFacts) -> Readiness:
    """The first link of the chain that is not up on this node, or ChainReady. Pure."""
    if facts.driver_error is not None:
        return Readiness(False, "DriverNotReady", f"the GPU driver does not answer: {facts.driver_error}")
    if facts.gpus == 0:
        return Readiness(False, "DriverNotReady", "the driver answers but lists no GPU")
    if facts.toolkit_ready is False:
        return Readiness(False, "ToolkitNotReady", "the container toolkit is not validated (no toolkit-ready file)")
    capacity = sum(node_gpu_resources(node, "capacity").values())
    if capacity == 0:
        return Readiness(
            False, "PluginNotRegistered", "the kubelet reports no GPU capacity: the device plugin has not registered"
        )
    allocatable = sum(node_gpu_resources(node, "allocatable").values())
    if allocatable < facts.units:
        return Readiness(
            False, "GpusMissing", f"{allocatable} GPU units allocatable, {facts.units} expected from {facts.gpus} GPUs"
        )
    if facts.burn_in_waiting:
        return Readiness(False, "BurnInPending", facts.burn_in_waiting)
    if facts.burn_in:
        return Readiness(False, "BurnInFailed", f"burn-in failed: {facts.burn_in}")
    checked = "driver, toolkit, plugin, allocatable" if facts.toolkit_ready else "driver, plugin, allocatable"
    if facts.burn_in is not None:
        checked += ", burn-in"
    return Readiness(True, "ChainReady", f"{allocatable} GPU units allocatable on {facts.gpus} GPUs; checked {checked}")


def gate_patch(node: Mapping[str, Any], *, verdict: Readiness, taint: str = STARTUP_TAINT) -> dict[str, Any] | None:
    """The Node patch that removes the startup taint (guarded by the version read), or None."""
    taints = (node.get("spec") or {}).get("taints") or []
    if not verdict.ready or not any(t.get("key") == taint for t in taints):
        return None
    keep = [dict(t) for t in taints if t.get("key") != taint]
    patch: dict[str, Any] = {"spec": {"taints": keep or None}}
    version = (node.get("metadata") or {}).get("resourceVersion")
    if version is not None:
        patch["metadata"] = {"resourceVersion": version}
    return patch


class ReadinessGate:
    """Keeps one node's startup taint and GPUReady condition in step with its chain."""

    def __init__(
        self,
        backend: GpuBackend,
        *,
        cluster: Cluster,
        node_name: str,
        ready_files: ReadyFiles | None = None,
        burn_in: bool = False,
        taint: str = STARTUP_TAINT,
    ) -> None:
        self.backend = backend
        self.cluster = cluster
        self.node_name = node_name
        self.ready_files = ready_files
        self.burn_in = burn_in
        self.taint = taint
        self._burned: str | None = None
        self._inventory = SeenInventory(backend)

    def facts(self) -> ChainFacts:
        """Ask the backend and the ready files (a burn-in runs once, after the plugin registered)."""
        try:
            inventory = self._inventory()  # while NVML is let go for a GPU reset: the GPUs seen before
        except GpuError as exc:
            return ChainFacts(driver_error=str(exc), toolkit_ready=None, gpus=0, units=0)
        units = sum(len(g.mig_devices) if g.mig_enabled else 1 for g in inventory.gpus)
        toolkit = None if self.ready_files is None else self.ready_files.is_ready("toolkit")
        burn = None
        if self.burn_in:
            if self._burned is None:
                failed = []
                for gpu in inventory.gpus:
                    try:
                        result = self.backend.burn_in(gpu.index)
                    except ReleasedError:
                        # The repair loop resets a GPU of this process's node: no verdict, and none
                        # cached; the burn-in runs again on the next check.
                        waiting = "the burn-in waits: NVML is let go while a GPU on this node is reset"
                        return ChainFacts(
                            driver_error=None,
                            toolkit_ready=toolkit,
                            gpus=len(inventory.gpus),
                            units=units,
                            burn_in=None,
                            burn_in_waiting=waiting,
                        )
                    except GpuError as exc:
                        failed.append(f"GPU {gpu.index}: {exc}")
                        continue
                    if not result.passed:
                        failed.append(f"GPU {gpu.index}: {result.summary()}")
                self._burned = "; ".join(failed)
            burn = self._burned
        return ChainFacts(driver_error=None, toolkit_ready=toolkit, gpus=len(inventory.gpus), units=units, burn_in=burn)

    def run_once(self) -> Readiness:
        """Assess, lift the startup taint when ready, write GPUReady when it changed."""
        node = self.cluster.get(NODE, name=self.node_name)
        verdict = assess(node, self.facts())
        patch = gate_patch(node, verdict=verdict, taint=self.taint)
        if patch is not None:
            node = self.cluster.patch(NODE, name=self.node_name, patch=patch)
            self.cluster.record_event(
                node,
                reason="GPUChainReady",
                message=f"removed taint {self.taint}: {verdict.message}",
                type="Normal",
                component=COMPONENT,
            )
        status = "True" if verdict.ready else "False"
        before = find_condition(node, CONDITION)
        if before is None or (before.status, before.reason, before.message) != (
            status,
            verdict.reason,
            verdict.message,
        ):
            self.cluster.set_condition(NODE, name=self.node_name, condition=_condition(node, status, verdict))
        return verdict

    async def run(self, stop: asyncio.Event | None = None, interval: float = 10.0) -> None:
        """Pass after pass until ``stop``; a failed pass is logged whole and the next one reads afresh."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.run_once)
            except Exception:
                log.exception("GPU readiness pass on node %s failed; retrying in %g s", self.node_name, interval)
            await wait_event(stop, interval)


def _condition(node: Obj, status: str, verdict: Readiness) -> dict[str, Any]:
    stamp = now_rfc3339()
    old = find_condition(node, CONDITION)
    transition = stamp if old is None or old.status != status else old.last_transition or stamp
    return {
        "type": CONDITION,
        "status": status,
        "reason": verdict.reason,
        "message": verdict.message,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": transition,
    }
