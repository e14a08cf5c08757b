"""NVIDIA's driver image tag: version plus the GPU nodes' OS, the way gpu-operator builds it.

Facts from NVIDIA/gpu-operator ``controllers/object_controls.go`` (``resolveDriverTag``: append
``-<osTag>`` unless the image is a digest; ``kernelFullVersion``: osTag is the
``feature.node.kubernetes.io/system-os_release.ID`` label followed by ``.VERSION_ID``) and
``api/nvidia/v1/clusterpolicy_types.go`` (``imagePath``: ``@`` for a ``sha256:`` version).
Published tags of this shape: ``nvcr.io/nvidia/driver:550.144.03-ubuntu20.04`` in gpu-operator
v24.9.2's image list, ``550.90.07-ubuntu22.04``, ``535.104.05-rhel8.8``.
"""

from __future__ import annotations

import pytest
from operator_helpers import NS, make_cluster, node

from gpuchain.kube import DAEMONSET
from gpuchain.operator.drivertag import (
    OS_ID_LABEL,
    OS_VERSION_LABEL,
    DriverTagError,
    driver_image,
    driver_os,
    os_tag,
)
from gpuchain.operator.reconcile import reconcile

UBUNTU = {OS_ID_LABEL: "ubuntu", OS_VERSION_LABEL: "22.04"}
RHEL = {OS_ID_LABEL: "rhel", OS_VERSION_LABEL: "8.8"}


def test_os_tag_is_id_then_version_id() -> None:
    assert os_tag(UBUNTU) == "ubuntu22.04"
    assert os_tag(RHEL) == "rhel8.8"


def test_missing_labels_name_the_label_and_nfd() -> None:
    with pytest.raises(DriverTagError, match=r"gpu-3 has no .*system-os_release\.VERSION_ID.*Node Feature Discovery"):
        os_tag({OS_ID_LABEL: "ubuntu"}, "gpu-3")


@pytest.mark.parametrize(
    ("version", "tag_os", "expected"),
    [
        ("550.90.07", "ubuntu22.04", "nvcr.io/nvidia/driver:550.90.07-ubuntu22.04"),
        ("535.104.05", "rhel8.8", "nvcr.io/nvidia/driver:535.104.05-rhel8.8"),
        ("sha256:" + "a" * 64, "ubuntu22.04", "nvcr.io/nvidia/driver@sha256:" + "a" * 64),
        ("550.90.07", "", "nvcr.io/nvidia/driver:550.90.07"),
    ],
)
def test_driver_image(version: str, tag_os: str, expected: str) -> None:
    assert driver_image("nvcr.io/nvidia", image="driver", version=version, tag_os=tag_os) == expected


def test_driver_os_is_the_first_labelled_gpu_node() -> None:
    assert driver_os([("gpu-b", RHEL), ("gpu-a", UBUNTU)]) == "ubuntu22.04"
    assert driver_os([("gpu-a", {}), ("gpu-b", RHEL)]) == "rhel8.8"
    assert driver_os([]) == ""


def test_reconcile_renders_the_driver_for_the_nodes_os() -> None:
    cluster = make_cluster(gpu_nodes=0, cpu_nodes=0, spec={"driver": {"version": "550.90.07"}})
    cluster.create(node("gpu-0", **UBUNTU))
    reconcile(cluster, name="cluster-policy", namespace=NS)
    ds = cluster.get(DAEMONSET, name="nvidia-driver-daemonset", namespace=NS)
    image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "nvcr.io/nvidia/driver:550.90.07-ubuntu22.04"
