"""Release facts added from the components' own release notes and source (doc-rel, issue 26): a cluster showing
the symptom on a release a fact covers gets that release's repair (the fixed release, or the documented workaround
of a known issue), and one on a release it does not cover gets none. Each log line is the component's own wording,
from the source the catalog entry it matches cites; labels are GPU feature discovery's as the quoted release writes
them (NVIDIA/gpu-feature-discovery internal/lm/resource.go@v0.8.2, NVIDIA/k8s-device-plugin
internal/lm/resource.go@v0.19.3 getArchFamily)."""

from __future__ import annotations

from typing import Any

import pytest
from doctor.small_cluster import crashing_pod, diagnosed
from doctor.test_doctor_changelog_releases import ADA, BLACKWELL, _labelled
from doctor.test_doctor_release_fixes import _image, _refused
from doctor.test_doctor_release_notes import _operator_release

from gpuchain.doctor.model import Finding
from gpuchain.doctor.releases import showing
from gpuchain.kube.objects import name_of
from gpuchain.operator.migrate import NVIDIA_CLUSTER_POLICY
from gpuchain.sim.build import SimCluster

STANDALONE_GFD = "nvcr.io/nvidia/gpu-feature-discovery:v0.8.2-ubi8"
#: A Rubin GPU (compute capability 13.0) as GFD before v0.20.0 labels it.
RUBIN = {
    "nvidia.com/gpu.compute.major": "13",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.family": "undefined",
}
#: kmod's words when the driver pod's peermem sidecar finds no module (tools/modprobe.c@v30 "Module %s not found in
#: directory %s"), after the driver pod's fast path (the GPU Operator's release notes v26.3.0, Known Issues).
PEERMEM = "modprobe: FATAL: Module nvidia-peermem not found in directory /lib/modules/6.8.0-1059-azure\n"
#: containerd's CDI cache on a device no spec defines (cncf-tags/container-device-interface pkg/cdi/cache.go@v1.0.1
#: "unresolvable CDI devices %s"), as the kubelet's Failed Event quotes it.
UNRESOLVABLE = (
    "failed to create containerd container: CDI device injection failed: unresolvable CDI devices "
    "runtime.nvidia.com/gpu=0"
)
OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n"
WORKLOAD = "name: t\nstack: gpu-operator\nnodes:\n  - {name: a}\nworkloads:\n  - {name: job, gpus: 1, node: a}\n"


def _cites(finding: Finding, fact: str) -> bool:
    return any(e.startswith(f"release: {fact} (") for e in finding.evidence)


@pytest.mark.parametrize(
    ("labels", "fixed", "fact"),
    [(ADA, "k8s-device-plugin:v0.17.1", "ada-family"), (BLACKWELL, "k8s-device-plugin:v0.18.0", "blackwell-family")],
)
def test_gfds_own_image_that_never_knew_the_family_is_answered_with_the_device_plugin_image_that_does(
    labels: dict[str, str], fixed: str, fact: str
) -> None:
    """No release of GFD's own image labels Ada or Blackwell right: the fix is the documented move to the device
    plugin image's GFD, not a release of GFD's image."""
    (found,) = _labelled(labels, _image("gpu-feature-discovery", STANDALONE_GFD))
    assert _cites(found, f"gpu-feature-discovery.{fact}") and fixed in found.fix
    assert "/usr/bin/gpu-feature-discovery" in found.fix and found.action is None


def test_rubin_labels_of_a_plugin_image_before_v0_20_move_gfd_to_v0_20_and_not_after() -> None:
    (found,) = _labelled(RUBIN, _image("gpu-feature-discovery", "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"))
    assert found.action is not None and found.action.changes == {"spec": {"gfd": {"version": "v0.20.0"}}}
    assert _cites(found, "k8s-device-plugin.gfd-rubin-family")
    assert not _labelled(RUBIN, _image("gpu-feature-discovery", "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"))


def _peermem(version: str) -> Finding:
    report = diagnosed(
        OPERATOR,
        _operator_release(version),
        crashing_pod("nvidia-driver-daemonset", "nvidia-peermem-ctr", "n1", PEERMEM),
    )
    (root,) = [f for f in report.findings if f.root and f.link == "driver"]
    return root


def test_the_peermem_sidecar_after_the_fast_path_gets_the_notes_exact_workaround_from_v26_3() -> None:
    root = _peermem("v26.3.1")
    assert _cites(root, "gpu-operator.peermem-fast-path")
    assert '"path": "/spec/driver/manager/env/-"' in root.fix and "FORCE_REINSTALL" in root.fix
    assert not _cites(_peermem("v25.10.1"), "gpu-operator.peermem-fast-path")


@pytest.mark.parametrize(("tag", "cited"), [("v1.18.1-ubuntu20.04", True), ("v1.18.2-ubuntu20.04", False)])
def test_an_unresolvable_device_on_a_jit_cdi_release_that_hides_the_cause_names_the_release_that_shows_it(
    tag: str, cited: bool
) -> None:
    report = diagnosed(
        WORKLOAD,
        _image("nvidia-container-toolkit", f"nvcr.io/nvidia/k8s/container-toolkit:{tag}"),
        _refused(UNRESOLVABLE),
    )
    found = [f for f in report.findings if _cites(f, "container-toolkit.jit-cdi-error-hidden")]
    assert bool(found) is cited, [(f.id, f.fix) for f in report.findings]
    assert not found or "v1.18.2" in found[0].fix


