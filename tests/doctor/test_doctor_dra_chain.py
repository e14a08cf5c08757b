"""The DRA chain on a node whose GPUs the label ``gpuchain.io/gpu.allocator=dra`` gives to gpuchain's DRA plugin:
no nvidia.com/gpu capacity there is by design, so the walk follows the plugin instead (its DaemonSet, its pod on
the node, the ResourceSlice it publishes) and never reports a device plugin that failed to register.

Facts: charts/gpuchain templates/dra-plugin.yaml (DaemonSet ``gpuchain-dra-plugin``, container ``dra-plugin``,
values ``dra.enabled``); ResourceSlice fields from k8s.io/api resource/v1 types.go@v0.34.4 (spec.driver,
spec.nodeName, spec.devices); the container states as the kubelet reports them (kubernetes
pkg/kubelet/kuberuntime@v1.34.4: waiting CrashLoopBackOff, lastState terminated Error).
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor.model import Finding, Report, Severity
from gpuchain.dra.kinds import RESOURCE_SLICE
from gpuchain.kube import NODE
from gpuchain.kube.errors import NotFoundError
from gpuchain.sim.build import SimCluster

SCENARIO = "name: t\nstack: gpuchain\nnodes:\n  - {name: n1}\n"
NS = "gpuchain"


def to_dra(sim: SimCluster) -> None:
    """An edit: node n1 handed to DRA; the device plugin announces none there, as it does by design."""
    sim.cluster.patch(NODE, name="n1", patch={"metadata": {"labels": {"gpuchain.io/gpu.allocator": "dra"}}})
    zero = {"nvidia.com/gpu": "0"}
    sim.cluster.patch_status(NODE, name="n1", status={"capacity": zero, "allocatable": zero})


def dra_plugin(container: dict[str, Any]) -> Any:
    """An edit: gpuchain's DRA plugin DaemonSet and its pod on n1, its container in the state given."""
    spec = {"containers": [{"name": "dra-plugin", "image": "ghcr.io/gpuchain/gpuchain:0.9.0"}]}

    def edit(sim: SimCluster) -> None:
        sim.cluster.create(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "gpuchain-dra-plugin", "namespace": NS},
                "spec": {"template": {"spec": spec}},
            }
        )
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "gpuchain-dra-plugin-q7k2m",
                    "namespace": NS,
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gpuchain-dra-plugin"}],
                },
                "spec": {"nodeName": "n1", **spec},
                "status": {"phase": "Running", "containerStatuses": [{"name": "dra-plugin", **container}]},
            }
        )

    return edit


READY = {"ready": True, "state": {"running": {"startedAt": "2026-12-01T10:00:00Z"}}}
CRASHING = {
    "ready": False,
    "restartCount": 6,
    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
    "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
}


def _error_on_n1(report: Report) -> Finding:
    (found,) = [f for f in report.findings if f.node == "n1" and f.severity is Severity.ERROR]
    return found


def test_a_running_dra_plugin_that_published_nothing_is_started_again() -> None:
    found = _error_on_n1(diagnosed(SCENARIO, to_dra, dra_plugin(READY)))
    assert (found.id, found.link) == ("device-plugin.dra-unpublished", "device-plugin")
    assert found.fix.startswith(f"kubectl -n {NS} delete pod gpuchain-dra-plugin-q7k2m")
    assert "no ResourceSlice of gpu.gpuchain.io for n1" in found.evidence


def test_a_crash_looping_dra_plugin_is_the_link_down_with_its_state() -> None:
    found = _error_on_n1(diagnosed(SCENARIO, to_dra, dra_plugin(CRASHING)))
    assert found.id == "device-plugin.dra-unpublished"
    assert any("CrashLoopBackOff" in e and "6 restarts" in e for e in found.evidence)


def test_a_dra_plugin_that_publishes_the_nodes_gpus_is_the_link_working() -> None:
    def published(sim: SimCluster) -> None:
        sim.cluster.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": "n1-gpu.gpuchain.io"},
                "spec": {"driver": "gpu.gpuchain.io", "nodeName": "n1", "devices": [{"name": "gpu-0"}]},
            }
        )

    report = diagnosed(SCENARIO, to_dra, dra_plugin(READY), published)
    assert not [f for f in report.findings if f.severity is Severity.ERROR], report.ids()
    chain = next(c for c in report.chains if c.node == "n1")
    link = next(lk for lk in chain.links if lk.name == "device-plugin")
    assert link.state.value == "ok" and "gpu.gpuchain.io: 1 devices" in link.summary


def test_a_cluster_that_serves_no_resourceslices_is_not_told_nothing_is_published() -> None:
    """Before Kubernetes 1.34 resource.k8s.io/v1 is not served (a 404): no ResourceSlice was read, which is not
    none published, so the DRA link is not judged broken on it."""

    def unserved(sim: SimCluster) -> None:
        real = sim.cluster.list_readonly

        def list_readonly(kind: Any, *args: Any, **kwargs: Any) -> Any:
            if kind is RESOURCE_SLICE:
                raise NotFoundError("the server could not find the requested resource")
            return real(kind, *args, **kwargs)

        sim.cluster.list_readonly = list_readonly  # type: ignore[method-assign]

    report = diagnosed(SCENARIO, to_dra, dra_plugin(READY), unserved)
    assert not [f for f in report.findings if f.severity is Severity.ERROR], report.ids()


#: What gpuchain's DRA plugin leaves as its termination message when its state directory cannot be written: Python's
#: OSError as CPython prints it ("[Errno %S] %S: %R", Objects/exceptions.c OSError_str; EROFS's strerror), for the
#: checkpoint gpuchain.dra writes in its state directory (dra/checkpoint.py FILE_NAME, dra/driver.py DEFAULT_STATE_DIR).
READ_ONLY = "OSError: [Errno 30] Read-only file system: '/var/lib/kubelet/plugins/gpu.gpuchain.io/checkpoint.json'"


def _crashing(message: str) -> dict[str, Any]:
    """CRASHING with ``message`` as its last run's termination message."""
    return {**CRASHING, "lastState": {"terminated": {**CRASHING["lastState"]["terminated"], "message": message}}}


def test_a_crashing_dra_plugin_whose_line_gpuchain_knows_only_by_its_shape_gets_that_shapes_repair_first() -> None:
    found = _error_on_n1(diagnosed(SCENARIO, to_dra, dra_plugin(_crashing(READ_ONLY))))
    assert found.id == "device-plugin.dra-unpublished" and f"unrecognised: {READ_ONLY}" in found.evidence
    assert found.fix.startswith("# ") and "read-only file system" in found.fix
    assert found.fix.endswith(f"; then kubectl -n {NS} delete pod gpuchain-dra-plugin-q7k2m")


def test_a_crashing_dra_plugin_whose_line_has_no_shape_is_started_again() -> None:
    found = _error_on_n1(diagnosed(SCENARIO, to_dra, dra_plugin(_crashing("unexpected state: claim map is empty"))))
    assert found.fix == f"kubectl -n {NS} delete pod gpuchain-dra-plugin-q7k2m"
