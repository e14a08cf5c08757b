"""A GPU pod the kubelet refused at admission, read from its Failed status once the kubelet's Event is gone.

The kubelet's rejectPod records a Warning Event and sets the pod Failed with the same reason and message ("Pod was
rejected: " before it from Kubernetes 1.26, "Pod " before that: kubernetes pkg/kubelet/kubelet.go@v1.34.4 and
@v1.20.15). The API server drops Events after an hour (--event-ttl) and the Failed pod stays, so a dump of an older
incident has only the status: the checks that read the Event (`links.outof_gpu`, the device manager's refusals)
read the same refusal from there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from doctor.small_cluster import built

from gpuchain.doctor import Severity
from gpuchain.doctor.admission_reasons import rejected_by_kubelet, rejection_event
from gpuchain.doctor.context import index
from gpuchain.doctor.diagnose import diagnose
from gpuchain.doctor.dump import read_dump, write_dump
from gpuchain.doctor.model import Report
from gpuchain.kube.objects import Obj
from gpuchain.sim.build import SimCluster

TWO_NODES = "name: x\nstack: gpu-operator\nnodes:\n  - {name: gpu-a}\n  - {name: gpu-b}\n"
SAID = "Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 0, capacity: 0"


def _refused(message: str, *, reason: str = "OutOfnvidia.com/gpu") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer-0", "namespace": "ml"},
        "spec": {
            "nodeName": "gpu-b",
            "containers": [{"name": "train", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Failed", "reason": reason, "message": message},
    }


def _with(*objects: Obj) -> Any:
    def edit(sim: SimCluster) -> None:
        for obj in objects:
            sim.cluster.create(obj)

    return edit


def _from_kubectl_dump(sim: SimCluster, where: Path) -> Report:
    write_dump(sim.cluster, where, extras=False)
    return diagnose(read_dump(where))


def test_the_refusal_event_is_read_back_from_the_status_of_either_kubelet_generation() -> None:
    for prefix in ("Pod was rejected: ", "Pod "):
        pod = _refused(prefix + SAID)
        assert rejected_by_kubelet(pod)
        ev = rejection_event(pod)
        assert (ev["reason"], ev["message"], ev["source"]["host"]) == ("OutOfnvidia.com/gpu", SAID, "gpu-b")
        assert ev["involvedObject"] == {"kind": "Pod", "name": "trainer-0", "namespace": "ml"}
    assert not rejected_by_kubelet({**_refused(SAID), "status": {"phase": "Failed", "reason": "Error"}})


def test_a_gpu_pod_refused_before_the_plugin_registered_is_named_from_its_status_alone(tmp_path: Path) -> None:
    report = _from_kubectl_dump(built(TWO_NODES, _with(_refused("Pod was rejected: " + SAID))), tmp_path)
    (found,) = [f for f in report.findings if f.id == "node.gpu-pod-refused-before-plugin"]
    assert (found.node, found.severity, found.root) == ("gpu-b", Severity.ERROR, True)
    assert f"event OutOfnvidia.com/gpu (kubelet): {SAID}" in found.evidence
    assert "delete pod trainer-0" in found.fix


def test_the_refusal_in_both_its_event_and_its_status_is_one_refusal(tmp_path: Path) -> None:
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "trainer-0.17a2b3c4d5e6f708", "namespace": "ml"},
        "involvedObject": {"kind": "Pod", "name": "trainer-0", "namespace": "ml"},
        "type": "Warning",
        "reason": "OutOfnvidia.com/gpu",
        "message": SAID,
        "source": {"component": "kubelet", "host": "gpu-b"},
    }
    write_dump(built(TWO_NODES, _with(_refused("Pod was rejected: " + SAID), event)).cluster, tmp_path, extras=False)
    (view,) = [v for v in index(read_dump(tmp_path)).views if v.name == "gpu-b"]
    refusals = [e for e in view.events if e.get("reason") == "OutOfnvidia.com/gpu"]
    assert [e["metadata"]["name"] for e in refusals] == ["trainer-0.17a2b3c4d5e6f708"]


def test_a_refusal_while_every_gpu_was_in_use_is_no_fault(tmp_path: Path) -> None:
    busy = "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 8, capacity: 8"
    report = _from_kubectl_dump(built(TWO_NODES, _with(_refused(busy))), tmp_path)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_a_refused_pod_that_shows_no_gpu_request_is_read_too(tmp_path: Path) -> None:
    """The refusal's message names the resource: a pod whose spec a dump trimmed, or that asked through an extended
    resource of another name, is still the kubelet's refusal of a GPU on that node."""
    bare = _refused("Pod was rejected: " + SAID)
    bare["spec"]["containers"][0].pop("resources")
    report = _from_kubectl_dump(built(TWO_NODES, _with(bare)), tmp_path)
    assert [f.node for f in report.findings if f.id == "node.gpu-pod-refused-before-plugin"] == ["gpu-b"]
