"""A distribution release whose bundled runc fails under the nvidia runtime (bundled_runc.yaml): RKE2 v1.20.11+rke2r1
to v1.20.12+rke2r1 list runc v1.0.1 in their Packaged Component Versions, v1.20.13+rke2r1 lists runc v1.0.2 (rancher/
rke2 release notes; rancher/rke2#2090 ties runc 1.0.1 to the nvidia runtime). The StartError message is containerd's
("failed to create containerd task: %v", containerd/containerd pkg/cri/server/container_start.go@v1.4.12, wrapping
go-runc's "runc did not terminate successfully")."""

from __future__ import annotations

from typing import Any

import pytest
from doctor.small_cluster import diagnosed

from gpuchain.doctor.links.bundled_runc import FINDING, bundled_runc
from gpuchain.doctor.model import Report

#: Another node, preset and release than the held-out case's (h30-05: rke2-gpu-01, A100 x8, v1.20.12+rke2r1).
SCENARIO = "name: t\nstack: gpu-operator\nnodes:\n  - {name: gpu-w3, preset: t4-x4, distribution: rke2}\n"
MESSAGE = "failed to create containerd task: OCI runtime create failed: runc did not terminate successfully: unknown"


def _release(version: str) -> dict[str, Any]:
    return {"do": "node", "node": "gpu-w3", "nodeInfo": {"kubeletVersion": version}}


def _start_error(ds: str, init: str) -> dict[str, Any]:
    """The operand's validation init container that the runtime could not create, looping."""
    last = {"terminated": "StartError", "exitCode": 128, "message": MESSAGE}
    return {
        "do": "pod",
        "daemonset": ds,
        "node": "gpu-w3",
        "init": [{"name": init, "ready": False, "restarts": 9, "state": {"waiting": "CrashLoopBackOff"}, "last": last}],
    }


FAILING = (_start_error("nvidia-device-plugin-daemonset", "toolkit-validation"),)


def _finding(report: Report) -> Any:
    return next((f for f in report.findings if f.id == FINDING), None)


@pytest.mark.parametrize(
    ("version", "fixed"),
    [("v1.20.11+rke2r2", "v1.20.13"), ("v1.20.12+rke2r1", "v1.20.13"), ("v1.20.13+rke2r1", ""), ("v1.21.7+rke2r1", "")],
)
def test_the_runc_101_releases_are_the_ones_the_release_notes_list(version: str, fixed: str) -> None:
    (entry,) = bundled_runc()
    assert entry.fixed_for(version) == fixed


def test_operands_that_runc_cannot_create_on_an_affected_rke2_release_are_the_node() -> None:
    report = diagnosed(SCENARIO, _release("v1.20.11+rke2r2"), *FAILING)
    found = _finding(report)
    assert found is not None and (found.link, found.node, found.root) == ("node", "gpu-w3", True)
    assert "v1.20.13+rke2r2 or later" in found.fix and "runc v1.0.2" in found.fix
    assert "kubectl delete pod -n gpu-operator nvidia-device-plugin-daemonset-" in found.fix


def test_the_same_failure_on_the_fixed_release_is_not_its_runc() -> None:
    report = diagnosed(SCENARIO, _release("v1.20.13+rke2r1"), *FAILING)
    assert _finding(report) is None


def test_an_affected_release_whose_pods_start_says_nothing() -> None:
    report = diagnosed(SCENARIO, _release("v1.20.12+rke2r1"))
    assert _finding(report) is None


def test_a_k3s_node_of_the_same_kubernetes_version_is_not_rke2s_runc() -> None:
    k3s = SCENARIO.replace("distribution: rke2", "distribution: k3s")
    report = diagnosed(k3s, {**_release("v1.20.12+k3s1")}, *FAILING)
    assert _finding(report) is None
