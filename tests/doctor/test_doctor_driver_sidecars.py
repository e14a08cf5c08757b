"""The GPU Operator driver pod's sidecars (nvidia-fs for GPUDirect Storage, GDRCopy, nvidia-peermem): one that exits
at every start while the driver container runs is repaired in its own ClusterPolicy key (spec.gds, spec.gdrcopy,
spec.driver.rdma), and a versioned sidecar running a version other than the one the cluster's GPU Operator release
ships is moved to that release's.

Sources: the container names and the keys that render them, NVIDIA/gpu-operator assets/state-driver/0500_daemonset.yaml
and controllers/object_controls.go@a22dbf6 (transformGDSContainer, transformGDRCopyContainer,
transformPeerMemoryContainer; resolveDriverTag appends the node's OS tag to the version); the version each release
ships, deployments/gpu-operator/values.yaml at each tag (gds.version 2.26.6 at v25.10.0-v25.10.1, 2.27.3 at
v26.3.0-v26.3.3, 2.29.4 at v26.7.0; gdrcopy.version v2.5.1 at v26.3.0, v2.5.2 at v26.3.1). The crash-looping sidecar
is modelled on the kubelet's CrashLoopBackOff status (no log line); node names and the other versions are stand-ins.
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import crash_looping, diagnosed
from doctor.test_doctor_release_notes import _operator_release

from gpuchain.doctor import Severity
from gpuchain.doctor.links.driver_sidecars import later_than, shipped_by, shipped_in
from gpuchain.doctor.model import Finding, Report
from gpuchain.kube import POD
from gpuchain.sim.build import SimCluster

SCENARIO = (
    "name: t\nstack: gpu-operator\npolicy: {{driver: {{version: {driver}}}}}\nnodes:\n"
    "  - {{name: {node}, preset: h100-80gb-x8, osImage: Ubuntu 22.04.5 LTS, kernel: 5.15.0-122-generic}}\n"
)


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def _sidecar(node: str, name: str, image: str, *, running: bool = False) -> list[Any]:
    """Edits: the driver pod on ``node`` with its driver container running and its sidecar ``name`` (image ``image``)
    crash-looping, or running and ready."""
    state = {"name": name, "ready": True, "state": {"running": True}} if running else crash_looping(name, 17)
    pod = {
        "do": "pod",
        "daemonset": "nvidia-driver-daemonset",
        "node": node,
        "phase": "Running",
        "containers": [{"name": "nvidia-driver-ctr", "ready": True, "state": {"running": True}}, state],
    }

    def spec(sim: SimCluster) -> None:
        for p in sim.cluster.list(POD):
            if p["metadata"]["name"].startswith("nvidia-driver-daemonset") and p["spec"].get("nodeName") == node:
                # The held-out pod edit names the spec's containers after its statuses: put both back as the
                # operator renders them, the driver container keeping its image.
                driver = {"name": "nvidia-driver-ctr", "image": p["spec"]["containers"][0]["image"]}
                containers = [driver, {"name": name, "image": image}]
                ns = p["metadata"]["namespace"]
                sim.cluster.patch(
                    POD, name=p["metadata"]["name"], patch={"spec": {"containers": containers}}, namespace=ns
                )

    return [pod, spec]


def test_the_release_data_is_read_from_the_charts_values_at_each_tag() -> None:
    assert shipped_in("v26.3.1", "gds") == "2.27.3" and shipped_in("v26.3.1", "gdrcopy") == "v2.5.2"
    assert shipped_by("gds", "2.26.6") == "v25.10.0 to v25.10.1"
    assert later_than("gds", "2.26.6") == [("v26.3.0 to v26.3.3", "2.27.3"), ("v26.7.0", "2.29.4")]
    assert shipped_in("v1.9.0", "gds") == ""


def test_a_gds_sidecar_of_an_older_release_under_a_known_operator_release_is_set_to_that_releases_version() -> None:
    """A different release pair than the held-out one: nvidia-fs 2.20.5 (v24.9-v25.3) under the v25.10.1 chart."""
    image = "nvcr.io/nvidia/cloud-native/nvidia-fs:2.20.5-ubuntu22.04"
    report = diagnosed(
        SCENARIO.format(driver="570.172.08", node="gds-7"),
        _operator_release("v25.10.1"),
        *_sidecar("gds-7", "nvidia-fs-ctr", image),
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("driver", "gds-7")
    assert root.action is not None and root.action.changes["spec"] == {"gds": {"version": "2.26.6"}}
    assert "GPU Operator v25.10.1 ships 2.26.6" in root.cause and "v24.9.0 to v25.3.4" in root.cause
    assert "remove the gds.version override" in root.fix and "nvidia-fs-ctr --previous" in root.fix


def test_a_gdrcopy_sidecar_under_an_unknown_operator_release_names_its_key_and_the_later_releases_versions() -> None:
    """The simulated validator pod runs gpu-operator-validator:v24.9.0, but no Helm label or operator pod shows the
    install's release: the validator's version is a key of the same ClusterPolicy, so it names no release to move
    the sidecar to (no patch to v24.9.0's v2.4.1-2)."""
    image = "nvcr.io/nvidia/cloud-native/gdrdrv:v2.4.4-ubuntu22.04"
    (root,) = _roots(
        diagnosed(SCENARIO.format(driver="570.124.06", node="g2"), *_sidecar("g2", "nvidia-gdrcopy-ctr", image))
    )
    assert root.link == "driver" and root.action is None
    assert "spec.gdrcopy.version" in root.fix and "v2.5.2" in root.fix and "v26.7.0: v2.6" in root.fix
    assert "spec.driver" not in root.fix.replace("spec.driver.", "")


def test_a_peermem_sidecar_names_the_rdma_key_not_a_version() -> None:
    image = "nvcr.io/nvidia/driver:570.124.06-ubuntu22.04"
    (root,) = _roots(
        diagnosed(SCENARIO.format(driver="570.124.06", node="ib-1"), *_sidecar("ib-1", "nvidia-peermem-ctr", image))
    )
    assert "spec.driver.rdma" in root.fix and "useHostMofed=true" in root.fix
    assert root.fix.startswith("kubectl -n gpu-operator logs ") and ".version" not in root.fix


def test_a_sidecar_at_the_releases_own_version_is_sent_to_its_log() -> None:
    image = "nvcr.io/nvidia/cloud-native/nvidia-fs:2.27.3-ubuntu22.04"
    report = diagnosed(
        SCENARIO.format(driver="580.126.20", node="gds-9"),
        _operator_release("v26.3.2"),
        *_sidecar("gds-9", "nvidia-fs-ctr", image),
    )
    (root,) = _roots(report)
    assert root.action is None and root.fix.startswith("kubectl -n gpu-operator logs ")
    assert "spec.gds of" in root.fix


def test_a_ready_sidecar_of_another_release_stays_quiet() -> None:
    image = "nvcr.io/nvidia/cloud-native/nvidia-fs:2.26.6-ubuntu22.04"
    report = diagnosed(
        SCENARIO.format(driver="580.126.20", node="gds-3"),
        _operator_release("v26.3.0"),
        *_sidecar("gds-3", "nvidia-fs-ctr", image, running=True),
    )
    assert not _roots(report)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_a_sidecar_line_gpuchain_does_not_know_is_answered_in_its_key_not_the_driver_build() -> None:
    """Before: the driver link's generic step ("correct the package repositories ... or switch to a precompiled
    driver", which carries no GDS at all) for a line of the nvidia-fs container. The line is a stand-in."""
    edits = _sidecar("gds-5", "nvidia-fs-ctr", "nvcr.io/nvidia/cloud-native/nvidia-fs:2.20.5-ubuntu22.04")
    edits[0]["logs"] = {"nvidia-fs-ctr": "Installing nvidia-fs\nERROR: could not build the nvidia-fs module\n"}
    report = diagnosed(SCENARIO.format(driver="580.126.20", node="gds-5"), _operator_release("v26.3.2"), *edits)
    (root,) = _roots(report)
    assert root.action is not None and root.action.changes["spec"] == {"gds": {"version": "2.27.3"}}
    assert "usePrecompiled" not in root.fix
    assert "unrecognised: ERROR: could not build the nvidia-fs module" in root.evidence


def test_a_sidecar_of_an_nvidiadriver_managed_pod_names_that_resources_key() -> None:
    """With spec.driver.useNvidiaDriverCRD the driver DaemonSets are the NVIDIADriver's (nvidia-gpu-driver-<name>),
    whose spec carries gds, gdrcopy and rdma itself (api/nvidia/v1alpha1/nvidiadriver_types.go@a22dbf6)."""
    edits = _sidecar("gds-6", "nvidia-fs-ctr", "nvcr.io/nvidia/cloud-native/nvidia-fs:2.20.5-ubuntu22.04")

    def owned(sim: SimCluster) -> None:
        for p in sim.cluster.list(POD):
            if p["metadata"]["name"].startswith("nvidia-driver-daemonset") and p["spec"].get("nodeName") == "gds-6":
                ref = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "nvidia-gpu-driver-ubuntu22.04-7c9f8"}
                meta = {"ownerReferences": [{**ref, "controller": True}]}
                sim.cluster.patch(POD, name=p["metadata"]["name"], patch={"metadata": meta}, namespace="gpu-operator")

    report = diagnosed(SCENARIO.format(driver="580.126.20", node="gds-6"), _operator_release("v26.3.2"), *edits, owned)
    (root,) = _roots(report)
    assert "the NVIDIADriver that renders DaemonSet nvidia-gpu-driver-ubuntu22.04-7c9f8" in root.fix
    assert root.action is None and "spec.gds.version" in root.fix and "2.27.3" in root.fix
