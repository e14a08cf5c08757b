"""A dcgm-exporter that runs ready but started before its node's driver: it loads NVML once, at start
(NVIDIA/dcgm-exporter internal/pkg/nvmlprovider/provider.go newNVMLProvider@4.2.3-4.1.1 logs "Cannot init NVML library;
err: %v" and keeps an uninitialised provider), so it serves no GPU metric until it is restarted
(gpuchain.doctor.links.exporter_nvml). The device plugin on the same node, started after it and ready, shows the driver
is there now. Fixture: the standalone dcgm-exporter chart's DaemonSet on an EKS node (NVIDIA's chart, gpu-monitoring
namespace); the log is the exporter's own start-up lines; times and names are made up."""

from __future__ import annotations

import copy
from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Report
from gpuchain.kube import POD
from gpuchain.kube.objects import name_of
from gpuchain.sim.build import SimCluster

SCENARIO = "name: t\nstack: eks\nnodes:\n  - {name: g1, preset: l4-x2}\n"
#: The simulator starts every running container at 2026-06-05T18:00:00Z: the device plugin's start.
LOG = (
    'time=2026-06-05T17:59:41.245Z level=INFO msg="Attempting to initialize NVML library."\n'
    'time=2026-06-05T17:59:41.249Z level=ERROR msg="Cannot init NVML library; err: ERROR_LIBRARY_NOT_FOUND"\n'
    'time=2026-06-05T17:59:41.249Z level=INFO msg="DCGM successfully initialized!"\n'
    'time=2026-06-05T17:59:41.612Z level=INFO msg="Starting webserver"\n'
)


def _exporter(started: str) -> list[Any]:
    def at(sim: SimCluster) -> None:
        for p in sim.cluster.list(POD, namespace="gpu-monitoring"):
            statuses = copy.deepcopy(p["status"]["containerStatuses"])
            statuses[0]["state"] = {"running": {"startedAt": started}}
            sim.cluster.patch_status(
                POD, name=name_of(p), namespace="gpu-monitoring", status={"containerStatuses": statuses}
            )

    return [
        {
            "do": "add-daemonset",
            "namespace": "gpu-monitoring",
            "name": "dcgm-exporter",
            "labels": {"app.kubernetes.io/name": "dcgm-exporter"},
            "containers": ["exporter"],
            "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04",
            "nodes": ["g1"],
        },
        {
            "do": "pod",
            "daemonset": "dcgm-exporter",
            "namespace": "gpu-monitoring",
            "node": "g1",
            "containers": [{"name": "exporter", "ready": True, "state": {"running": True}}],
            "logs": {"exporter": LOG},
        },
        at,
    ]


def _errors(report: Report) -> list[Any]:
    return [f for f in report.findings if f.severity is Severity.ERROR]


def test_an_exporter_that_started_before_the_plugin_found_the_driver_is_restarted() -> None:
    (found,) = _errors(diagnosed(SCENARIO, *_exporter("2026-06-05T17:59:41Z")))
    assert (found.id, found.link, found.node) == ("exporter.nvml-missed", "exporter", "g1")
    assert found.action is not None and "delete pod dcgm-exporter-" in found.fix and "init container" in found.fix
    assert any(e.startswith("catalog: dcgm-exporter.nvml-init") for e in found.evidence)


def test_one_that_started_after_the_plugin_is_not_this_race() -> None:
    """Started after the driver was there and still without NVML: its runtime gives it none, which this is not."""
    assert not [
        f for f in _errors(diagnosed(SCENARIO, *_exporter("2026-06-05T18:05:00Z"))) if f.id == "exporter.nvml-missed"
    ]
