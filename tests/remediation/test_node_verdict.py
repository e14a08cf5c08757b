"""The node's verdict travels with its faults: gpu-health publishes the resolution it computed with
the node's ``--xid-resolution`` overrides and thresholds, and the remediator acts on it, not on the
shipped XID table. Annotations written before the verdict was published are judged as before.

Each case runs the real publisher (the node's policy built as ``gpu-health`` builds it) into an
in-memory API with the chart's admission objects, then one pass of the real controller.
"""

from __future__ import annotations

import pytest

from gpuchain.exporter.podresources import Assignment, PodRef
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.xid import HealthPolicy, Resolution, parse_overrides
from gpuchain.kube.kinds import NODE
from gpuchain.kube.memory import MemoryCluster
from gpuchain.remediation.controller import Remediator, Report
from gpuchain.remediation.decide import ActionKind, HoldReason, Policy
from gpuchain.remediation.model import FAULTS_ANNOTATION, TAINT_KEY, decode_faults
from gpuchain.remediation.publisher import GpuHealthPublisher
from gpuchain.sim.remediation import node_object, pod_object, simulated_policy_objects


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _publisher(
    sim: SimBackend, overrides: str, enable: tuple[int, ...] = ()
) -> tuple[MemoryCluster, GpuHealthPublisher, str]:
    """A node ``n0`` with one training pod on GPU 0 and three healthy peers (the breaker stays
    closed), published by a gpu-health whose policy is ``--xid-resolution overrides`` (plus
    ``DP_ENABLE_HEALTHCHECKS=enable``)."""
    gpu0 = sim.inventory().gpu(0).uuid
    rows = [Assignment("nvidia.com/gpu", gpu0, PodRef("ml", "train", "main"))]
    peers = [node_object(f"peer-{i}") for i in range(3)]
    cluster = MemoryCluster(
        [node_object("n0"), *peers, pod_object("ml", name="train", node="n0"), *simulated_policy_objects()]
    )
    policy = HealthPolicy().with_ignored(enabled=enable).with_overrides(parse_overrides(overrides))
    publisher = GpuHealthPublisher(
        sim, cluster=cluster, node_name="n0", pods=lambda: rows, policy=policy, quiet_seconds=0, clock=Clock()
    )
    return cluster, publisher, gpu0


def _xid(publisher: GpuHealthPublisher, gpu: str, code: int, at: float) -> None:
    assert isinstance(publisher.clock, Clock)
    publisher.clock.t = at
    publisher.handle(HealthEvent(kind=EventKind.XID, gpu_uuid=gpu, xid=code))


def _controller_pass(cluster: MemoryCluster) -> Report:
    return Remediator(cluster, policy=Policy(), namespace="gpuchain").run_once()


def _taint(cluster: MemoryCluster) -> str | None:
    taints = cluster.get(NODE, name="n0")["spec"].get("taints") or []
    return next((t["value"] for t in taints if t["key"] == TAINT_KEY), None)


@pytest.mark.parametrize(
    ("overrides", "verdict", "acted"),
    [
        ("109=none", Resolution.NONE, False),  # the node's operator declared 109 harmless
        ("", Resolution.RESET_GPU, True),  # the shipped row: NVIDIA's RESET_GPU bucket
    ],
)
def test_a_node_that_declared_an_xid_harmless_is_left_alone(
    h100_sim: SimBackend, overrides: str, verdict: Resolution, acted: bool
) -> None:
    """DP_ENABLE_HEALTHCHECKS=109 makes one 109 withhold the GPU; with 109=none the node says it
    needs nothing, and the controller (whose shipped table says reset-gpu) neither evicts nor taints."""
    cluster, publisher, gpu0 = _publisher(h100_sim, overrides, enable=(109,))
    _xid(publisher, gpu0, 109, 1000.0)
    publisher.publish()
    published = decode_faults(cluster.get(NODE, name="n0")["metadata"]["annotations"][FAULTS_ANNOTATION])
    assert published[gpu0].resolution is verdict and published[gpu0].xids == (109,)

    report = _controller_pass(cluster)
    kinds = sorted(o.action.kind for o in report.outcomes)
    assert kinds == ([ActionKind.EVICT, ActionKind.TAINT] if acted else [])
    assert all(o.result == "done" for o in report.outcomes) and not report.held
    assert _taint(cluster) == ("reset-gpu" if acted else None)


@pytest.mark.parametrize(("then", "taint"), [("reset", "reset-gpu"), ("reboot", "reboot-node")])
def test_a_node_threshold_crossed_is_acted_on_with_the_nodes_resolution(
    h100_sim: SimBackend, then: str, taint: str
) -> None:
    """13=RES@2/1h: the first 13 is NVIDIA's application error (nothing to do), the second within the
    hour crosses the node's threshold (the shipped one is 5 within 1h) and the controller acts with
    the node's resolution: with ``reboot`` it taints for a reboot, which the shipped table (reset-gpu
    for a repeated 13) would not."""
    cluster, publisher, gpu0 = _publisher(h100_sim, f"13={then}@2/1h")
    _xid(publisher, gpu0, 13, 1000.0)
    publisher.publish()
    assert FAULTS_ANNOTATION not in cluster.get(NODE, name="n0")["metadata"]["annotations"]
    assert _controller_pass(cluster).outcomes == ()

    _xid(publisher, gpu0, 13, 1600.0)
    publisher.publish()
    (fault,) = decode_faults(cluster.get(NODE, name="n0")["metadata"]["annotations"][FAULTS_ANNOTATION]).values()
    assert fault.repeated == (13,) and fault.resolution is Resolution.parse(then)
    report = _controller_pass(cluster)
    assert sorted(o.action.kind for o in report.outcomes) == [ActionKind.EVICT, ActionKind.TAINT]
    assert _taint(cluster) == taint


