"""The doctor knows every stage of gpuchain's per-GPU repair loop and says what the loop waits for
(evidence of the gpu.lost finding on a node whose loop holds a GPU)."""

from __future__ import annotations

import json

import pytest

from gpuchain.doctor import run_doctor
from gpuchain.gpu.probes import PROBES
from gpuchain.gpu.xid import Resolution
from gpuchain.kube import NODE
from gpuchain.remediation.gpuloop import (
    LEFT_ALONE,
    LOOP_ANNOTATION,
    STAGE_MEANS,
    GpuRecord,
    Stage,
    encode_records,
    loop_evidence,
)
from gpuchain.remediation.model import FAULTS_ANNOTATION, Fault, condition_for, decode_faults, encode_faults
from gpuchain.sim import build, load_scenario
from gpuchain.sim.repair import run_repair

U = "GPU-aaa"


def test_every_stage_has_words() -> None:
    assert set(STAGE_MEANS) == set(Stage)


@pytest.mark.parametrize("stage", [s for s in Stage if s is not Stage.HEALTHY])
def test_gpu_lost_evidence_names_the_loop_stage_and_what_it_waits_for(stage: Stage) -> None:
    sim = build(load_scenario("healthy"))
    node = sim.cluster.get(NODE, name="gpu-3")
    conditions = [c for c in node["status"]["conditions"] if c["type"] != "GPUHealthy"]
    conditions.append({"type": "GPUHealthy", "status": "False", "reason": "GPUXidError", "message": "XID 48"})
    sim.cluster.patch_status(NODE, name="gpu-3", status={"conditions": conditions})
    record = GpuRecord(uuid=U, index=2, stage=stage, waiting="the thing it waits for")
    annotations = {
        FAULTS_ANNOTATION: encode_faults({U: Fault(uuid=U, gpu=U, xids=(48,), covers=(U,))}),
        LOOP_ANNOTATION: encode_records({U: record}),
    }
    sim.cluster.patch(NODE, name="gpu-3", patch={"metadata": {"annotations": annotations}})
    finding = next(f for f in run_doctor(sim.cluster).findings if f.node == "gpu-3")
    line = f"repair loop: GPU 2 ({U}) is {stage.value}: {STAGE_MEANS[stage]}; waiting for: the thing it waits for"
    assert finding.id == "gpu.lost" and line in finding.evidence


def test_healthy_gpus_and_nodes_without_the_loop_add_nothing_and_a_bad_annotation_is_named() -> None:
    assert loop_evidence({"metadata": {}}) == []
    healthy = {"metadata": {"annotations": {LOOP_ANNOTATION: encode_records({U: GpuRecord(uuid=U, index=0)})}}}
    assert loop_evidence(healthy) == []
    (line,) = loop_evidence({"metadata": {"annotations": {LOOP_ANNOTATION: "{"}}})
    assert line.startswith(f"repair loop: {LOOP_ANNOTATION}: not JSON")


@pytest.mark.parametrize(
    ("scenario", "held", "left_alone"),
    [
        # GPUs 2 and 3 end with retired pages at DCGM's limit, which nothing the loop does changes
        # (GPU 3 after its reset and a passed burn-in); GPU 1 is back
        (
            "gpu-retired-pages",
            {},
            {i: "retired pages at DCGM's limit (an RMA candidate)" for i in (2, 3)},
        ),
        # GPU 0 is back after its reset; GPU 5's replay/CRC errors are only reported
        ("gpu-nvlink-errors", {}, {5: PROBES["nvlink-errors"]}),
    ],
)
def test_the_doctor_says_where_the_counter_scenarios_leave_each_gpu(
    scenario: str, held: dict[int, Stage], left_alone: dict[int, str]
) -> None:
    """The end state `gpuchain sim run` reaches for the counter scenarios, put on a node the doctor
    examines: every GPU the loop holds is named with what it waits for, every published fault the
    loop leaves alone says so and why, and a re-admitted GPU adds nothing."""
    run = run_repair(scenario)
    uuids = {rec.index: uuid for uuid, rec in run.records["node-0"].items()}
    faults = {u: {k: v for k, v in f.items() if k != "index"} for u, f in run.faults.items()}
    uuids.update({f["index"]: u for u, f in run.faults.items()})
    published = decode_faults(json.dumps(faults))
    status, reason, message = condition_for(published)
    sim = build(load_scenario("healthy"))
    node = sim.cluster.get(NODE, name="gpu-3")
    conditions = [c for c in node["status"]["conditions"] if c["type"] != "GPUHealthy"]
    conditions.append({"type": "GPUHealthy", "status": status, "reason": reason, "message": message})
    sim.cluster.patch_status(NODE, name="gpu-3", status={"conditions": conditions})
    annotations = {**run.annotations, FAULTS_ANNOTATION: json.dumps(faults)}
    sim.cluster.patch(NODE, name="gpu-3", patch={"metadata": {"annotations": annotations}})
    finding = next(f for f in run_doctor(sim.cluster).findings if f.node == "gpu-3")
    loop_lines = [e for e in finding.evidence if e.startswith("repair loop:")]
    expected = [
        f"repair loop: GPU {i} ({uuids[i]}) is {stage.value}: {STAGE_MEANS[stage]}; "
        f"waiting for: {run.records['node-0'][uuids[i]].waiting}"
        for i, stage in sorted(held.items())
    ]
    expected += sorted(  # in the order of the published faults: by device UUID
        f"repair loop: leaves {uuids[i]}: {why} alone (needs none): {LEFT_ALONE[Resolution.NONE]}"
        for i, why in left_alone.items()
    )
    assert loop_lines == expected
    assert all(run.records["node-0"][uuids[i]].waiting for i in held)
