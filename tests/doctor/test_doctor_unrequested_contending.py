"""Pods that request no GPU and set NVIDIA_VISIBLE_DEVICES, on a node where no pod holds a GPU from the device plugin:
they all use the same GPUs outside the plugin, so the repair is in the pods (a GPU in each one's limits), not the
toolkit setting that would take the GPUs from the only pods using them. One such pod alone stays a warning; beside
pods the plugin gave GPUs to, the toolkit's setting stays the repair. Names, images and counts are stand-ins."""

from __future__ import annotations

from pathlib import Path

from doctor.small_cluster import diagnosed_case

from gpuchain.doctor.model import FixOp, Report, Severity


def _pod(name: str, gpus: int, visible: bool) -> str:
    env = "env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}], " if visible else ""
    limit = f", nvidia.com/gpu: {gpus}" if gpus else ""
    return f"""  - do: create
    object:
      apiVersion: v1
      kind: Pod
      metadata:
        name: {name}
        namespace: asr
        labels: {{pod-template-hash: 7f6e5d4c3}}
        ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: whisper-7f6e5d4c3, uid: w1, controller: true}}]
      spec:
        nodeName: l40s-2
        containers: [{{name: whisper, image: "ghcr.io/example/whisper:1.4", {env}resources: {{limits: {{memory: 8Gi{limit}}}}}}}]
      status:
        phase: Running
        containerStatuses: [{{name: whisper, ready: true, restartCount: 0, state: {{running: {{startedAt: "2026-05-01T00:00:00Z"}}}}}}]
"""


def _report(tmp_path: Path, pods: list[tuple[str, int, bool]]) -> Report:
    doc = f"""name: t
source: gpuchain#0
kind: fault
base:
  stack: nvidia-device-plugin
  nodes:
    - {{name: l40s-2, preset: l4-x2, hostDriver: "550.127.05"}}
edits:
  - do: create
    object: {{apiVersion: v1, kind: Namespace, metadata: {{name: asr}}}}
{"".join(_pod(*p) for p in pods)}expect: {{root: none, nodes: [], fix: {{does: x, match: [x]}}}}
"""
    return diagnosed_case(tmp_path, doc)


def _found(report: Report) -> list:
    return [f for f in report.findings if f.id == "workload.gpu-without-request"]


def test_pods_sharing_all_gpus_with_none_requested_get_a_gpu_limit_each(tmp_path: Path) -> None:
    (found,) = _found(_report(tmp_path, [("whisper-7f6e5d4c3-aaaaa", 0, True), ("whisper-7f6e5d4c3-bbbbb", 0, True)]))
    assert (found.link, found.node, found.severity) == ("device-plugin", "l40s-2", Severity.ERROR)
    assert found.action is not None and found.action.op is FixOp.PATCH_WORKLOAD
    assert found.action.target == "Deployment/asr/whisper"
    assert {"op": "add", "path": "/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu", "value": "1"} in (
        found.action.changes["patch"]
    )


def test_one_such_pod_alone_is_a_warning(tmp_path: Path) -> None:
    (found,) = _found(_report(tmp_path, [("whisper-7f6e5d4c3-aaaaa", 0, True)]))
    assert found.severity is Severity.WARNING and found.link == "toolkit"


def test_beside_a_pod_holding_a_plugin_gpu_the_toolkit_setting_stays_the_repair(tmp_path: Path) -> None:
    report = _report(
        tmp_path,
        [
            ("whisper-7f6e5d4c3-aaaaa", 0, True),
            ("whisper-7f6e5d4c3-bbbbb", 0, True),
            ("whisper-7f6e5d4c3-ccccc", 1, False),
        ],
    )
    (found,) = _found(report)
    assert found.link == "toolkit" and found.action is not None and found.action.op is not FixOp.PATCH_WORKLOAD


def test_pods_that_request_their_gpus_are_healthy(tmp_path: Path) -> None:
    report = _report(tmp_path, [("whisper-7f6e5d4c3-aaaaa", 1, False), ("whisper-7f6e5d4c3-bbbbb", 1, False)])
    assert not [f for f in report.findings if f.severity is Severity.ERROR]
