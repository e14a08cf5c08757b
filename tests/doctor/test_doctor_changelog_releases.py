"""Release facts read from the components' changelogs (releases.yaml, issue 26): a plugin whose log shows a defect
its running release has gets the release that fixed it as the fix, set where its image comes from; the same line
from a release the fact does not cover cites no release."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
from doctor.small_cluster import crash_looping, diagnosed, no_gpus, plugin_pod

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, Report
from gpuchain.kube import POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim.build import SimCluster

NODE = "gpu-worker-3"
PLUGIN = f"name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: {NODE}, hostDriver: 550.54.15}}\n"
REPO = "nvcr.io/nvidia/k8s-device-plugin"
SET = "kubectl -n kube-system set image ds/nvidia-device-plugin-daemonset nvidia-device-plugin-ctr="
#: The plugin's last words where NVML reports no memory for a GPU (internal/rm/devices.go@v0.17.3 "error getting
#: device memory: %w" under rm.go's "failed to construct NVML resource managers: %v").
MEMORY = (
    "E0806 09:14:02.118431       1 main.go:173] failed to construct NVML resource managers: error getting device "
    "memory: Not Supported"
)


def _plugin_image(image: str) -> Callable[[SimCluster], None]:
    """An edit: the standalone plugin's pods run ``image``."""

    def edit(sim: SimCluster) -> None:
        for pod in sim.cluster.list(POD):
            if name_of(pod).startswith("nvidia-device-plugin"):
                spec = copy.deepcopy(pod["spec"])
                spec["containers"][0]["image"] = image
                sim.cluster.patch(POD, name=name_of(pod), patch={"spec": spec}, namespace=namespace_of(pod))

    return edit


def _root(tag: str, log: str) -> Finding:
    """The root error of a plugin at ``tag`` that crash-loops with ``log``."""
    report: Report = diagnosed(
        PLUGIN,
        no_gpus(NODE),
        plugin_pod(NODE, crash_looping("nvidia-device-plugin-ctr", restarts=6), f"starting\n{log}"),
        _plugin_image(f"{REPO}:{tag}"),
    )
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    return root


@pytest.mark.parametrize("tag", ["v0.15.0", "v0.17.0", "v0.17.3-ubi9"])
def test_an_affected_release_is_moved_to_the_release_that_fixed_it(tag: str) -> None:
    root = _root(tag, MEMORY)
    assert (root.link, root.node) == ("device-plugin", NODE)
    suffix = tag.partition("-")[2]
    assert root.fix.startswith(f"{SET}{REPO}:v0.18.0{'-' + suffix if suffix else ''} "), root.fix
    fact = "release: k8s-device-plugin.device-memory (NVIDIA/k8s-device-plugin CHANGELOG.md@v0.18.0)"
    assert fact in root.evidence


@pytest.mark.parametrize("tag", ["v0.18.0", "v0.14.5"])
def test_a_release_the_fact_does_not_cover_cites_no_release(tag: str) -> None:
    """The same line from a release outside the affected range: the catalog's repair, no release fact, and no
    move to the release that fixed what this one never had."""
    root = _root(tag, MEMORY)
    assert root.link == "device-plugin"
    assert not any(e.startswith("release: ") for e in root.evidence), root.evidence
    assert f"{REPO}:v0.18.0" not in root.fix, root.fix