@pytest.mark.parametrize(
    ("annotation", "taint"),
    [
        ('{"GPU-0":{"gpu":"GPU-0","xids":[79]}}', "reboot-node"),  # RESTART_BM
        ('{"GPU-0":{"gpu":"GPU-0","xids":[109],"repeated":[109]}}', "reset-gpu"),  # past the shipped threshold
        ('{"GPU-0":{"gpu":"GPU-0","xids":[109]}}', "reset-gpu"),
        ('{"GPU-0":{"gpu":"GPU-0","xids":[43]}}', None),  # NVIDIA's IGNORE: reported only
    ],
)
def test_an_annotation_from_before_the_verdict_is_judged_by_the_shipped_table(
    annotation: str, taint: str | None
) -> None:
    """What a gpu-health from before this change wrote: no ``resolution`` field."""
    (fault,) = decode_faults(annotation).values()
    assert fault.resolution is None
    node = node_object("n0")
    node["metadata"]["annotations"] = {FAULTS_ANNOTATION: annotation}
    node["status"]["conditions"].append({"type": "GPUHealthy", "status": "False", "reason": "GPUXidError"})
    peers = [node_object(f"peer-{i}") for i in range(3)]
    cluster = MemoryCluster([node, *peers])
    report = Remediator(cluster, policy=Policy(), namespace="gpuchain", verify_node_writes=False).run_once()
    assert [o.action.kind for o in report.outcomes] == ([ActionKind.TAINT] if taint else [])
    assert _taint(cluster) == taint


@pytest.mark.parametrize(
    ("annotation", "taint"),
    [
        ('{"GPU-0":{"gpu":"GPU-0","xids":[79],"resolution":"maybe"}}', "reboot-node"),  # RESTART_BM
        ('{"GPU-0":{"gpu":"GPU-0","xids":[],"lost":true,"resolution":"drain-and-reset"}}', "reboot-node"),
        ('{"GPU-0":{"gpu":"GPU-0","xids":[48],"resolution":3}}', "reset-gpu"),
        ('{"GPU-0":{"gpu":"GPU-0","xids":[43],"resolution":"maybe"}}', None),  # NVIDIA's IGNORE
    ],
)
def test_a_verdict_this_version_does_not_know_is_judged_by_the_shipped_table_and_named(
    annotation: str, taint: str | None
) -> None:
    """A newer gpu-health during a rolling upgrade may publish a resolution this remediator does
    not know: that fault falls back to the shipped table, a lost GPU included, instead of the whole
    node being held as a bad annotation; the unknown value is named in what the action reports
    (review of 2026-12-03)."""
    (fault,) = decode_faults(annotation).values()
    assert fault.resolution is None and fault.unknown_resolution
    assert f"published resolution {fault.unknown_resolution!r} is unknown" in fault.summary()
    node = node_object("n0")
    node["metadata"]["annotations"] = {FAULTS_ANNOTATION: annotation}
    node["status"]["conditions"].append({"type": "GPUHealthy", "status": "False", "reason": "GPUXidError"})
    cluster = MemoryCluster([node, *(node_object(f"peer-{i}") for i in range(3))])
    report = Remediator(cluster, policy=Policy(), namespace="gpuchain", verify_node_writes=False).run_once()
    assert [h.why for h in report.held if h.why is HoldReason.BAD_ANNOTATION] == []
    assert [o.action.kind for o in report.outcomes] == ([ActionKind.TAINT] if taint else [])
    assert _taint(cluster) == taint
    if taint:
        assert f"{fault.unknown_resolution!r} is unknown to this gpuchain" in report.outcomes[0].action.message


def test_a_resolution_of_the_wrong_shape_is_still_named_and_a_known_one_round_trips() -> None:
    (odd,) = decode_faults('{"GPU-0":{"gpu":"GPU-0","xids":[48],"resolution":["reset-gpu"]}}').values()
    assert odd.unknown_resolution == "['reset-gpu']" and odd.action is Resolution.RESET_GPU
    text = '{"GPU-0":{"gpu":"GPU-0","resolution":"maybe","xids":[48]}}'
    (kept,) = decode_faults(text).values()
    assert kept.to_json()["resolution"] == "maybe"  # written back as the node published it
    (known,) = decode_faults('{"GPU-0":{"gpu":"GPU-0","resolution":"none","xids":[48]}}').values()
    assert known.resolution is Resolution.NONE and known.unknown_resolution == ""