@pytest.mark.parametrize(
    ("entry", "fact", "affected", "fixed"),
    [
        # The validator's host-driver check (NVIDIA/gpu-operator validator/main.go@v25.3.0 "no 'nvidia-smi' file
        # present on the host: %w"), resolved through the host's symlinks from v26.7.0.
        (
            "gpu-operator.validator-host-nvidia-smi-missing",
            "gpu-operator.validator-usr-bin-symlink",
            "v25.3.0",
            "v26.7.0",
        ),
        # controllers/object_controls.go@v25.3.4 "ERROR: failed to get destination directory for custom repo config".
        ("gpu-operator.repo-config-unsupported-os", "gpu-operator.repo-config-operator-node-os", "v25.10.1", "v26.3.0"),
    ],
)
def test_an_operator_message_names_the_operator_release_fact_for_the_releases_it_covers(
    entry: str, fact: str, affected: str, fixed: str
) -> None:
    (found,) = [d for d in showing("log", entry) if d.id == fact]
    assert found.by == "operator" and found.covers(affected) and not found.covers(fixed) and found.fixed_in == fixed


def _policy(changes: dict[str, object]) -> Any:
    """An edit: the ClusterPolicy's spec merged with ``changes``."""

    def edit(sim: SimCluster) -> None:
        for policy in sim.cluster.list(NVIDIA_CLUSTER_POLICY):
            sim.cluster.patch(NVIDIA_CLUSTER_POLICY, name=name_of(policy), patch={"spec": changes})

    return edit


#: The driver container's words when nvidia-peermem does not load (gpu-driver-container, as the catalog entry
#: driver-container.peermem-load-failed cites).
PEERMEM_RACE = "waiting for mellanox ofed and nvidia drivers to be installed\nfailed to load nvidia-peermem module\n"
RDMA_AND_GDS = {"driver": {"rdma": {"enabled": True}}, "gds": {"enabled": True}}


@pytest.mark.parametrize(
    ("version", "changes", "cited"),
    [
        ("v22.9.2", RDMA_AND_GDS, True),
        ("v23.3.0", RDMA_AND_GDS, False),
        ("v22.9.2", {"driver": {"rdma": {"enabled": True}}}, False),
    ],
)
def test_the_peermem_race_with_rdma_and_gds_names_the_operator_release_that_waits_for_the_driver(
    version: str, changes: dict[str, object], cited: bool
) -> None:
    """The GPU Operator's release notes v23.3.0: the race shows with GPUDirect RDMA and Storage both on only."""
    report = diagnosed(
        OPERATOR,
        _operator_release(version),
        _policy(changes),
        crashing_pod("nvidia-driver-daemonset", "nvidia-peermem-ctr", "n1", PEERMEM_RACE),
    )
    found = [f for f in report.findings if _cites(f, "gpu-operator.peermem-gds-race")]
    assert bool(found) is cited, [(f.id, f.evidence) for f in report.findings]
    assert not found or "--version v23.3.0" in found[0].fix


#: go-dcgm pkg/dcgm/admin.go "Error connecting to nv-hostengine: %s", as dcgm-exporter logs its fatal error.
HOSTENGINE = (
    'time="2021-09-01T10:00:00Z" level=fatal msg="Error connecting to nv-hostengine: Host engine connection '
    'invalid/disconnected"\n'
)


@pytest.mark.parametrize(("version", "cited"), [("1.8.2", True), ("1.9.0", False)])
def test_an_exporter_that_cannot_reach_the_operators_dcgm_on_1_8_names_1_9(version: str, cited: bool) -> None:
    report = diagnosed(
        OPERATOR,
        _operator_release(version),
        crashing_pod("nvidia-dcgm-exporter", "nvidia-dcgm-exporter", "n1", HOSTENGINE),
    )
    found = [f for f in report.findings if _cites(f, "gpu-operator.exporter-dcgm-port")]
    assert bool(found) is cited, [(f.id, f.evidence) for f in report.findings]


def test_the_operator_release_facts_of_one_message_follow_each_other_without_overlap() -> None:
    """dcgm-exporter's lost host engine: v1.8.x is fixed in v1.9.0 and v1.9.0 in v1.9.1 (the GPU Operator's release
    notes 1.9.0 and 1.9.1); the removed host driver taken for a pre-installed one is fixed in v23.3.0."""
    shown = {d.id: d for d in showing("log", "dcgm.hostengine-connect-failed") if d.by == "operator"}
    assert [i for i, d in shown.items() if d.covers("1.8.2")] == ["gpu-operator.exporter-dcgm-port"]
    assert [i for i, d in shown.items() if d.covers("v1.9.0")] == ["gpu-operator.exporter-standalone-dcgm"]
    assert not [i for i, d in shown.items() if d.covers("v1.9.1")]
    (stale,) = [d for d in showing("log", "k8s-driver-manager.host-driver") if d.by == "operator"]
    assert stale.covers("v22.9.2") and not stale.covers("v23.3.0")
