"""A component whose own image ended (releases.MOVED): GPU feature discovery's image's last release is v0.8.2, and
its later releases ship in the device plugin's image (NVIDIA/k8s-device-plugin CHANGELOG.md@v0.15.0-rc.1: "the same
version and container image is used for both components"). A GFD on that last image is moved to the device plugin's
image at its newest release, run as gpu-feature-discovery, not told to read its log or to move to the release it
already runs."""

from __future__ import annotations

import json
from typing import Any

from doctor.small_cluster import crash_looping, diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, Report
from gpuchain.doctor.releases import MOVED, NEWEST, moved_image
from gpuchain.kube import POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim.build import SimCluster

NODE = "gpu-worker-3"
PLUGIN = f"name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: {NODE}}}\n"
OPERATOR = f"name: t\nstack: gpu-operator\nnodes:\n  - {{name: {NODE}}}\n"
LAST = "nvcr.io/nvidia/gpu-feature-discovery:v0.8.2"
MOVED_TO = f"nvcr.io/nvidia/k8s-device-plugin:{NEWEST['k8s-device-plugin']}"


def _root(report: Report) -> Finding:
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    return root


def _gfd(image: str, log: str | None, **labels: str) -> list[dict[str, Any]]:
    """Edits: a GFD DaemonSet of its own in namespace monitoring running ``image``, its pod on NODE crash-looping,
    with ``log`` as its log (None: no line was collected)."""
    pod: dict[str, Any] = {
        "do": "pod",
        "daemonset": "gpu-feature-discovery",
        "namespace": "monitoring",
        "node": NODE,
        "containers": [crash_looping("gpu-feature-discovery")],
    }
    if log is not None:
        pod["logs"] = {"gpu-feature-discovery": log}
    daemonset = {
        "do": "add-daemonset",
        "namespace": "monitoring",
        "name": "gpu-feature-discovery",
        "labels": {"app.kubernetes.io/name": "gpu-feature-discovery", **labels},
        "containers": ["gpu-feature-discovery"],
        "image": image,
        "nodes": [NODE],
    }
    return [daemonset, pod]


def test_only_the_last_release_of_an_ended_image_moves_to_the_other_image() -> None:
    assert moved_image(LAST) == (MOVED_TO, MOVED["gpu-feature-discovery"])
    assert moved_image("gpu-feature-discovery:v0.8.2-ubi8") == (
        f"k8s-device-plugin:{NEWEST['k8s-device-plugin']}",
        MOVED["gpu-feature-discovery"],
    )
    assert moved_image("nvcr.io/nvidia/gpu-feature-discovery:v0.8.0") is None  # v0.8.2 is the nearer move
    assert moved_image(f"nvcr.io/nvidia/k8s-device-plugin:{NEWEST['k8s-device-plugin']}") is None
    assert moved_image("nvcr.io/nvidia/gpu-feature-discovery:latest") is None


def test_a_silent_gfd_on_the_last_standalone_image_is_moved_to_the_device_plugin_image() -> None:
    root = _root(diagnosed(PLUGIN, *_gfd(LAST, None)))
    assert root.link == "gfd"
    command = [
        {"op": "add", "path": "/spec/template/spec/containers/0/command", "value": ["/usr/bin/gpu-feature-discovery"]}
    ]
    assert root.fix.startswith(
        f"kubectl -n monitoring set image ds/gpu-feature-discovery gpu-feature-discovery={MOVED_TO} && "
        f"kubectl -n monitoring patch ds/gpu-feature-discovery --type=json -p '{json.dumps(command)}'"
    ), root.fix
    # The log that holds its reason is still named, after the move.
    assert "--previous" in root.fix and root.fix.index("--previous") > root.fix.index(MOVED_TO)


def test_a_silent_crash_on_an_older_standalone_image_is_upgraded_to_its_nearer_release_then_its_log_read() -> None:
    """A crash-looping GFD that left no line, on a release older than its image's last: the upgrade to that last
    release is the action (its maintainers' fixes), the image its later releases ship in is named beside it, and
    the log to read comes after, for when the error stays."""
    root = _root(diagnosed(PLUGIN, *_gfd("nvcr.io/nvidia/gpu-feature-discovery:v0.8.0", None)))
    action = root.fix.partition("#")[0]
    assert root.link == "gfd" and "k8s-device-plugin" not in action, root.fix
    assert action.strip() == f"kubectl -n monitoring set image ds/gpu-feature-discovery gpu-feature-discovery={LAST}"
    assert "upgrade gpu-feature-discovery v0.8.0 -> v0.8.2" in root.fix
    assert f"ship in k8s-device-plugin since v0.15.0, newest {NEWEST['k8s-device-plugin']}" in root.fix
    assert root.fix.index("--previous") > root.fix.index("if the error stays")


