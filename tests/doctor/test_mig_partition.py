"""GKE's MIG partitioner: the partition-gpus init container of the driver installer DaemonSet lays out a node pool's
gpu-partition-size after the driver step (GoogleCloudPlatform/container-engine-accelerators
nvidia-driver-installer/cos/daemonset-nvidia-mig.yaml@992db812). When it fails the driver works and the GPUs carry no
MIG device: the MIG link, repaired by the partitioner image upstream pins now (older digests know fewer GPUs and
sizes), or a size the pool's GPU takes, then partition-gpus run again.

The log lines are the partitioner's own (partition_gpu/partition_gpu.go@992db812: glog's "Failed to create GPU
partitions: %v" wrapping "%s is not a valid partition size", "Failed to cleanup GPU partitions: %v"); the digests are
the ones that file pinned in its history; node names and counts are stand-ins.
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed
from sim.heldout9 import harness as ninth

from gpuchain.doctor import Severity
from gpuchain.doctor.links.mig_partition import CURRENT, REGISTRY, SIZES
from gpuchain.doctor.model import FixOp, Report
from gpuchain.sim.build import SimCluster

NODE = "gke-train-pool-5d1c-0abc"
#: The partitioner image the manifest pinned from 2022-04 (aeab99c0) to 2022-08, before H100's sizes.
OLD = f"{REGISTRY}@sha256:99afc7583991ac3fdb06c5aabb92f619abf19bad84761a57d34719f68c35e7ba"
START = "I0302 08:01:12.000001       1 partition_gpu.go:158] Using gpu config: {%s}\n"


def _gke(accelerator: str, size: str, preset: str = "h100-80gb-x8") -> str:
    labels = f"{{cloud.google.com/gke-accelerator: {accelerator}, cloud.google.com/gke-gpu-partition-size: '{size}'}}"
    return (
        "name: t\nstack: gke\nnodes:\n"
        f"  - {{name: {NODE}, preset: {preset}, osImage: Container-Optimized OS from Google, labels: {labels}}}\n"
    )


def _installer(image: str, partitioner: dict[str, Any], log: str, running: bool = False) -> list[Any]:
    """The installer DaemonSet with its two init containers, its pod on the node in ``partitioner``'s state."""
    init = [{"name": "nvidia-driver-installer", "image": "cos-nvidia-installer:fixed"}]
    init.append({"name": "partition-gpus", "image": image})
    edits: list[dict[str, Any]] = [
        {"do": "node", "node": NODE, "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
        {
            "do": "add-daemonset",
            "namespace": "kube-system",
            "name": "nvidia-driver-installer",
            "image": "registry.k8s.io/pause:3.9",
            "labels": {"k8s-app": "nvidia-driver-installer"},
            "containers": ["pause"],
            "nodes": [NODE],
        },
        {
            "do": "daemonset",
            "namespace": "kube-system",
            "name": "nvidia-driver-installer",
            "spec": {"template": {"spec": {"initContainers": init}}},
        },
        {
            "do": "pod",
            "daemonset": "nvidia-driver-installer",
            "namespace": "kube-system",
            "node": NODE,
            "phase": "Running" if running else "Pending",
            "init": [
                {"name": "nvidia-driver-installer", "state": {"terminated": "Completed", "exitCode": 0}},
                {"name": "partition-gpus", **partitioner},
            ],
            **({"containers": [{"name": "pause", "ready": True, "state": {"running": True}}]} if running else {}),
            "logs": {"partition-gpus": log},
        },
    ]
    return [lambda sim, e=e: ninth._apply(sim.cluster, e) for e in edits]


CRASHING = {
    "restarts": 6,
    "state": {"waiting": "CrashLoopBackOff", "message": "back-off 2m40s restarting failed container=partition-gpus"},
    "last": {"terminated": "Error", "exitCode": 1},
}


def _report(scenario: str, *edits: Any) -> Report:
    def run(sim: SimCluster) -> None:
        for edit in edits:
            edit(sim)

    return diagnosed(scenario, run)


def _roots(report: Report) -> list[Any]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR and f.node == NODE]


