"""A driver DaemonSet kept off a node whose node image brings the driver: GKE installs the driver itself on nodes
labelled cloud.google.com/gke-gpu-driver-version (default, latest), and its installer DaemonSets select only nodes
without that label (GoogleCloudPlatform/container-engine-accelerators nvidia-driver-installer/cos/
daemonset-preloaded.yaml). Where such a node announces its GPUs, the installer's absence there is no broken driver
link; on a node of that cluster without the label it still is.
"""

from __future__ import annotations

from doctor.small_cluster import diagnosed, gke_installer_on

from gpuchain.doctor import Severity

GKE = "name: t\nstack: gke\nnodes:\n  - {name: managed, preset: t4-x4}\n  - {name: stale, preset: t4-x4}\n"


def test_a_node_whose_image_brings_the_driver_needs_no_installer_pod() -> None:
    report = diagnosed(
        GKE,
        {"do": "node", "node": "stale", "labels": {"cloud.google.com/gke-gpu-driver-version": None}},
        gke_installer_on("stale"),
    )
    driver = [f for f in report.findings if f.severity is Severity.ERROR and f.link == "driver"]
    assert not [f for f in driver if f.node == "managed"]


def test_a_node_without_the_images_driver_still_needs_the_installer() -> None:
    report = diagnosed(
        GKE,
        {"do": "node", "node": "stale", "labels": {"cloud.google.com/gke-gpu-driver-version": None}},
        gke_installer_on("managed"),
    )
    assert [f for f in report.findings if f.severity is Severity.ERROR and f.link == "driver" and f.node == "stale"]
