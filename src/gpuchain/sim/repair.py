"""The repair loop's scenarios, played out over simulated time on a simulated cluster.

Four nodes of eight H100 unless the scenario names another preset (``sim.remediation``:
MemoryCluster, one SimBackend and one health publisher per node, the kubelet's pod map), one
single-GPU pod on each GPU of node-0, a repair agent on every node and the remediator, all on one
simulated clock. A scenario injects a fault, then each tick (one simulated second) every
publisher publishes, the remediator runs a pass and every agent runs a pass, until nothing
changes any more. The result is each repaired GPU's stage timeline (seconds from the fault), the
Events, the node's taints and annotations, and the faults still published at the end.

- ``gpu-reset``: XID 48 (double-bit ECC; NVIDIA's catalog: reset the GPU) on node-0 GPU 3: its pod
  is evicted, the GPU is reset, burned in and back; the node is never tainted.
- ``gpu-reset-fails``: the same, but the reset fails: a reboot is requested (annotation,
  condition, taint) and the loop waits there, trying nothing else.
- ``gpu-reset-storm``: XID 48 with failing resets on GPU 0 of three of the four nodes at once: the
  remediator's breaker opens, so nothing is evicted, reset, rebooted or tainted.
- ``gpu-row-remap-pending``: no XID at all, but NVML reports a remapped row waiting for a reset on
  node-0 GPU 3: the publisher's probe publishes it, and the GPU goes round the same loop.
- ``gpu-retired-pages``: four nodes of four Tesla T4 (pre-Ampere GPUs retire pages instead of
  remapping rows). On node-0, GPU 1 has a page retirement pending (one page retired for a
  double-bit ECC error): a reset activates it, so it goes round the loop and comes back with its
  count unchanged. GPU 2 has 63 retired pages, DCGM's limit, nothing pending: an RMA candidate,
  reported (GPUHealthy=False) and left serving. GPU 3 has a retirement pending that brings it to
  63: the reset activates it, and the burn-in reports the count at the limit without failing on it
  (no reset or reboot lowers it), so GPU 3 comes back and ends as GPU 2 does: reported, serving,
  the node untainted.
- ``gpu-nvlink-errors``: on node-0, GPU 0's NVLink 14 already counts 505 link recoveries, and 3
  more come in: NVLink recovery errors need a reset, so it goes round the loop and comes back.
  GPU 5 sees replay errors and CRC errors above DCGM's rate on link 2: reported, left serving.
- ``gpu-not-ready-scale-up``: a new 8-GPU node joins with the startup taint; its driver loads at
  3 s, the toolkit is validated at 4 s, the device plugin registers 7 GPUs at 6 s and the eighth at
  8 s: the taint is held (``GPUReady`` naming the missing link) until then, and lifted once.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from gpuchain.gpu.backend import BurnIn, GpuBackend
from gpuchain.gpu.errors import DriverNotLoadedError
from gpuchain.gpu.model import HealthEvent, Inventory, Telemetry
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.kinds import EVENT, NODE, POD
from gpuchain.remediation.controller import Remediator
from gpuchain.remediation.gpuloop import LOOP_ANNOTATION, REBOOT_ANNOTATION, GpuRecord, decode_records
from gpuchain.remediation.loopagent import GpuLoopAgent
from gpuchain.remediation.model import FAULTS_ANNOTATION, decode_faults
from gpuchain.remediation.readiness import CONDITION, STARTUP_TAINT, ReadinessGate
from gpuchain.sim.remediation import GPU_RESOURCE, SIM_PRESET, SimCluster, build, node_object
from gpuchain.validator.ready import ReadyFiles

FAULT_NODE = "node-0"
FAULT_GPU = 3
MAX_TICKS = 60


@dataclass
class SimClock:
    """Simulated seconds: every component of the run reads this clock."""

    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True, kw_only=True)
class RepairRun:
    """What a repair scenario produced."""

    scenario: str
    ticks: int
    started: float
    records: dict[str, dict[str, GpuRecord]]
    pods: list[str]
    taints: list[str]
    annotations: dict[str, str]
    events: list[dict[str, str]]
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per node that repaired a GPU: its loop agent's metrics (``LoopMetrics.to_json``)."""
    faults: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What node-0's gpu-health still publishes at the end (``gpuchain.io/gpu-faults``), per
    device with its GPU index: a fault whose resolution is ``none`` stays reported, not repaired."""

    def to_dict(self) -> dict[str, Any]:
        gpus = []
        for node, records in sorted(self.records.items()):
            for uuid, rec in sorted(records.items()):
                gpus.append(
                    {
                        "node": node,
                        "gpu": uuid,
                        "index": rec.index,
                        "stage": rec.stage.value,
                        "cause": rec.cause,
                        "waiting": rec.waiting,
                        "timeline": [
                            {"stage": s.stage.value, "seconds": round(s.at - self.started, 3), "note": s.note}
                            for s in rec.timeline
                        ],
                    }
                )
        return {
            "scenario": self.scenario,
            "ticks": self.ticks,
            "gpus": gpus,
            "podsLeft": self.pods,
            "taints": self.taints,
            "annotations": self.annotations,
            "events": self.events,
            "metrics": self.metrics,
            "faults": self.faults,
        }


def _workloads(sim: SimCluster) -> None:
    for gpu in sim.backends[FAULT_NODE].inventory().gpus:
        sim.add_pod(
            FAULT_NODE, namespace="ml", name=f"w-{gpu.index}", gpu_indexes=(gpu.index,), labels={"app": "train"}
        )


def _gpu_reset(sim: SimCluster) -> None:
    sim.backends[FAULT_NODE].inject_xid(FAULT_GPU, xid=48, message="double-bit ECC error")


def _gpu_reset_fails(sim: SimCluster) -> None:
    sim.backends[FAULT_NODE].fail_reset(FAULT_GPU)
    _gpu_reset(sim)


def _row_remap_pending(sim: SimCluster) -> None:
    sim.backends[FAULT_NODE].set_telemetry(FAULT_GPU, row_remap_pending=1)


def _gpu_reset_storm(sim: SimCluster) -> None:
    for node in list(sim.backends)[:3]:
        if node != FAULT_NODE:
            sim.add_pod(node, namespace="ml", name=f"{node}-job", gpu_indexes=(0,), labels={"app": "job"})
        sim.backends[node].fail_reset(0)
        sim.backends[node].inject_xid(0, xid=48, message="double-bit ECC error")


def _retired_pages(sim: SimCluster) -> None:
    """Page retirement as NVIDIA's Dynamic Page Retirement guide describes it: the count goes up
    when the page is retired and the page waits ("Pending Page Blacklist") for the GPU to be
    initialized again. DCGM's limit is 63 retired pages (``gpu.probes``)."""
    gpus = sim.backends[FAULT_NODE]
    gpus.set_health_readings(1, retired_pages_pending=True, retired_pages_dbe=1)
    gpus.set_health_readings(2, retired_pages_sbe=55, retired_pages_dbe=8)
    gpus.set_health_readings(3, retired_pages_pending=True, retired_pages_sbe=53, retired_pages_dbe=10)