def test_a_silent_gfd_that_runs_but_is_not_ready_is_not_moved() -> None:
    """Only a crash earns the upgrade: a pod not failing (held in its readiness) keeps the read of its log."""
    edits = _gfd("nvcr.io/nvidia/gpu-feature-discovery:v0.8.0", None)
    edits[1]["containers"] = [{"name": "gpu-feature-discovery", "ready": False, "state": {"running": {}}}]
    root = _root(diagnosed(PLUGIN, *edits))
    assert root.link == "gfd" and "set image" not in root.fix, root.fix


def test_an_unknown_line_of_the_last_standalone_image_gets_the_move_not_the_release_it_runs() -> None:
    line = "E0101 12:00:00.000000       1 main.go:9] frobnicator exploded"
    root = _root(diagnosed(PLUGIN, *_gfd(LAST, f"starting\n{line}")))
    assert root.fix.startswith(
        f"kubectl -n monitoring set image ds/gpu-feature-discovery gpu-feature-discovery={MOVED_TO}"
    )
    assert "frobnicator exploded" in root.fix and "gpu-feature-discovery:v0.8.2 " not in root.fix


def test_a_gfd_rendered_by_the_plugin_chart_is_moved_by_the_chart_release() -> None:
    chart = {"helm.sh/chart": "nvidia-device-plugin-0.14.5", "app.kubernetes.io/instance": "nvdp"}
    root = _root(diagnosed(PLUGIN, *_gfd(LAST, None, **chart)))
    version = NEWEST["k8s-device-plugin"].lstrip("v")
    assert root.fix.startswith("helm upgrade nvdp "), root.fix
    assert f"--version {version} --set gfd.enabled=true --reuse-values" in root.fix


def test_the_operators_gfd_on_the_last_standalone_image_is_moved_by_its_policy() -> None:
    def last(sim: SimCluster) -> None:
        for pod in [p for p in sim.cluster.list(POD) if name_of(p).startswith("gpu-feature-discovery")]:
            spec = dict(pod["spec"])
            spec["containers"] = [{**c, "image": LAST} for c in spec["containers"]]
            sim.cluster.patch(POD, name=name_of(pod), patch={"spec": spec}, namespace=namespace_of(pod))

    crash = {
        "do": "pod",
        "daemonset": "gpu-feature-discovery",
        "node": NODE,
        "containers": [crash_looping("gpu-feature-discovery")],
    }
    root = _root(diagnosed(OPERATOR, last, crash))
    assert root.link == "gfd", root
    assert '"image": "k8s-device-plugin"' in root.fix or '"image":"k8s-device-plugin"' in root.fix, root.fix
    assert NEWEST["k8s-device-plugin"] in root.fix


#: runc's refusal of a command the image lacks, as the kubelet keeps it for a StartError (the EXEC_MISSING form).
NO_GFD = (
    "failed to create containerd task: OCI runtime create failed: container_linux.go:380: starting container "
    'process caused: exec: "gpu-feature-discovery": executable file not found in $PATH: unknown'
)


def _no_binary(image: str) -> list[dict[str, Any]]:
    """A GFD DaemonSet running ``image`` whose container the runtime refused: the image has no gpu-feature-discovery."""
    edits = _gfd(image, None)
    edits[1]["containers"] = [
        {
            "name": "gpu-feature-discovery",
            "restarts": 3,
            "state": {"waiting": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"},
            "last": {"terminated": "StartError", "exitCode": 128, "message": NO_GFD},
        }
    ]
    return edits


def test_a_plugin_image_from_before_gfd_moved_in_is_upgraded_to_one_that_carries_it() -> None:
    """The device plugin's image carries gpu-feature-discovery only since v0.15.0: a GFD container started from an
    older plugin image is moved to that image's newest release, not told to find the spec's release."""
    root = _root(diagnosed(PLUGIN, *_no_binary("nvcr.io/nvidia/k8s-device-plugin:v0.14.5")))
    assert root.link == "gfd"
    assert root.fix.startswith(
        f"kubectl -n monitoring set image ds/gpu-feature-discovery gpu-feature-discovery={MOVED_TO}"
    )
    assert "upgrade k8s-device-plugin v0.14.5" in root.fix and "since v0.15.0" in root.fix


def test_a_plugin_image_that_carries_gfd_and_still_lacks_the_command_is_not_upgraded() -> None:
    root = _root(diagnosed(PLUGIN, *_no_binary("nvcr.io/nvidia/k8s-device-plugin:v0.17.0")))
    assert root.link == "gfd" and "set image" not in root.fix and "spec was written for" in root.fix, root.fix
