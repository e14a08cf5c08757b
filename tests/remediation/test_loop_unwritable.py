"""The repair loop while Node writes fail and reads work (an etcd space alarm, write throttling, a
webhook that denies the agent's patches): it records a reset attempt on the Node before it resets,
and does nothing it cannot record, so no write outage turns into a reset storm (issue 25, item 1).

Here the writes fail in a MemoryCluster (a property test over any pattern of failing passes);
tests/peers/test_loop_write_denied.py makes the real kube-apiserver refuse them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.errors import KubeError, TooManyRequestsError
from gpuchain.kube.kinds import EVENT, NODE, Kind
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kube.objects import Obj
from gpuchain.remediation.gpuloop import LOOP_ANNOTATION, LoopPolicy, Stage, decode_records
from gpuchain.remediation.loopagent import MAX_RETRY_S, GpuLoopAgent, retry_delay
from gpuchain.remediation.model import FAULTS_ANNOTATION, Fault, encode_faults
from gpuchain.sim.remediation import node_object

NODE_NAME = "n"
FAULTY = (1, 5)  # two GPUs of eight with a reset-class fault (XID 48, a double-bit ECC error)


class FlakyWrites(MemoryCluster):
    """A MemoryCluster whose writes fail with 429 while ``failing`` (reads always work), as the API
    server answers while etcd is out of space or its write flow control sheds load. Every loop record
    a write did land is kept in ``recorded``: the reset attempts the Node has seen."""

    def __init__(self, objects: list[Obj]) -> None:
        self.failing = False
        self.allowed: int | None = None
        """Node patches that still land before ``failing`` turns on by itself (None: no limit)."""
        self.only_nodes = False
        """Refuse only Node writes (a webhook on Nodes): Events still land."""
        super().__init__(objects)

    def _refuse(self, node_patch: bool = False) -> None:
        if node_patch and self.allowed is not None:
            self.failing = self.failing or self.allowed <= 0
            self.allowed -= 1
        if self.failing:
            raise TooManyRequestsError("etcdserver: mvcc: database space exceeded")

    def patch(self, kind: Kind, name: str, patch: Obj, namespace: str | None = None) -> Obj:
        self._refuse(node_patch=kind is NODE)
        return super().patch(kind, name=name, patch=patch, namespace=namespace)

    def patch_status(self, *args: Any, **kwargs: Any) -> Obj:
        self._refuse()
        return super().patch_status(*args, **kwargs)

    def create(self, obj: Obj) -> Obj:
        if not self.only_nodes:
            self._refuse()
        return super().create(obj)


class CountingSim(SimBackend):
    """A SimBackend that counts the resets and burn-ins it was asked for, per GPU index, and checks at
    each reset that the Node records it: the GPU in stage reset with an attempt no earlier reset
    used (``used``: (uuid, attempts, since) of each reset's record)."""

    resets: Counter[int]
    burn_ins: Counter[int]
    used: set[tuple[str, int, float]]
    cluster: MemoryCluster

    def reset_gpu(self, gpu_index: int) -> None:
        self.resets[gpu_index] += 1
        uuid = self.inventory().gpu(gpu_index).uuid
        shown = self.cluster.get(NODE, name=NODE_NAME)["metadata"]["annotations"].get(LOOP_ANNOTATION)
        rec = decode_records(shown).get(uuid)
        assert rec is not None and rec.stage is Stage.RESET, f"GPU {gpu_index} reset while the Node shows {rec}"
        attempt = (uuid, rec.attempts, rec.since)
        assert attempt not in self.used, f"GPU {gpu_index} reset twice on one recorded attempt {attempt}"
        self.used.add(attempt)
        super().reset_gpu(gpu_index)

    def burn_in(self, gpu_index: int) -> Any:
        self.burn_ins[gpu_index] += 1
        return super().burn_in(gpu_index)


def rig(policy: LoopPolicy) -> tuple[FlakyWrites, CountingSim, GpuLoopAgent, list[float]]:
    backend = CountingSim.from_preset("h100-80gb-x8", node=NODE_NAME)
    backend.resets, backend.burn_ins, backend.used = Counter(), Counter(), set()
    faults = {}
    for index in FAULTY:
        uuid = backend.inventory().gpu(index).uuid
        faults[uuid] = Fault(uuid=uuid, gpu=uuid, xids=(48,), covers=(uuid,))
    node = node_object(NODE_NAME)
    node["status"]["nodeInfo"] = {"bootID": "b1"}
    node["metadata"]["annotations"] = {FAULTS_ANNOTATION: encode_faults(faults)}
    cluster = FlakyWrites([node])
    backend.cluster = cluster
    now = [1000.0]
    agent = GpuLoopAgent(backend, cluster=cluster, node_name=NODE_NAME, policy=policy, clock=lambda: now[0])
    return cluster, backend, agent, now


def run_pass(agent: GpuLoopAgent) -> bool:
    """One pass as ``GpuLoopAgent.run`` runs it: a failed one is logged there and retried."""
    try:
        agent.run_once()
    except KubeError:
        return False
    return True


@given(
    failing=st.lists(st.booleans(), min_size=1, max_size=60),
    reset_fails=st.booleans(),
    max_resets=st.integers(1, 3),
)
def test_a_reset_happens_only_after_its_attempt_is_recorded_whatever_writes_fail(
    failing: list[bool], reset_fails: bool, max_resets: int
) -> None:
    """One pass a second; each pass's writes fail or not as drawn, the fault never clears (so the
    loop would go round again as soon as it could). Every reset is preceded by a distinct attempt
    recorded on the Node (``CountingSim`` checks it at each reset), and within any span of failing
    passes no GPU is reset more than once."""
    cluster, backend, agent, now = rig(LoopPolicy(max_resets=max_resets, settle_s=5.0))
    if reset_fails:
        for index in FAULTY:
            backend.fail_reset(index)
    in_outage = Counter[int]()
    for fail in failing:
        cluster.failing = fail
        before = Counter(backend.resets)
        run_pass(agent)
        if fail:
            in_outage.update(backend.resets - before)
        now[0] += 1.0
    assert sum(backend.resets.values()) == len(backend.used)
    assert all(n <= 1 for n in in_outage.values()), in_outage


def test_thirty_seconds_of_failed_node_writes_reset_each_gpu_at_most_once() -> None:
    """The issue's numbers: 30 s of passes (every 1 s) with every Node write failing from the start.
    Before the fix: 31 resets and 31 burn-ins per faulty GPU."""
    cluster, backend, agent, now = rig(LoopPolicy())
    cluster.failing = True
    for _ in range(31):
        assert not run_pass(agent)
        now[0] += 1.0
    assert all(backend.resets[i] <= 1 for i in FAULTY), backend.resets
    assert all(backend.burn_ins[i] <= 1 for i in FAULTY), backend.burn_ins


def test_after_the_outage_the_loop_goes_on_from_what_the_node_records() -> None:
    """Writes fail for 30 passes after the reset attempt was recorded; once they work again the repair
    finishes (burned in, re-admitted once health clears) with no reset beyond the recorded one."""
    cluster, backend, agent, now = rig(LoopPolicy(settle_s=5.0))
    cluster.failing = True
    for _ in range(3):
        assert not run_pass(agent)
    assert backend.resets == Counter()  # nothing recorded, nothing done
    cluster.failing = False
    assert run_pass(agent)  # quarantined -> drained -> reset (recorded first) -> burn-in passed
    assert backend.resets == Counter(dict.fromkeys(FAULTY, 1))
    cluster.patch(
        NODE, name=NODE_NAME, patch={"metadata": {"annotations": {FAULTS_ANNOTATION: "{}"}}}
    )  # health cleared
    cluster.failing = True
    for _ in range(30):
        run_pass(agent)
        now[0] += 1.0
    cluster.failing = False
    assert run_pass(agent)
    assert backend.resets == Counter(dict.fromkeys(FAULTY, 1)), backend.resets
    assert backend.burn_ins == Counter(dict.fromkeys(FAULTY, 1)), backend.burn_ins
    records = decode_records(cluster.get(NODE, name=NODE_NAME)["metadata"]["annotations"][LOOP_ANNOTATION])
    assert {r.stage for r in records.values()} == {Stage.HEALTHY}


def test_work_done_whose_result_could_not_be_recorded_is_not_done_again() -> None:
    """The writes before each reset and burn-in land, the pass's closing one (the burn-in passed)
    does not, and none after it: the burn-ins are not run again on every pass while the Node still
    shows them running."""
    cluster, backend, agent, now = rig(LoopPolicy(settle_s=600.0))
    cluster.allowed = 2 * len(FAULTY)  # per GPU: the record before its reset, the one before its burn-in
    assert not run_pass(agent)
    assert backend.resets == backend.burn_ins == Counter(dict.fromkeys(FAULTY, 1))
    for _ in range(10):
        assert not run_pass(agent)
        now[0] += 1.0
    assert backend.resets == backend.burn_ins == Counter(dict.fromkeys(FAULTY, 1))
    cluster.failing, cluster.allowed = False, None
    assert run_pass(agent)
    records = decode_records(cluster.get(NODE, name=NODE_NAME)["metadata"]["annotations"][LOOP_ANNOTATION])
    assert all(r.stage is Stage.BURN_IN and r.passed for r in records.values()), records


@given(interval=st.floats(0.01, 30.0), failures=st.integers(1, 200), share=st.floats(0.0, 1.0))
def test_failed_passes_back_off_with_jitter_within_bounds(interval: float, failures: int, share: float) -> None:
    """The wait after failed passes is never under the pass interval nor over ``MAX_RETRY_S`` (or the
    interval, if longer), grows with the failures, and its random share is drawn afresh each time."""
    wait = retry_delay(interval, failures=failures, draw=lambda lo, hi: lo + share * (hi - lo))
    assert interval <= wait <= max(MAX_RETRY_S, interval) + 1e-9
    assert retry_delay(interval, failures=failures + 1, draw=lambda lo, hi: hi) >= retry_delay(
        interval, failures=failures, draw=lambda lo, hi: hi
    )


def test_events_tell_a_stage_once_the_node_records_it() -> None:
    """Node writes are refused after the record before each burn-in, Events still land. The first
    GPU's passed burn-in reaches the Node with the second GPU's record before its reset; the second
    GPU's, due in the pass's closing write, does not: it is not told while the Node shows the burn-in
    running, and is told once, when the Node records it."""
    cluster, _, agent, now = rig(LoopPolicy(settle_s=600.0))
    cluster.allowed, cluster.only_nodes = 2 * len(FAULTY), True

    def told() -> Counter[str]:
        return Counter(str(e["reason"]) for e in cluster.list(EVENT, namespace="default"))

    def passed_on_node() -> int:
        shown = cluster.get(NODE, name=NODE_NAME)["metadata"]["annotations"][LOOP_ANNOTATION]
        return sum(r.passed for r in decode_records(shown).values())

    for _ in range(3):
        assert not run_pass(agent)
        now[0] += 1.0
    assert told()["GPUBurnInPassed"] == passed_on_node() == 1, told()
    assert told() == Counter(
        {**dict.fromkeys(["GPUQuarantined", "GPUDrained", "GPUResetStarted", "GPUBurnIn"], 2), "GPUBurnInPassed": 1}
    )
    cluster.failing, cluster.allowed = False, None
    assert run_pass(agent)
    assert told()["GPUBurnInPassed"] == passed_on_node() == 2, told()