NVLINK_GPU, NVLINK_LINK = 0, 14


def _nvlink_history(sim: SimCluster) -> None:
    """Before the run: the lifetime count the report found on that link (only a rise counts)."""
    sim.backends[FAULT_NODE].add_nvlink_errors(NVLINK_GPU, NVLINK_LINK, recovery=505)


def _nvlink_errors(sim: SimCluster) -> None:
    gpus = sim.backends[FAULT_NODE]
    gpus.add_nvlink_errors(NVLINK_GPU, NVLINK_LINK, recovery=3)
    gpus.add_nvlink_errors(5, 2, replay=4, crc_flit=900)  # 900 in one simulated second: over 100/s


@dataclass(frozen=True)
class RepairScenario:
    """One repair scenario: the fault it plays after every node is up (``play``), what its nodes
    carry from before (``before``, read by the publishers' first pass) and their GPUs."""

    play: Callable[[SimCluster], None]
    preset: str = SIM_PRESET
    before: Callable[[SimCluster], None] | None = None


REPAIR_SCENARIOS: dict[str, RepairScenario] = {
    "gpu-reset": RepairScenario(_gpu_reset),
    "gpu-reset-fails": RepairScenario(_gpu_reset_fails),
    "gpu-reset-storm": RepairScenario(_gpu_reset_storm),
    "gpu-row-remap-pending": RepairScenario(_row_remap_pending),
    "gpu-retired-pages": RepairScenario(_retired_pages, preset="t4-x4"),
    "gpu-nvlink-errors": RepairScenario(_nvlink_errors, before=_nvlink_history),
}


