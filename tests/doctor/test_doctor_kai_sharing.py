"""KAI Scheduler's GPU sharing: its fraction pods, which see the GPU a reservation pod on their node requests and holds,
are no pods using GPUs without a request; a fraction pod a CDI-mode runtime refuses because KAI's binder handed it the
GPU as a bare UUID names the binder's CDI switch for its release, or the runtime out of CDI mode.

Sources: kai-scheduler/KAI-Scheduler pkg/common/constants/constants.go (gpu-fraction, gpu-memory, runai-gpu-group,
kai-resource-reservation), pkg/binder/binding/resourcereservation/resource_reservation.go (run.ai/reserve_for_gpu_index),
pkg/binder/plugins/gpusharing/gpu_sharing.go (k8s.device-plugin.nvidia.com/gpu=<uuid> with --cdi-enabled),
pkg/operator/operands/binder/resources.go isCdiEnabled, cmd/binder/app/options.go@v0.4.4 and the chart's binder.cdi
(v0.6.0) and binder.cdiEnabled (v0.14.0) values. Node names, KAI releases, fractions and UUIDs are stand-ins.
"""

from __future__ import annotations

from pathlib import Path

from doctor.small_cluster import diagnosed_case

from gpuchain.doctor.model import Finding, FixOp, Report, Severity

UUID = "GPU-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
GROUP = "9d8c7b6a-5f4e-4d3c-2b1a-0f9e8d7c6b5a"


def _binder(version: str, args: str) -> str:
    return f"""
  - do: create
    object:
      apiVersion: v1
      kind: Pod
      metadata:
        name: binder-6c7d8e9f-abcde
        namespace: kai-system
        ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: binder-6c7d8e9f, uid: r1, controller: true}}]
      spec:
        nodeName: cpu-0
        containers: [{{name: binder, image: "ghcr.io/nvidia/kai-scheduler/binder:{version}", args: [{args}]}}]
      status: {{phase: Running, containerStatuses: [{{name: binder, ready: true, restartCount: 0, state: {{running: {{}}}}}}]}}
"""


def _share(name: str, devices: str, *, refused: bool = False, group: str = GROUP) -> str:
    message = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: could not apply "
        "required modification to OCI specification: error modifying OCI spec: failed to inject CDI devices: "
        f"unresolvable CDI devices nvidia.com/gpu={UUID}: unknown"
    )
    state = (
        f"""{{name: main, ready: false, restartCount: 4, state: {{waiting: {{reason: CrashLoopBackOff}}}},
          lastState: {{terminated: {{reason: StartError, exitCode: 128, message: "{message}"}}}}}}"""
        if refused
        else "{name: main, ready: true, restartCount: 0, state: {running: {}}}"
    )
    return f"""
  - do: create
    object:
      apiVersion: v1
      kind: Pod
      metadata: {{name: {name}, namespace: research, labels: {{runai-gpu-group: {group}}}, annotations: {{gpu-memory: "4000"}}}}
      spec:
        schedulerName: kai-scheduler
        nodeName: dgx-a
        containers: [{{name: main, image: "nvcr.io/nvidia/pytorch:24.05-py3", env: [{{name: NVIDIA_VISIBLE_DEVICES, value: "{devices}"}}]}}]
      status:
        phase: {"Pending" if refused else "Running"}
        containerStatuses:
          - {state}
"""


RESERVATION = f"""
  - do: create
    object:
      apiVersion: v1
      kind: Pod
      metadata:
        name: reservation-dgx-a-x1y2z
        namespace: kai-resource-reservation
        labels: {{app: kai-resource-reservation, runai-gpu-group: {GROUP}}}
        annotations: {{run.ai/reserve_for_gpu_index: {UUID}}}
      spec:
        nodeName: dgx-a
        containers: [{{name: resource-reservation, image: "ghcr.io/nvidia/kai-scheduler/resource-reservation:v0.9.2", resources: {{limits: {{nvidia.com/gpu: "1"}}}}}}]
      status: {{phase: Running, containerStatuses: [{{name: resource-reservation, ready: true, restartCount: 0, state: {{running: {{}}}}}}]}}
"""


