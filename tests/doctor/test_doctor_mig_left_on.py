"""MIG left on after the MIG manager was switched off (NVIDIA/gpu-operator#701): switching the manager off changes
nothing on the GPUs, so the node keeps announcing MIG devices and no whole GPU, and pods that ask it for whole GPUs
wait. The repair is the manager run again with nvidia.com/mig.config=all-disabled. The same node with no pod waiting
for a whole GPU is a node kept in MIG on purpose: no finding. Names, layouts and counts are stand-ins."""

from __future__ import annotations

from pathlib import Path

from doctor.small_cluster import diagnosed_case

from gpuchain.doctor.model import FixOp, Report, Severity

MESSAGE = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector."


def _report(tmp_path: Path, *, manager: bool = False, waiting: bool = True) -> Report:
    pod = f"""  - do: create
    object:
      apiVersion: v1
      kind: Pod
      metadata: {{name: resnet-train-0, namespace: vision}}
      spec:
        nodeSelector: {{team: vision}}
        containers: [{{name: t, image: "nvcr.io/nvidia/pytorch:24.05-py3", resources: {{limits: {{nvidia.com/gpu: "2"}}}}}}]
      status:
        phase: Pending
        conditions: [{{type: PodScheduled, status: "False", reason: Unschedulable, message: "{MESSAGE}"}}]
"""
    doc = f"""name: t
source: gpuchain#0
kind: fault
base:
  stack: gpu-operator
  policy: {{mig: {{strategy: mixed}}, migManager: {{enabled: {str(manager).lower()}}}}}
  nodes:
    - {{name: h100-mig-3, preset: h100-80gb-x8, labels: {{team: vision}}, mig: {{config: all-2g.20gb, state: success}}}}
    - {{name: cpu-a, gpu: false}}
edits:
  - do: create
    object: {{apiVersion: v1, kind: Namespace, metadata: {{name: vision}}}}
{pod if waiting else ""}expect: {{root: none, nodes: [], fix: {{does: x, match: [x]}}}}
"""
    return diagnosed_case(tmp_path, doc)


def test_a_mig_layout_left_after_the_manager_was_switched_off_is_the_mig_link_run_with_all_disabled(
    tmp_path: Path,
) -> None:
    (found,) = [f for f in _report(tmp_path).findings if f.id == "mig.left-on"]
    assert (found.link, found.node, found.severity, found.root) == ("mig", "h100-mig-3", Severity.ERROR, True)
    assert found.action is not None and found.action.op is FixOp.LABEL_NODE
    assert found.action.changes == {"nvidia.com/mig.config": "all-disabled"}
    assert '"migManager":{"enabled":true}' in found.fix
    assert "vision/resnet-train-0" in " ".join(found.evidence)


def test_a_node_kept_in_mig_with_no_pod_waiting_for_whole_gpus_is_healthy(tmp_path: Path) -> None:
    report = _report(tmp_path, waiting=False)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_with_the_manager_running_the_layout_is_its_own_and_not_this(tmp_path: Path) -> None:
    assert not [f for f in _report(tmp_path, manager=True).findings if f.id == "mig.left-on"]
