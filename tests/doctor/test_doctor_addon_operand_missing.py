"""An operand DaemonSet missing on a stack no operator reconciles (GKE's device plugin, a cluster addon): the repair
deploys it the way that stack ships it, not "start the operator again"."""

from __future__ import annotations

from doctor.small_cluster import diagnosed, no_gpus

from gpuchain.doctor import Severity
from gpuchain.kube import DAEMONSET, POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim.build import SimCluster

GKE = "name: t\nstack: gke\nnodes:\n  - {name: gke-pool-a-1, preset: t4-x4}\n"


def _no_plugin(sim: SimCluster) -> None:
    for kind in (POD, DAEMONSET):
        for obj in sim.cluster.list(kind):
            if name_of(obj).startswith("nvidia-gpu-device-plugin"):
                sim.cluster.delete(kind, name=name_of(obj), namespace=namespace_of(obj))


def test_gkes_missing_device_plugin_daemonset_is_deployed_from_its_addon_not_an_operator() -> None:
    report = diagnosed(GKE, _no_plugin, no_gpus("gke-pool-a-1"))
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.id, root.link, root.node) == ("operand.not-deployed", "device-plugin", "gke-pool-a-1")
    assert "cluster/addons/device-plugins/nvidia-gpu/daemonset.yaml" in root.fix and "kubectl apply -f" in root.fix
    assert "operator" not in root.fix
