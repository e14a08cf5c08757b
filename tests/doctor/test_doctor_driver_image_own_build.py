"""A node whose OS NVIDIA publishes no driver image for: the operator's driver kept, from an image the cluster's
owners build (NVIDIA/gpu-driver-container, tagged ``<version>-<os tag>``, the policy's driver repository pointed at
it); the host's driver stays the first way out where the host can install one, and is none on an image-based OS.

Sources: NVIDIA/cloud-native-docs gpu-operator/getting-started.rst@52dcb7b8 "Running a Custom Driver Image" (rebuild
with --build-arg DRIVER_VERSION, tag ``driver:<version>-<os>``, set driver.repository and driver.version);
NVIDIA/gpu-operator controllers/object_controls.go@a22dbf6 resolveDriverTag (the OS tag appended to the version);
NVIDIA/gpu-driver-container Makefile@06a208c (DISTRIBUTIONS: ubuntu, rhel8-10, rocky8-10, precompiled_rhcos) and its
rhel9 Dockerfile; the pull refusal's wording is CRI-O's for a registry's MANIFEST_UNKNOWN
(opencontainers/distribution-spec spec.md) and containerd's "not found". OKD 4.16's SCOS build, Debian 12 and the
node names, kernels and driver versions are stand-ins.
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed, no_gpus
from doctor.test_doctor_selinux_and_driver_tags import _driver

from gpuchain.doctor import Severity
from gpuchain.doctor.driver_build import dockerfile, image_based
from gpuchain.doctor.model import Finding, Report
from gpuchain.kube import POD

SCOS = (
    "name: t\nstack: gpu-operator\nnamespace: nvidia-gpu-operator\npolicy: {driver: {version: 550.144.03}}\nnodes:\n"
    "  - {name: okd-w3, preset: l4-x2, osImage: CentOS Stream CoreOS 416.9.202409181330-0, "
    "kernel: 5.14.0-511.el9.x86_64, containerRuntime: 'cri-o://1.29.8'}\n"
)
DEBIAN = (
    "name: t\nstack: gpu-operator\nnodes:\n"
    "  - name: deb-1\n    osImage: Debian GNU/Linux 12 (bookworm)\n    kernel: 6.1.0-28-amd64\n"
    "    labels: {feature.node.kubernetes.io/system-os_release.ID: debian, "
    "feature.node.kubernetes.io/system-os_release.VERSION_ID: '12'}\n"
)


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def _refused(node: str, image: str, said: str) -> dict[str, Any]:
    """An edit: the driver pod on ``node`` in ImagePullBackOff for ``image``, the kubelet's Event quoting ``said``."""
    waiting = {"waiting": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
    event = {"reason": "Failed", "message": f'Failed to pull image "{image}": {said}'}
    return {**_driver(node, state=waiting), "events": [event]}


def test_an_image_based_os_without_driver_images_is_told_to_build_its_own_and_point_the_policy_at_it() -> None:
    image = "nvcr.io/nvidia/driver:550.144.03-scos4.16"
    said = "reading manifest 550.144.03-scos4.16 in nvcr.io/nvidia/driver: manifest unknown"
    (root,) = _roots(diagnosed(SCOS, no_gpus("okd-w3"), _refused("okd-w3", image, said)))
    assert (root.link, root.node) == ("driver", "okd-w3")
    assert root.fix.startswith("# build a driver image for scos4.16 yourself from NVIDIA/gpu-driver-container")
    assert "rhel9 Dockerfile" in root.fix and "<your registry>/driver:550.144.03-scos4.16" in root.fix
    assert '"repository":"<your registry>"' in root.fix and '"version":"550.144.03"' in root.fix
    assert "enabled" not in root.fix and root.action is None and "image-based OS" in root.cause
    assert any("read as scos4.16" in e for e in root.evidence)


def test_a_package_managed_os_without_driver_images_keeps_the_host_driver_first_and_names_its_own_build() -> None:
    image = "nvcr.io/nvidia/driver:570.172.08-debian12"
    (root,) = _roots(diagnosed(DEBIAN, no_gpus("deb-1"), _refused("deb-1", image, f"{image}: not found")))
    assert root.action is not None and root.action.changes == {"spec": {"driver": {"enabled": False}}}
    assert "or build a driver image for debian12 yourself" in root.fix
    assert "Dockerfile of the supported OS nearest" in root.fix and "spec.driver.repository" in root.fix


def test_rocky_linux_has_published_driver_images_so_its_missing_tag_is_not_called_an_unsupported_os() -> None:
    rocky = DEBIAN.replace("Debian GNU/Linux 12 (bookworm)", "Rocky Linux 9.7 (Blue Onyx)").replace(
        "ID: debian", "ID: rocky"
    )
    rocky = rocky.replace("VERSION_ID: '12'", "VERSION_ID: '9.7'").replace("6.1.0-28-amd64", "5.14.0-611.el9_7.x86_64")
    image = "nvcr.io/nvidia/driver:570.172.08-rocky9.7"
    (root,) = _roots(diagnosed(rocky, no_gpus("deb-1"), _refused("deb-1", image, f"{image}: not found")))
    assert "no driver image exists for this node's OS" not in root.cause
    assert "(rocky9)" in root.fix


def test_the_helpers_read_the_os_family_from_the_node() -> None:
    assert dockerfile("5.14.0-511.el9.x86_64") == "rhel9" and dockerfile("4.18.0-553.el8_10.x86_64") == "rhel8"
    assert dockerfile("6.1.0-28-amd64") == ""
    scos = {"status": {"nodeInfo": {"osImage": "CentOS Stream CoreOS 416.9.202409181330-0"}}}
    debian = {"status": {"nodeInfo": {"osImage": "Debian GNU/Linux 12 (bookworm)"}}}
    assert image_based(scos) and not image_based(debian)


def test_a_self_built_driver_image_running_on_an_image_based_os_stays_quiet() -> None:
    own = "registry.gpu.example:5000/nvidia/driver:550.144.03-scos4.16"

    def edit(sim: Any) -> None:
        for p in sim.cluster.list(POD):
            if p["metadata"]["name"].startswith("nvidia-driver-daemonset"):
                containers = [{**p["spec"]["containers"][0], "image": own}]
                ns = p["metadata"]["namespace"]
                sim.cluster.patch(
                    POD, name=p["metadata"]["name"], patch={"spec": {"containers": containers}}, namespace=ns
                )

    report = diagnosed(SCOS, edit)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]
