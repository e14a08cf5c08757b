"""Pods of the nvidia RuntimeClass without a sandbox, read from the kubelet's pod condition where the Events that
said why are gone (the API server keeps Events for an hour, kube-apiserver --event-ttl, so a dump of an older
incident has none).

A kubelet of 1.29 or later writes PodReadyToStartContainers False until the runtime has created the pod's sandbox
(kubernetes pkg/kubelet/status/generate.go@v1.34.4); the containers themselves only show the kubelet's default
waiting reasons (pkg/kubelet/kubelet_pods.go convertToAPIContainerStatuses@v1.34.4: ContainerCreating, or
PodInitializing for a pod with init containers). Where pods of the default runtime on the same node have their
sandboxes, the runtime creates sandboxes and only its nvidia handler does not: the toolkit link.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from doctor.small_cluster import built

from gpuchain.doctor import Severity
from gpuchain.doctor.diagnose import diagnose, run_doctor
from gpuchain.doctor.dump import read_dump, write_dump
from gpuchain.doctor.model import Report
from gpuchain.doctor.pods import sandbox_created
from gpuchain.kube import EVENT, POD
from gpuchain.kube.objects import READY_TO_START, Obj, name_of, namespace_of
from gpuchain.sim.build import SimCluster
from gpuchain.sim.shapes import no_sandbox

#: Node b's runtime has no nvidia handler (the simulator renders its RuntimeClass pods without a sandbox).
#: A healthy GPU Operator node.
HEALTHY = "name: healthy\nstack: gpu-operator\nnodes:\n  - {name: a}\n"
UNWIRED = "name: unwired\nstack: gpu-operator\nnodes:\n  - {name: a}\n  - {name: b, runtimeConfigured: false}\n"


def _events_expired(sim: SimCluster) -> None:
    """Every Event gone, as the API server drops them after their TTL (the simulator's kubelet, of 1.36, writes
    PodReadyToStartContainers False on the pods without a sandbox)."""
    for ev in sim.cluster.list(EVENT):
        sim.cluster.delete(EVENT, name=name_of(ev), namespace=namespace_of(ev))


def _from_kubectl_dump(sim: SimCluster, where: Path) -> Report:
    write_dump(sim.cluster, where, extras=False)
    return diagnose(read_dump(where))


def _errors(report: Report) -> list[tuple[str, str | None, str]]:
    return [(f.id, f.node, f.link) for f in report.findings if f.severity is Severity.ERROR and f.root]


def test_nvidia_pods_without_a_sandbox_beside_runc_pods_with_one_are_the_runtime_handler(tmp_path: Path) -> None:
    sim = built(UNWIRED, _events_expired)
    plugin = next(
        p
        for p in sim.cluster.list(POD)
        if p["spec"].get("nodeName") == "b" and name_of(p).startswith("nvidia-device-plugin-daemonset-")
    )
    assert sandbox_created(plugin) is False
    assert {cs["state"]["waiting"]["reason"] for cs in plugin["status"]["containerStatuses"]} == {"PodInitializing"}
    report = _from_kubectl_dump(sim, tmp_path)
    assert _errors(report) == [("toolkit.runtime-not-configured", "b", "toolkit")]
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert any(f"({READY_TO_START}=False), while pod nvidia-container-toolkit-daemonset-" in e for e in root.evidence)


def test_without_a_pod_that_has_its_sandbox_the_condition_alone_names_no_handler(tmp_path: Path) -> None:
    def no_witness(sim: SimCluster) -> None:
        _events_expired(sim)
        for pod in sim.cluster.list(POD):
            if pod["spec"].get("nodeName") == "b" and not pod["spec"].get("runtimeClassName"):
                sim.cluster.delete(POD, name=name_of(pod), namespace=namespace_of(pod))

    report = _from_kubectl_dump(built(UNWIRED, no_witness), tmp_path)
    assert ("toolkit.runtime-not-configured", "b", "toolkit") not in _errors(report)


def _pod(conditions: list[Obj], *statuses: Obj) -> Obj:
    return {"status": {"conditions": conditions, "containerStatuses": list(statuses)}}


def test_a_sandbox_is_read_from_the_condition_else_from_a_container_that_ran() -> None:
    waiting = {"name": "c", "state": {"waiting": {"reason": "PodInitializing"}}, "restartCount": 0}
    running = {"name": "c", "state": {"running": {}}, "restartCount": 0}
    assert sandbox_created(_pod([{"type": READY_TO_START, "status": "False"}], running)) is False
    assert sandbox_created(_pod([{"type": READY_TO_START, "status": "True"}], waiting)) is True
    assert sandbox_created(_pod([], running)) is True
    assert sandbox_created(_pod([], {**waiting, "restartCount": 2})) is True
    assert sandbox_created(_pod([], waiting)) is None


def _workloads_without_sandbox(runtime_class: str, count: int = 2) -> Callable[[SimCluster], None]:
    """An edit: ``count`` GPU pods of ``runtime_class`` on node a that the kubelet says have no sandbox, their Events
    gone: the operands started before the runtime lost its handler (kubernetes-sigs/kubespray#12277: a rerun rewrote
    containerd's config under running pods), so only pods created since show it."""

    def edit(sim: SimCluster) -> None:
        _events_expired(sim)
        for i in range(count):
            container = {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:25.04-py3"}
            container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
            spec = {"nodeName": "a", "runtimeClassName": runtime_class, "containers": [container]}
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"finetune-{i}", "namespace": "ml"}}
            pod |= {"spec": spec, "status": no_sandbox([], mains=["trainer"], ip="10.0.0.1")}
            sim.cluster.create(pod)

    return edit


