"""Operand releases with a known defect (releases.yaml, issue 26): where the cluster shows a release's symptom,
the finding cites the release note and names the release that fixed it."""

from __future__ import annotations

import pytest
from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity, catalog
from gpuchain.doctor.releases import defect, defects, fixed_image, showing, version_of
from gpuchain.kube import POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim.build import SimCluster

NODE = "gpu-worker-3"
SCENARIO = f"name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: {NODE}}}\n"


def _plugin_at(tag: str, restarts: int, exit_code: int) -> object:
    """An edit: the standalone plugin's pod runs image ``tag``, ready, after ``restarts`` restarts whose last run
    ended with ``exit_code`` (as the kubelet shows a container it restarted: lastState.terminated)."""

    def edit(sim: SimCluster) -> None:
        pod = next(p for p in sim.cluster.list(POD) if name_of(p).startswith("nvidia-device-plugin"))
        ns = namespace_of(pod)
        spec = pod["spec"]
        spec["containers"][0]["image"] = f"nvcr.io/nvidia/k8s-device-plugin:{tag}"
        sim.cluster.patch(POD, name=name_of(pod), patch={"spec": spec}, namespace=ns)
        status = sim.cluster.get(POD, name=name_of(pod), namespace=ns)["status"]
        status["containerStatuses"][0].update(
            restartCount=restarts,
            lastState={"terminated": {"reason": "Error", "exitCode": exit_code}},
        )
        sim.cluster.patch_status(POD, name=name_of(pod), status=status, namespace=ns)

    return edit


def test_a_ready_plugin_that_keeps_restarting_on_a_release_with_that_defect_is_moved_to_the_fixed_release() -> None:
    """NVIDIA/k8s-device-plugin CHANGELOG.md@v0.7.3: "Update vendoring to include bug fix for
    `nvmlEventSetWait_v2`"; a v0.7.1 plugin restarting after runs that ended in error."""
    report = diagnosed(SCENARIO, _plugin_at("v0.7.1", 9, 2))
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.id, root.link, root.node) == ("device-plugin.known-defect", "device-plugin", NODE)
    assert "k8s-device-plugin:v0.7.3" in root.fix and "set image" in root.fix
    assert "release: k8s-device-plugin.nvml-event-wait (NVIDIA/k8s-device-plugin CHANGELOG.md@v0.7.3)" in root.evidence


@pytest.mark.parametrize(("tag", "restarts", "exit_code"), [("v0.7.3", 9, 2), ("v0.7.1", 0, 2), ("v0.7.1", 3, 0)])
def test_the_fixed_release_a_plugin_that_never_restarted_and_clean_exits_are_no_known_defect(
    tag: str, restarts: int, exit_code: int
) -> None:
    report = diagnosed(SCENARIO, _plugin_at(tag, restarts, exit_code))
    assert "device-plugin.known-defect" not in report.ids


def test_every_entry_covers_its_first_release_and_not_the_one_that_fixed_it() -> None:
    for entry in defects():
        assert entry.covers(entry.affected[0]) and not entry.covers(entry.fixed_in), entry.id
        assert entry.cause.endswith(".") and entry.line and "@" in entry.source
        if entry.symptom == "log":
            # Shown by catalog messages that exist, and found by each of them.
            assert entry.entries and all(entry in showing("log", e) and catalog.entry(e) for e in entry.entries)
        elif entry.symptom == "labels":
            # Shown by the label state it names, and by no node whose labels differ in one of them.
            labels = {key: value for key, value in entry.labels}
            assert entry in showing("labels") and entry.labels and not entry.shows({})
            assert all(not entry.shows({**labels, key: "x-other"}) for key in labels), entry.id
        else:
            assert defect(entry.component, entry.affected[0], entry.symptom) == entry
    assert version_of("v0.17.0-ubi9") == (0, 17, 0) and version_of("latest") is None
    # dcgm-exporter's tags carry the DCGM release first, then the exporter's own.
    assert (
        version_of("2.4.6-2.6.8-ubuntu20.04") == (2, 4, 6, 2, 6, 8) < version_of("2.4.6-2.6.10") == (2, 4, 6, 2, 6, 10)
    )


def _chart_release(version: str) -> list[dict[str, object]]:
    """Edits: the standalone plugin as Helm release nvdp of chart nvidia-device-plugin ``version`` renders it
    (its DaemonSet's labels, NVIDIA/k8s-device-plugin deployments/helm/nvidia-device-plugin/templates/_helpers.tpl),
    with the chart's NFD worker and no GFD DaemonSet."""
    labels = {
        "app.kubernetes.io/name": "nvidia-device-plugin",
        "app.kubernetes.io/instance": "nvdp",
        "helm.sh/chart": f"nvidia-device-plugin-{version}",
        "app.kubernetes.io/version": version,
    }
    return [
        {
            "do": "add-daemonset",
            "namespace": "nvidia-device-plugin",
            "name": "nvdp-nvidia-device-plugin",
            "labels": labels,
            "containers": ["nvidia-device-plugin-ctr"],
            "image": f"nvcr.io/nvidia/k8s-device-plugin:v{version}",
            "nodes": [NODE],
        },
        {
            "do": "add-daemonset",
            "namespace": "nvidia-device-plugin",
            "name": "nvdp-node-feature-discovery-worker",
            "labels": {"app.kubernetes.io/name": "node-feature-discovery", "app.kubernetes.io/instance": "nvdp"},
            "containers": ["worker"],
            "image": "k8s.gcr.io/nfd/node-feature-discovery:v0.11.0",
            "nodes": [NODE],
        },
        {"do": "delete-daemonset", "namespace": "kube-system", "name": "nvidia-device-plugin-daemonset"},
    ]


def test_a_chart_release_that_renders_no_gfd_is_upgraded_to_the_chart_that_does() -> None:
    """NVIDIA/k8s-device-plugin#308: chart 0.12.0 with gfd.enabled=true runs NFD but no GFD (its subchart's version
    was bumped to the one the parent names in 0.12.1)."""
    report = diagnosed(SCENARIO, *_chart_release("0.12.0"))
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.id, root.link, root.node) == ("gfd.known-defect", "gfd", NODE)
    assert root.fix.startswith("helm upgrade nvdp nvdp/nvidia-device-plugin -n nvidia-device-plugin --version 0.12.1")
    # The fixed chart, or a release that runs no NFD of its own (GFD not asked for), says nothing.
    assert "gfd.known-defect" not in diagnosed(SCENARIO, *_chart_release("0.12.1")).ids
    without_nfd = [e for e in _chart_release("0.12.0") if e.get("name") != "nvdp-node-feature-discovery-worker"]
    assert "gfd.known-defect" not in diagnosed(SCENARIO, *without_nfd).ids


def test_the_fixed_image_keeps_the_repository_and_the_tags_suffix() -> None:
    """The image a fix sets is the running one at the fixed release, its OS suffix kept (the tag must exist)."""
    (exporter,) = showing("log", "dcgm.api-version-mismatch")
    assert fixed_image("nvcr.io/nvidia/k8s/dcgm-exporter:2.4.6-2.6.8-ubuntu20.04", exporter) == (
        "nvcr.io/nvidia/k8s/dcgm-exporter:2.4.6-2.6.9-ubuntu20.04"
    )
    (toolkit,) = showing("log", "libnvidia-container.unknown-device")
    assert fixed_image("nvcr.io/nvidia/k8s/container-toolkit:v1.14.0-ubuntu20.04", toolkit).endswith(
        "container-toolkit:v1.14.1-ubuntu20.04"
    )