def _state(sim: SimCluster) -> tuple[Any, ...]:
    """What a tick can change: each Node's annotations and taints, and how many pods exist."""
    nodes = [
        (
            n["metadata"]["name"],
            tuple(sorted((n["metadata"].get("annotations") or {}).items())),
            str(n["spec"].get("taints")),
        )
        for n in sim.cluster.snapshot(NODE)
    ]
    return (*nodes, len(sim.cluster.snapshot(POD)))


SCENARIO_NAMES = (*REPAIR_SCENARIOS, "gpu-not-ready-scale-up")


@dataclass(frozen=True)
class Listed:
    """How ``gpuchain sim list`` shows one of ``SCENARIO_NAMES``: its nodes, the symptom and the
    public report it comes from (owner/repo#number, or "none found"; tests/sim/SOURCES.md quotes them)."""

    nodes: int
    symptom: str
    source: str


LISTING: dict[str, Listed] = {
    "gpu-reset": Listed(
        4, "XID 48 (double-bit ECC): the plugin keeps the GPU unhealthy until restarted", "NVIDIA/k8s-device-plugin#111"
    ),
    "gpu-reset-fails": Listed(4, "the GPU reset after XID 48 fails: only a reboot can help", "NVIDIA/NVSentinel#1240"),
    "gpu-reset-storm": Listed(4, "XID 48 and failing resets on three nodes at once", "none found"),
    "gpu-row-remap-pending": Listed(4, "no XID, but a remapped row waits for a GPU reset", "NVIDIA/NVSentinel#1826"),
    "gpu-retired-pages": Listed(
        4, "T4s with a page retirement pending, or retired pages at DCGM's limit", "NVIDIA/NVSentinel#1826"
    ),
    "gpu-nvlink-errors": Listed(
        4, "an NVLink's recovery errors keep rising; another link's replay and CRC errors", "marin-community/marin#9086"
    ),
    "gpu-not-ready-scale-up": Listed(
        3, "a new node is Ready before its GPUs are: the autoscaler adds more nodes", "NVIDIA/gpu-operator#708"
    ),
}


def play(name: str) -> dict[str, Any]:
    """Play any of ``SCENARIO_NAMES``; the result as the JSON ``gpuchain sim run`` prints."""
    if name == "gpu-not-ready-scale-up":
        return run_scale_up()
    return run_repair(name).to_dict()


def run_repair(name: str, nodes: int = 4) -> RepairRun:
    """Play repair scenario ``name``. Raises KeyError naming the known ones."""
    scenario = REPAIR_SCENARIOS.get(name)
    if scenario is None:
        raise KeyError(f"unknown repair scenario {name!r}; known: {', '.join(SCENARIO_NAMES)}")
    clock = SimClock()
    sim = build(nodes, scenario.preset)
    for node in sim.backends:
        sim.cluster.patch_status(NODE, name=node, status={"nodeInfo": {"bootID": f"{node}-boot-1"}})
        sim.publishers[node].clock = clock
    _workloads(sim)
    if scenario.before is not None:
        scenario.before(sim)
    agents = [
        GpuLoopAgent(backend, cluster=sim.cluster, node_name=node, clock=clock)
        for node, backend in sim.backends.items()
    ]
    remediator = Remediator(sim.cluster, clock=clock)
    for agent in agents:
        agent.run_once()  # every node runs the loop before anything fails
    sim.publish()
    started = clock.now
    scenario.play(sim)
    ticks, quiet, last = 0, 0, _state(sim)
    while ticks < MAX_TICKS and quiet < 3:
        clock.now += 1.0
        ticks += 1
        sim.publish()
        remediator.run_once()
        for agent in agents:
            agent.run_once()
        now = _state(sim)
        quiet = quiet + 1 if now == last else 0
        last = now
    records: dict[str, dict[str, GpuRecord]] = {}
    for node in sim.backends:
        annotations = sim.cluster.get(NODE, name=node)["metadata"].get("annotations") or {}
        found = decode_records(annotations.get(LOOP_ANNOTATION))
        if found:
            records[node] = found
    fault_node = sim.cluster.get(NODE, name=FAULT_NODE)
    annotations = fault_node["metadata"].get("annotations") or {}
    return RepairRun(
        scenario=name,
        ticks=ticks,
        started=started,
        records=records,
        pods=sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in sim.cluster.snapshot(POD)),
        taints=[f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in fault_node["spec"].get("taints") or []],
        annotations={k: v for k, v in annotations.items() if k in (LOOP_ANNOTATION, REBOOT_ANNOTATION)},
        events=[
            {"object": e["involvedObject"]["name"], "reason": e["reason"], "message": e["message"]}
            for e in sim.cluster.snapshot(EVENT)
        ],
        metrics={a.node_name: a.metrics.to_json() for a in agents if a.node_name in records},
        faults=_published_faults(sim, annotations.get(FAULTS_ANNOTATION)),
    )


