"""A pod that asks for no GPU but must run beside a GPU pod (a required pod affinity on kubernetes.io/hostname), kept
off the GPU node by the GPU pool's taint: the node link, with the toleration for the companion's owner; a pod that
tolerates the taint, or one kept off a tainted GPU node with no affinity tying it there, is quiet.

Sources: kubernetes pkg/scheduler/framework/plugins/interpodaffinity/filtering.go (ErrReasonAffinityRulesNotMatch,
"node(s) didn't match pod affinity rules") and tainttoleration/taint_toleration.go ("node(s) had untolerated taint
{%s: %s}"), v1.31. Node names, the taint, labels and workloads are stand-ins (a metrics agent beside a training pod).
"""

from __future__ import annotations

from pathlib import Path

from doctor.small_cluster import diagnosed_case

from gpuchain.doctor.model import FixOp, Report, Severity

TAINT = "{key: dedicated, value: gpu, effect: NoSchedule}"
MESSAGE = (
    "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 2 node(s) didn't match pod affinity "
    "rules. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
)


def _report(tmp_path: Path, *, tolerates: bool = False, affinity: bool = True) -> Report:
    tolerations = "tolerations: [{key: dedicated, operator: Exists, effect: NoSchedule}]" if tolerates else ""
    term = "{labelSelector: {matchLabels: {job: resnet}}, topologyKey: kubernetes.io/hostname}"
    affine = (
        f"affinity: {{podAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{term}]}}}}" if affinity else ""
    )
    message = MESSAGE if affinity else "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}."
    doc = f"""name: t
source: gpuchain#0
kind: fault
base:
  stack: nvidia-device-plugin
  nodes:
    - {{name: a100-node-4, preset: t4-x4, hostDriver: "550.127.05"}}
    - {{name: cpu-1, gpu: false}}
    - {{name: cpu-2, gpu: false}}
edits:
  - {{do: node, node: a100-node-4, taints: [{TAINT}]}}
  - do: create
    object: {{apiVersion: v1, kind: Namespace, metadata: {{name: train}}}}
  - do: create
    object:
      apiVersion: v1
      kind: Pod
      metadata: {{name: resnet-0, namespace: train, labels: {{job: resnet}}}}
      spec:
        nodeName: a100-node-4
        tolerations: [{{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}}]
        containers: [{{name: main, image: "example/resnet:1", resources: {{limits: {{nvidia.com/gpu: "2"}}}}}}]
      status: {{phase: Running, containerStatuses: [{{name: main, ready: true, restartCount: 0, state: {{running: {{}}}}}}]}}
  - do: create
    object:
      apiVersion: v1
      kind: Pod
      metadata: {{name: stats-agent-5f6g7, namespace: train}}
      spec:
        {affine}
        {tolerations}
        containers: [{{name: agent, image: "example/agent:3"}}]
      status:
        phase: Pending
        conditions: [{{type: PodScheduled, status: "False", reason: Unschedulable, message: "{message}"}}]
expect: {{root: none, nodes: [], fix: {{does: x, match: [x]}}}}
"""
    return diagnosed_case(tmp_path, doc)


def test_companion_kept_off_the_gpu_node_by_its_taint_gets_the_toleration(tmp_path: Path) -> None:
    report = _report(tmp_path)
    (found,) = [f for f in report.findings if f.id == "workload.companion-untolerated-taint"]
    assert (found.link, found.node, found.root, found.severity) == ("node", "a100-node-4", True, Severity.ERROR)
    assert found.action is not None and found.action.op is FixOp.PATCH_WORKLOAD
    assert found.action.target == "Pod/train/stats-agent-5f6g7"
    assert found.action.changes["patch"]["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert "train/resnet-0" in found.cause


def test_without_the_affinity_or_with_the_toleration_it_is_quiet(tmp_path: Path) -> None:
    for report in (_report(tmp_path, affinity=False), _report(tmp_path, tolerates=True)):
        assert not [f for f in report.findings if f.id == "workload.companion-untolerated-taint"]