def _report(tmp_path: Path, *edits: str, cdi: str = "{enabled: true, default: true}") -> Report:
    doc = f"""name: t
source: gpuchain#0
kind: fault
base:
  stack: gpu-operator
  nodes:
    - {{name: dgx-a, preset: t4-x4}}
    - {{name: cpu-0, gpu: false}}
  workloads:
    - {{name: train, namespace: research, count: 1, gpus: 2, node: dgx-a}}
edits:
  - do: policy
    spec: {{cdi: {cdi}}}
  - do: create
    object: {{apiVersion: v1, kind: Namespace, metadata: {{name: kai-resource-reservation}}}}
  - do: create
    object: {{apiVersion: v1, kind: Namespace, metadata: {{name: research}}}}
{"".join(edits)}
expect: {{root: none, nodes: [], fix: {{does: x, match: [x]}}}}
"""
    return diagnosed_case(tmp_path, doc)


def _of(report: Report, fid: str) -> list[Finding]:
    return [f for f in report.findings if f.id == fid]


def test_fraction_pods_on_a_reserved_gpu_are_not_pods_without_a_request(tmp_path: Path) -> None:
    cdi_name = f"k8s.device-plugin.nvidia.com/gpu={UUID}"
    report = _report(
        tmp_path, _binder("v0.9.2", '"--cdi-enabled=true"'), RESERVATION, _share("a", cdi_name), _share("b", cdi_name)
    )
    assert not _of(report, "workload.gpu-without-request")
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_a_pod_of_a_group_no_reservation_holds_here_still_sees_gpus_without_a_request(tmp_path: Path) -> None:
    report = _report(tmp_path, _binder("v0.9.2", '"--cdi-enabled=true"'), _share("stray", "all", group="other-group"))
    assert [f.severity for f in _of(report, "workload.gpu-without-request")] == [Severity.ERROR]


def test_binder_without_cdi_on_a_cdi_runtime_names_the_chart_value_of_its_release(tmp_path: Path) -> None:
    report = _report(tmp_path, _binder("v0.9.2", '"--leader-elect=true"'), RESERVATION, _share("c", UUID, refused=True))
    (found,) = _of(report, "toolkit.kai-share-not-cdi")
    assert (found.link, found.node, found.root, found.severity) == ("toolkit", "dgx-a", True, Severity.ERROR)
    assert "--set binder.cdi=true" in found.fix and "kubectl delete pod -n research c" in found.fix
    assert "cdi.default=false" in found.fix


def test_an_old_binder_gets_its_own_flag_on_its_deployment(tmp_path: Path) -> None:
    report = _report(tmp_path, _binder("v0.4.7", '"--leader-elect=true"'), RESERVATION, _share("d", UUID, refused=True))
    (found,) = _of(report, "toolkit.kai-share-not-cdi")
    assert found.action is not None and found.action.op is FixOp.PATCH_WORKLOAD
    assert found.action.target == "Deployment/kai-system/binder"
    assert found.action.changes["patch"][0]["value"] == "--cdi-enabled=true"


def test_no_finding_where_the_binder_has_cdi_or_the_runtime_is_not_in_cdi_mode(tmp_path: Path) -> None:
    on = _report(tmp_path, _binder("v0.15.0", '"--cdi-enabled=true"'), RESERVATION, _share("e", UUID, refused=True))
    off = _report(
        tmp_path, _binder("v0.15.0", '"--x=1"'), RESERVATION, _share("e", UUID, refused=True), cdi="{enabled: false}"
    )
    assert not _of(on, "toolkit.kai-share-not-cdi") and not _of(off, "toolkit.kai-share-not-cdi")
