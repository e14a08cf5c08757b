"""A driver version skew aligns the nodes on a release the release notes do not tell users to move off
(links/driver.skew_target, releases.yaml component driver): NVIDIA/cloud-native-docs
gpu-operator/release-notes.rst@52dcb7b, v25.3.1 known issues: "For drivers 570.124.06, 570.133.20, 570.148.08, and
570.158.01, GPU workloads cannot be scheduled on nodes that have a mix of MIG slices and full GPUs ... NVIDIA
recommends that you upgrade the driver to version 570.172.08"."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor.links.driver import skew_target

THREE = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n  - {name: n2}\n  - {name: n3}\n"


def _versions(**by_node: str) -> Any:
    from gpuchain.kube import NODE

    def edit(sim: Any) -> None:
        for node, version in by_node.items():
            labels = {"nvidia.com/cuda.driver-version.full": version}
            sim.cluster.patch(NODE, name=node, patch={"metadata": {"labels": labels}})

    return edit


def test_the_majority_is_the_target_unless_its_release_is_one_to_move_off() -> None:
    assert skew_target({"550.54.15": ["a", "b"], "550.127.05": ["c"]}, "550.54.15") == ("550.54.15", ())
    target, skipped = skew_target({"570.133.20": ["a", "b"], "570.172.08": ["c"]}, "570.133.20")
    assert target == "570.172.08" and any("driver.mig-mixed-pending" in e for e in skipped)
    # No node runs a release without the issue: the release that fixed it.
    assert skew_target({"570.133.20": ["a", "b"], "570.148.08": ["c"]}, "570.133.20")[0] == "570.172.08"
    # An older release without the issue is not moved back to: the notes' fixed release is newer.
    assert skew_target({"570.124.06": ["a", "b"], "550.163.01": ["c"]}, "570.124.06")[0] == "570.172.08"
    # A newer release without it, that a node already runs, is kept.
    assert skew_target({"570.124.06": ["a", "b"], "580.65.06": ["c"]}, "570.124.06")[0] == "580.65.06"


def test_a_skew_whose_majority_runs_a_defective_driver_moves_every_node_to_the_good_one() -> None:
    report = diagnosed(THREE, _versions(n1="570.133.20", n2="570.133.20", n3="570.172.08"))
    (skew,) = [f for f in report.findings if f.id == "driver.version-skew"]
    assert "570.172.08" in skew.fix and "570.133.20" not in skew.fix, skew.fix
    assert any("release: driver.mig-mixed-pending" in e for e in skew.evidence)


def test_a_skew_on_releases_without_a_known_issue_keeps_the_majority() -> None:
    report = diagnosed(THREE, _versions(n1="550.127.05", n2="550.127.05", n3="550.54.15"))
    (skew,) = [f for f in report.findings if f.id == "driver.version-skew"]
    assert "550.127.05" in skew.fix and not any(e.startswith("release:") for e in skew.evidence)


HOST = (
    "name: t\nstack: gpu-operator\npolicy:\n  driver: {enabled: false}\nnodes:\n"
    "  - {name: old, hostDriver: 470.82.01}\n  - {name: new, count: 2, hostDriver: 470.129.06}\n"
)


def test_host_drivers_of_one_branch_are_a_warning_not_a_root() -> None:
    """Releases of one branch support the same CUDA versions: a half-done host upgrade breaks no image."""
    from gpuchain.doctor.model import Severity

    report = diagnosed(HOST)
    (skew,) = [f for f in report.findings if f.id == "driver.version-skew"]
    assert skew.severity is Severity.WARNING and not skew.root and skew.action is None
    assert "470 branch" in skew.cause and "470.129.06" in skew.fix


def test_host_drivers_of_two_branches_stay_an_error_to_repair() -> None:
    from gpuchain.doctor.model import Severity

    report = diagnosed(HOST.replace("470.82.01", "535.161.08"))
    (skew,) = [f for f in report.findings if f.id == "driver.version-skew"]
    assert skew.severity is Severity.ERROR and skew.root
