"""A pod that requests no GPU yet says the GPU it uses is taken (vLLM's start-up memory check): the runtime gave it
GPUs the device plugin never allocated, so replicas meet on one GPU while the others idle; the repair is a GPU in each
container's limits. A pod that requests its GPU and says the same is not this (its GPU is its own affair).

Sources: vllm-project/vllm vllm/v1/worker/gpu_worker.py@35d5cda (Worker.init_device's "Free memory on device ... on
startup is less than desired GPU memory utilization"); vllm-project/production-stack#1047 for the kind (a chart that
renders no GPU request for a fractional requestGPU). Node names, GPU counts, figures and workloads are stand-ins.
"""

from __future__ import annotations

from pathlib import Path

from doctor.small_cluster import diagnosed_case

from gpuchain.doctor.model import FixOp, Report

LINE = (
    "ValueError: Free memory on device (30.12/79.15 GiB) on startup is less than desired GPU memory utilization "
    "(0.5, 39.58 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
)

#: The engine's container states: crash-looping after its error, exited with it (the kubelet not yet restarting it),
#: and running as if fine.
CRASH_LOOP = "state: {waiting: {reason: CrashLoopBackOff}}, lastState: {terminated: {reason: Error, exitCode: 1}}"
EXITED = "state: {terminated: {reason: Error, exitCode: 1}}"
RUNNING = "state: {running: {startedAt: '2026-10-02T08:00:00Z'}}"


def _report(tmp_path: Path, limits: str, *, aimed: bool = True, state: str = CRASH_LOOP) -> Report:
    taint = "{key: nvidia.com/gpu, value: present, effect: NoSchedule}" if aimed else ""
    tolerate = "[{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]" if aimed else "[]"
    doc = f"""name: t
source: gpuchain#0
kind: fault
base:
  stack: nvidia-device-plugin
  nodes:
    - {{name: h100-box, preset: t4-x4, hostDriver: "570.124.06"}}
edits:
  - {{do: node, node: h100-box, taints: [{taint}]}}
  - do: create
    object: {{apiVersion: v1, kind: Namespace, metadata: {{name: serve}}}}
  - do: create
    object:
      apiVersion: v1
      kind: Pod
      metadata:
        name: qwen-engine-5d4c3b2a1-hgfed
        namespace: serve
        labels: {{pod-template-hash: 5d4c3b2a1}}
        ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: qwen-engine-5d4c3b2a1, uid: q1, controller: true}}]
      spec:
        nodeName: h100-box
        tolerations: {tolerate}
        containers: [{{name: engine, image: "vllm/vllm-openai:v0.11.0", resources: {{limits: {{memory: 32Gi{limits}}}}}}}]
      status:
        phase: Running
        containerStatuses:
          - {{name: engine, ready: false, restartCount: 6, {state}}}
  - do: pod
    daemonset: qwen-engine-5d4c3b2a1
    namespace: serve
    logs:
      engine: |
        INFO 10-02 08:00:01 [__init__.py:216] Automatically detected platform cuda.
        ERROR 10-02 08:00:40 [core.py:708] {LINE}
expect: {{root: none, nodes: [], fix: {{does: x, match: [x]}}}}
"""
    return diagnosed_case(tmp_path, doc)


def test_unrequested_pod_on_a_taken_gpu_gets_a_gpu_limit(tmp_path: Path) -> None:
    (found,) = [f for f in _report(tmp_path, "").findings if f.id == "workload.gpu-used-unrequested"]
    assert (found.link, found.node, found.root) == ("device-plugin", "h100-box", True)
    assert found.action is not None and found.action.op is FixOp.PATCH_WORKLOAD
    assert found.action.target == "Deployment/serve/qwen-engine"
    assert {"op": "add", "path": "/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu", "value": "1"} in (
        found.action.changes["patch"]
    )


def test_a_pod_that_requests_its_gpu_is_not_this(tmp_path: Path) -> None:
    report = _report(tmp_path, ", nvidia.com/gpu: 1")
    assert not [f for f in report.findings if f.id == "workload.gpu-used-unrequested"]


def test_a_failed_pod_no_selector_sent_to_the_gpu_node_is_read_too(tmp_path: Path) -> None:
    """A runtime defaulting to nvidia hands the GPUs to a pod placed anywhere on the node: where it failed, its log is
    read though it neither tolerates a GPU taint nor selects a GPU label."""
    for state in (EXITED, CRASH_LOOP):
        (found,) = [
            f
            for f in _report(tmp_path, "", aimed=False, state=state).findings
            if f.id == "workload.gpu-used-unrequested"
        ]
        assert (found.link, found.node) == ("device-plugin", "h100-box")


def test_a_running_pod_no_selector_sent_there_is_not_read(tmp_path: Path) -> None:
    """Pods that are not aimed at a GPU node and have not failed are the bulk of a cluster: their logs stay unread."""
    report = _report(tmp_path, "", aimed=False, state=RUNNING)
    assert not [f for f in report.findings if f.id == "workload.gpu-used-unrequested"]
