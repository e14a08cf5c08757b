"""The doctor knows every stage of gpuchain's per-GPU repair loop and says what the loop waits for
(evidence of the gpu.lost finding on a node whose loop holds a GPU)."""

from __future__ import annotations

import pytest

from gpuchain.doctor import run_doctor
from gpuchain.kube import NODE
from gpuchain.remediation.gpuloop import (
    LOOP_ANNOTATION,
    STAGE_MEANS,
    GpuRecord,
    Stage,
    encode_records,
    loop_evidence,
)
from gpuchain.remediation.model import FAULTS_ANNOTATION, Fault, encode_faults
from gpuchain.sim import build, load_scenario

U = "GPU-aaa"


def test_every_stage_has_words() -> None:
    assert set(STAGE_MEANS) == set(Stage)


@pytest.mark.parametrize("stage", [s for s in Stage if s is not Stage.HEALTHY])
def test_gpu_lost_evidence_names_the_loop_stage_and_what_it_waits_for(stage: Stage) -> None:
    sim = build(load_scenario("healthy"))
    node = sim.cluster.get(NODE, "gpu-3")
    conditions = [c for c in node["status"]["conditions"] if c["type"] != "GPUHealthy"]
    conditions.append({"type": "GPUHealthy", "status": "False", "reason": "GPUXidError", "message": "XID 48"})
    sim.cluster.patch_status(NODE, "gpu-3", {"conditions": conditions})
    record = GpuRecord(U, 2, stage, waiting="the thing it waits for")
    annotations = {
        FAULTS_ANNOTATION: encode_faults({U: Fault(U, U, (48,), covers=(U,))}),
        LOOP_ANNOTATION: encode_records({U: record}),
    }
    sim.cluster.patch(NODE, "gpu-3", {"metadata": {"annotations": annotations}})
    finding = next(f for f in run_doctor(sim.cluster).findings if f.node == "gpu-3")
    line = f"repair loop: GPU 2 ({U}) is {stage.value}: {STAGE_MEANS[stage]}; waiting for: the thing it waits for"
    assert finding.id == "gpu.lost" and line in finding.evidence


def test_healthy_gpus_and_nodes_without_the_loop_add_nothing_and_a_bad_annotation_is_named() -> None:
    assert loop_evidence({"metadata": {}}) == []
    healthy = {"metadata": {"annotations": {LOOP_ANNOTATION: encode_records({U: GpuRecord(U, 0)})}}}
    assert loop_evidence(healthy) == []
    (line,) = loop_evidence({"metadata": {"annotations": {LOOP_ANNOTATION: "{"}}})
    assert line.startswith(f"repair loop: {LOOP_ANNOTATION}: not JSON")
