"""Two driver-link fixes taught from the components' own sources:

- a RHEL or Rocky Linux driver image tag with a minor release (``<version>-rhel9.7``) the registry lacks: NVIDIA
  publishes driver images for chosen minors only, and from GPU Operator v26.7.0 the operator tags them by the OS
  major version (``rhel9``), published for RHEL and Rocky Linux 8, 9 and 10 (NVIDIA/cloud-native-docs
  gpu-operator/platform-support.rst@e883291, footnote rhel-9);
- NVIDIA's DRA kubelet plugin whose prestart check finds no ``libnvidia-ml.so.1`` in the fixed directories under its
  driver root: its error asks to "review the DRA driver's 'nvidiaDriverRoot' Helm chart variable" where the path is
  unexpected, else the driver's install (NVIDIA/k8s-dra-driver-gpu hack/kubelet-plugin-prestart.sh@2a3d430), so the
  fix names both the install and the chart's driver root."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doctor.small_cluster import diagnosed, no_gpus
from doctor.test_doctor_selinux_and_driver_tags import RHEL, _pull
from doctor.test_doctor_silent_pods import CREATING, DRA_DS, DRA_NS, HOST_DRA, WAITING_INIT, dra_release

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, Report
from gpuchain.sim.build import SimCluster


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def _rhel(minor: str) -> str:
    return RHEL.format(policy="").replace("9.4", minor)


def test_a_rhel_minor_driver_tag_not_published_names_the_operator_release_that_tags_by_major() -> None:
    (root,) = _roots(diagnosed(_rhel("9.5"), no_gpus("r1"), _pull("r1", "nvcr.io/nvidia/driver:570.124.06-rhel9.5")))
    assert root.link == "driver"
    assert "upgrade the GPU Operator to v26.7.0 or later" in root.fix and "(rhel9)" in root.fix


def test_a_pinned_rhel8_minor_tag_names_the_rhel8_major_tag() -> None:
    scenario = (
        "name: t\nstack: gpu-operator\npolicy: {driver: {version: 550.144.03}}\nnodes:\n  - name: k1\n"
        "    osImage: Red Hat Enterprise Linux 8.9 (Ootpa)\n    kernel: 4.18.0-513.5.1.el8_9.x86_64\n"
        "    labels: {feature.node.kubernetes.io/system-os_release.ID: rhel, "
        "feature.node.kubernetes.io/system-os_release.VERSION_ID: '8.9'}\n"
    )
    (root,) = _roots(diagnosed(scenario, no_gpus("k1"), _pull("k1", "nvcr.io/nvidia/driver:550.144.03-rhel8.9")))
    assert root.action is not None and root.action.changes == {"spec": {"driver": {"version": None}}}
    assert "v26.7.0" in root.fix and "(rhel8)" in root.fix


def test_a_major_tagged_or_ubuntu_driver_image_missing_is_not_sent_to_the_major_tag_release() -> None:
    (root,) = _roots(diagnosed(_rhel("9.4"), no_gpus("r1"), _pull("r1", "nvcr.io/nvidia/driver:535.104.05-rhel9")))
    assert "v26.7.0" not in root.fix
    ubuntu = (
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: u1, osImage: Ubuntu 24.04.1 LTS, kernel: 6.8.0-45-generic}\n"
    )
    (root,) = _roots(diagnosed(ubuntu, no_gpus("u1"), _pull("u1", "nvcr.io/nvidia/driver:535.183.01-ubuntu24.04")))
    assert "v26.7.0" not in root.fix


def _prestart_log(text: str) -> Callable[[SimCluster], None]:
    """An edit: the init container's log of the DRA plugin pod ``dra_release`` creates."""

    def edit(sim: SimCluster) -> None:
        sim.cluster.set_logs(f"{DRA_DS}-7xk2p", namespace=DRA_NS, container="init-container", text=text)

    return edit


#: The prestart script's line (its own format, hack/kubelet-plugin-prestart.sh@2a3d430) for a driver root that is a
#: whole OS tree without the driver's files in the directories it searches; the contents are a stand-in.
NOT_THERE = (
    "2026-03-02T11:20:00Z  /driver-root (/ on host): nvidia-smi: not found, libnvidia-ml.so.1: not found, "
    "current contents: [bin  boot  dev  etc  home  lib  lib64  opt  proc  root  run  sbin  sys  tmp  usr  var].\n"
)


def test_a_dra_plugin_finding_no_nvml_under_its_root_is_told_of_the_charts_driver_root() -> None:
    report = diagnosed(
        HOST_DRA, no_gpus("n1"), dra_release("n1", WAITING_INIT, CREATING, "/"), _prestart_log(NOT_THERE * 2)
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("driver", "n1")
    assert "--set nvidiaDriverRoot=<that prefix>" in root.fix
    assert f"kubectl -n {DRA_NS} delete pod {DRA_DS}-7xk2p" in root.fix


def test_a_dra_plugin_whose_driver_is_found_but_fails_is_not_told_to_move_its_root() -> None:
    """The libraries are there and nvidia-smi fails: the driver itself, not where the chart looks."""
    failing: dict[str, Any] = {
        "text": "2026-03-02T11:20:00Z  /driver-root (/ on host): nvidia-smi: '/driver-root/usr/bin/nvidia-smi', "
        "libnvidia-ml.so.1: '/driver-root/usr/lib64/libnvidia-ml.so.1', current contents: [bin  usr  var].\n"
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\nexit code: 9\n"
    }
    report = diagnosed(
        HOST_DRA, no_gpus("n1"), dra_release("n1", WAITING_INIT, CREATING, "/"), _prestart_log(failing["text"])
    )
    (root,) = _roots(report)
    assert root.link == "driver" and "nvidiaDriverRoot" not in root.fix