def test_an_older_partitioner_refusing_a_size_of_its_gpu_is_the_mig_link_with_the_image_upstream_pins_now() -> None:
    log = (
        START % "1g.20gb"
        + "E0302 08:01:13.100000       1 partition_gpu.go:211] Failed to create GPU partitions: "
        + ("1g.20gb is not a valid partition size\n")
    )
    report = _report(_gke("nvidia-h100-80gb", "1g.20gb"), *_installer(OLD, CRASHING, log))
    (root,) = _roots(report)
    assert (root.id, root.link) == ("mig.partition-failed", "mig")
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    assert f"{REGISTRY}@sha256:{CURRENT}" in root.fix and "delete pod nvidia-driver-installer-" in root.fix
    assert "catalog: gke-partition-gpus.invalid-size" in " ".join(root.evidence)
    chain = next(c for c in report.chains if c.node == NODE)
    assert chain.state("driver").value == "ok"
    assert not [f for f in report.findings if f.id == "log.unrecognised"]


def test_a_size_the_pools_gpu_does_not_take_is_the_pool_recreated_with_one_it_does() -> None:
    log = (
        START % "1g.10gb"
        + "E0302 08:01:13.100000       1 partition_gpu.go:211] Failed to create GPU partitions: "
        + ("1g.10gb is not a valid partition size\n")
    )
    report = _report(_gke("nvidia-tesla-a100", "1g.10gb", "a100-40gb-x8"), *_installer(OLD, CRASHING, log))
    (root,) = _roots(report)
    assert root.id == "mig.partition-failed" and root.action is None
    assert "gpu-partition-size=<" + "|".join(SIZES["nvidia-tesla-a100"]) + ">" in root.fix
    assert "patch ds" not in root.fix


def test_the_newest_partitioner_failing_gets_its_lines_repair_and_runs_again() -> None:
    log = START % "1g.20gb" + (
        "E0302 08:01:13.100000       1 partition_gpu.go:203] Failed to cleanup GPU partitions: failed to destroy gpu "
        "instance, nvidia-smi output: Unable to destroy GPU instance ID 1 from GPU 0: In use by another client\n"
    )
    report = _report(_gke("nvidia-h100-80gb", "1g.20gb"), *_installer(f"{REGISTRY}@sha256:{CURRENT}", CRASHING, log))
    (root,) = _roots(report)
    assert root.id == "mig.partition-failed"
    assert root.action is not None and root.action.op is FixOp.DELETE
    assert "kubectl drain" in root.fix and "patch ds" not in root.fix


def test_a_partitioner_line_the_catalog_does_not_know_stays_unrecognised() -> None:
    log = START % "1g.20gb" + "E0302 08:01:13.100000       1 partition_gpu.go:99] something the catalog never saw\n"
    report = _report(_gke("nvidia-h100-80gb", "1g.20gb"), *_installer(OLD, CRASHING, log))
    (root,) = _roots(report)
    assert root.id == "mig.partition-failed" and "exits in error" in root.cause
    assert [f.id for f in report.findings if f.id == "log.unrecognised"] == ["log.unrecognised"]


def test_an_installer_whose_driver_step_fails_stays_the_driver() -> None:
    def driver_step_fails(sim: SimCluster) -> None:
        ninth._apply(
            sim.cluster,
            {
                "do": "pod",
                "daemonset": "nvidia-driver-installer",
                "namespace": "kube-system",
                "node": NODE,
                "phase": "Pending",
                "init": [{"name": "nvidia-driver-installer", **CRASHING}, {"name": "partition-gpus"}],
            },
        )

    report = _report(_gke("nvidia-h100-80gb", "1g.20gb"), *_installer(OLD, CRASHING, ""), driver_step_fails)
    assert [f.link for f in _roots(report)] == ["driver"]
    assert not [f for f in report.findings if f.id == "mig.partition-failed"]


def test_a_partitioner_that_laid_the_pool_out_is_quiet() -> None:
    done = {"state": {"terminated": "Completed", "exitCode": 0}}
    log = START % "1g.20gb" + "I0302 08:01:20.000000       1 partition_gpu.go:190] Creating new GPU partitions\n"

    def served(sim: SimCluster) -> None:
        ninth._apply(
            sim.cluster,
            {"do": "node", "node": NODE, "capacity": {"nvidia.com/gpu": 32}, "allocatable": {"nvidia.com/gpu": 32}},
        )

    report = _report(_gke("nvidia-h100-80gb", "1g.20gb"), *_installer(OLD, done, log, running=True), served)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]