def test_gpu_workloads_of_nvidia_s_class_without_a_sandbox_beside_runc_pods_are_the_runtime_handler() -> None:
    report = run_doctor((sim := built(HEALTHY, _workloads_without_sandbox("nvidia"))).cluster, reader=sim.read_log)
    assert _errors(report) == [("toolkit.runtime-not-configured", "a", "toolkit")]


def test_one_workload_without_a_sandbox_beside_operands_of_the_class_that_have_theirs_is_not_the_handler() -> None:
    """A volume the pod alone waits for (a claim not attached, its Event gone) holds it without a sandbox too."""
    report = run_doctor((sim := built(HEALTHY, _workloads_without_sandbox("nvidia", 1))).cluster, reader=sim.read_log)
    assert ("toolkit.runtime-not-configured", "a", "toolkit") not in _errors(report)


def test_a_workload_of_another_runtime_class_without_a_sandbox_is_not_the_toolkit() -> None:
    report = run_doctor((sim := built(HEALTHY, _workloads_without_sandbox("kata-qemu"))).cluster, reader=sim.read_log)
    assert ("toolkit.runtime-not-configured", "a", "toolkit") not in _errors(report)


def _old_kubelet(sim: SimCluster) -> None:
    """Every Event gone and no PodReadyToStartContainers, as a kubelet before 1.29 writes pods (its gate was off)."""
    _events_expired(sim)
    for pod in sim.cluster.list(POD):
        conditions = [c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] != READY_TO_START]
        sim.cluster.patch_status(POD, name=name_of(pod), namespace=namespace_of(pod), status={"conditions": conditions})


def test_before_the_condition_operand_pods_that_started_nothing_beside_their_image_run_under_runc_are_the_handler() -> (
    None
):
    """NVIDIA/gpu-operator#730's state on a kubelet of 1.23 (kops), its Events expired: every operand pod of the
    nvidia class waits before its first container, whose validator image the toolkit pod already ran under runc."""
    report = run_doctor((sim := built(UNWIRED, _old_kubelet)).cluster, reader=sim.read_log)
    assert _errors(report) == [("toolkit.runtime-not-configured", "b", "toolkit")]
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert any("started no container, though its first image" in e for e in root.evidence)


def test_one_operand_pod_that_started_nothing_while_the_others_run_is_not_the_handler() -> None:
    """A volume the device plugin alone waits for (its config's ConfigMap, gone) holds only that pod."""

    def plugin_waits(sim: SimCluster) -> None:
        _old_kubelet(sim)
        pod = next(
            p
            for p in sim.cluster.list(POD)
            if p["spec"].get("nodeName") == "a" and name_of(p).startswith("nvidia-device-plugin-daemonset-")
        )
        inits = [c["name"] for c in pod["spec"].get("initContainers") or []]
        status = no_sandbox(inits, mains=[c["name"] for c in pod["spec"]["containers"]], ip="10.0.0.1")
        status["conditions"] = [c for c in status["conditions"] if c["type"] != READY_TO_START]
        sim.cluster.patch_status(POD, name=name_of(pod), namespace=namespace_of(pod), status=status)

    report = run_doctor((sim := built(HEALTHY, plugin_waits)).cluster, reader=sim.read_log)
    assert ("toolkit.runtime-not-configured", "a", "toolkit") not in _errors(report)
