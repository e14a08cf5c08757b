"""Helm puts a release's labels (app.kubernetes.io/instance, helm.sh/chart) on the objects it renders, a chart's
DaemonSet and its pod template alike, and a dump or a hand-made copy may keep them on only one of the two: the
release a DaemonSet belongs to is read from both. Here: NVIDIA's device plugin chart 0.12.0, which runs the NFD it
deploys only for GFD and renders no GFD DaemonSet (releases.yaml, nvidia-device-plugin-chart.gfd-subchart-version),
with its labels on the plugin's pod template only.
"""

from __future__ import annotations

from doctor.small_cluster import diagnosed

from gpuchain.doctor.model import Severity
from gpuchain.kube import DAEMONSET
from gpuchain.sim.build import SimCluster

HOST = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, hostDriver: 550.90.07}\n"
RELEASE = {"app.kubernetes.io/instance": "nvdp", "helm.sh/chart": "nvidia-device-plugin-0.12.0"}


def _template_labelled(sim: SimCluster) -> None:
    """An edit: the plugin's pod template (not the DaemonSet) labelled as Helm release nvdp of chart 0.12.0."""
    patch = {"spec": {"template": {"metadata": {"labels": RELEASE}}}}
    sim.cluster.patch(DAEMONSET, name="nvidia-device-plugin-daemonset", patch=patch, namespace="kube-system")


def _nfd_worker(sim: SimCluster) -> None:
    """An edit: the chart's NFD subchart worker DaemonSet of release nvdp."""
    labels = {"app.kubernetes.io/instance": "nvdp", "app.kubernetes.io/name": "node-feature-discovery"}
    container = {"name": "worker", "image": "registry.k8s.io/nfd/node-feature-discovery:v0.10.1"}
    sim.cluster.create(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "nvdp-node-feature-discovery-worker", "namespace": "kube-system", "labels": labels},
            "spec": {"template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}},
        }
    )


def test_a_release_labelled_on_the_pod_template_only_is_still_its_chart_release() -> None:
    report = diagnosed(HOST, _template_labelled, _nfd_worker)
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.id, root.link, root.node) == ("gfd.known-defect", "gfd", "n1")
    assert root.fix.startswith("helm upgrade nvdp nvdp/nvidia-device-plugin -n kube-system --version 0.12.1")
    # Without the release's NFD, GFD was not asked for.
    assert "gfd.known-defect" not in diagnosed(HOST, _template_labelled).ids