def _published_faults(sim: SimCluster, text: str | None) -> dict[str, dict[str, Any]]:
    indexes = {g.uuid: g.index for g in sim.backends[FAULT_NODE].inventory().gpus}
    return {u: {"index": indexes.get(f.gpu), **f.to_json()} for u, f in sorted(decode_faults(text).items())}


class _LoadingDriver(GpuBackend):
    """A node's GPUs while its driver container is still installing: no answer before ``ready_at``."""

    name = "sim"

    def __init__(self, gpus: SimBackend, clock: SimClock, ready_at: float) -> None:
        self.gpus = gpus
        self.clock = clock
        self.ready_at = ready_at

    def _check(self) -> None:
        if self.clock() < self.ready_at:
            raise DriverNotLoadedError("NVIDIA kernel module not loaded yet (driver container installing)")

    def inventory(self) -> Inventory:
        self._check()
        return self.gpus.inventory()

    def telemetry(self, gpu_uuid: str) -> Telemetry:
        self._check()
        return self.gpus.telemetry(gpu_uuid)

    def events(self) -> AsyncIterator[HealthEvent]:
        return self.gpus.events()

    def burn_in(self, gpu_index: int) -> BurnIn:
        self._check()
        return self.gpus.burn_in(gpu_index)


def run_scale_up() -> dict[str, Any]:
    """``gpu-not-ready-scale-up``: the readiness gate on a node joining the cluster (see the module)."""
    clock = SimClock()
    sim = build(2)
    started = clock.now
    name = "node-new"
    node = node_object(name)
    node["spec"]["taints"] = [{"key": STARTUP_TAINT, "value": "true", "effect": "NoSchedule"}]
    node["status"].pop("capacity")
    node["status"].pop("allocatable")
    sim.cluster.create(node)
    gpus = SimBackend.from_preset(SIM_PRESET, node=name)
    with tempfile.TemporaryDirectory(prefix="gpuchain-validations-") as validations:
        ready = ReadyFiles(validations)
        gate = ReadinessGate(
            _LoadingDriver(gpus, clock, started + 3), cluster=sim.cluster, node_name=name, ready_files=ready
        )
        steps: list[dict[str, Any]] = []
        for tick in range(12):
            clock.now = started + tick
            if tick == 4:
                ready.write("toolkit", {"runtime": "nvidia"})
            if tick in (6, 8):
                units = str(7 if tick == 6 else 8)
                sim.cluster.patch_status(
                    NODE, name=name, status={"capacity": {GPU_RESOURCE: units}, "allocatable": {GPU_RESOURCE: units}}
                )
            verdict = gate.run_once()
            live = sim.cluster.get(NODE, name=name)
            tainted = any(t["key"] == STARTUP_TAINT for t in live["spec"].get("taints") or [])
            steps.append(
                {"seconds": float(tick), "reason": verdict.reason, "message": verdict.message, "tainted": tainted}
            )
    final = sim.cluster.get(NODE, name=name)
    condition = next(c for c in final["status"]["conditions"] if c["type"] == CONDITION)
    return {
        "scenario": "gpu-not-ready-scale-up",
        "node": name,
        "readiness": steps,
        "condition": {k: condition[k] for k in ("status", "reason", "message")},
        "events": [
            {"object": e["involvedObject"]["name"], "reason": e["reason"], "message": e["message"]}
            for e in sim.cluster.snapshot(EVENT)
            if e["involvedObject"]["name"] == name
        ],
    }
