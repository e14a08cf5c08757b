"""A chain component's pod whose state alone shows the fault, with no log line to read (a dump taken without
logs, a log the API could not give): the doctor reads the pod's state (waiting reason, restarts, readiness,
the init container it is held in), names the link the component serves, found by its image or name, and
aims the fix at that pod: the log that holds the reason, and the object to repair.

NVIDIA's DRA driver is the device-plugin link's counterpart where GPUs are allocated through DRA: its chart
(NVIDIA/k8s-dra-driver-gpu deployments/helm/nvidia-dra-driver-gpu, templates/kubeletplugin.yaml and
values.yaml) runs DaemonSet ``<chart name>-kubelet-plugin`` with image ``nvcr.io/nvidia/k8s-dra-driver-gpu``,
containers ``gpus`` and ``compute-domains``, and an init container ``init-container`` that runs
``hack/kubelet-plugin-prestart.sh``: it loops every 10 s until ``nvidia-smi`` from the driver under
``NVIDIA_DRIVER_ROOT`` (the chart's ``nvidiaDriverRoot``, default ``/``) exits 0, and hints that a driver
managed by the GPU Operator wants ``--set nvidiaDriverRoot=/run/nvidia/driver``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from doctor.small_cluster import crash_looping, diagnosed, no_gpus, plugin_pod

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, Report
from gpuchain.sim.build import SimCluster

DRA_NS = "nvidia-dra-driver-gpu"
DRA_DS = "nvidia-dra-driver-gpu-kubelet-plugin"
DRA_IMAGE = "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0"
#: The operator with its device plugin off: GPUs go to pods through NVIDIA's DRA driver.
OPERATOR_DRA = "name: t\nstack: gpu-operator\npolicy: {devicePlugin: {enabled: false}}\nnodes:\n  - {name: n1}\n"
#: A host driver and no GPU stack but NVIDIA's DRA driver (its chart's default nvidiaDriverRoot=/).
HOST_DRA = "name: t\nstack: none\nnodes:\n  - {name: n1, hostDriver: 570.133.20}\n"

CRASH = {"state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"}},
         "lastState": {"terminated": {"reason": "Error", "exitCode": 1}}, "restartCount": 14, "ready": False}  # fmt: skip
WAITING_INIT = {"state": {"running": {"startedAt": "2026-12-01T10:00:00Z"}}, "restartCount": 0, "ready": False}
READY = {"state": {"running": {"startedAt": "2026-12-01T10:00:00Z"}}, "restartCount": 0, "ready": True}
DONE = {"state": {"terminated": {"reason": "Completed", "exitCode": 0}}, "restartCount": 0, "ready": False}
CREATING = {"state": {"waiting": {"reason": "PodInitializing"}}, "restartCount": 0, "ready": False}


def dra_release(
    node: str,
    init: dict[str, Any],
    gpus: dict[str, Any],
    driver_root: str = "/",
    release: str = "nvidia-dra-driver-gpu",
) -> Callable[[SimCluster], None]:
    """An edit: NVIDIA's DRA driver chart installed as ``release`` in its own namespace, its kubelet plugin's
    pod on ``node`` with its init container and ``gpus`` container in the given states (no log of either)."""
    env = [{"name": "NVIDIA_DRIVER_ROOT", "value": driver_root}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    spec = {
        "initContainers": [{"name": "init-container", "image": DRA_IMAGE, "env": env}],
        "containers": [{"name": "gpus", "image": DRA_IMAGE, "env": env}],
    }
    labels = {"app.kubernetes.io/instance": release, "app.kubernetes.io/name": "nvidia-dra-driver-gpu"}

    def edit(sim: SimCluster) -> None:
        sim.cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DRA_NS}})
        sim.cluster.create(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": DRA_DS, "namespace": DRA_NS, "labels": labels},
                "spec": {"template": {"spec": spec}},
            }
        )
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{DRA_DS}-7xk2p",
                    "namespace": DRA_NS,
                    "labels": labels,
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": DRA_DS}],
                },
                "spec": {"nodeName": node, **spec},
                "status": {
                    "phase": "Running" if init is DONE else "Pending",
                    "initContainerStatuses": [{"name": "init-container", **init}],
                    "containerStatuses": [{"name": "gpus", **gpus}],
                },
            }
        )

    return edit


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def published(node: str) -> Callable[[SimCluster], None]:
    """An edit: the ResourceSlice NVIDIA's kubelet plugin publishes for ``node``'s GPU (driver gpu.nvidia.com;
    k8s.io/api resource/v1 types.go@v0.34.4: spec.driver, spec.nodeName, spec.devices)."""

    def edit(sim: SimCluster) -> None:
        sim.cluster.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-gpu.nvidia.com-x7k2p"},
                "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "devices": [{"name": "gpu-0"}]},
            }
        )

    return edit


def test_a_ready_dra_kubelet_plugin_beside_the_operator_is_the_device_plugin_link_working() -> None:
    """Its GPUs are ResourceSlices, not node capacity: no capacity is not a plugin that failed to register."""
    report = diagnosed(
        OPERATOR_DRA, no_gpus("n1"), dra_release("n1", DONE, READY, "/run/nvidia/driver"), published("n1")
    )
    assert not _roots(report), [(f.id, f.cause) for f in _roots(report)]
    assert "device-plugin.not-registered" not in report.ids


def test_a_dra_driver_alone_on_host_drivers_is_a_stack_not_a_missing_one() -> None:
    report = diagnosed(HOST_DRA, no_gpus("n1"), dra_release("n1", DONE, READY), published("n1"))
    assert "stack.missing" not in report.ids
    assert not _roots(report), [(f.id, f.cause) for f in _roots(report)]


def test_a_ready_dra_kubelet_plugin_that_publishes_nothing_is_started_again_whatever_root_it_was_given() -> None:
    """The DRA chain followed to its end: ready, and no ResourceSlice for the node: its registration is lost (a new
    pod publishes). Ready proves its driver root right, even one other than where the doctor expects the driver:
    the plugin serves only once it found the driver's libraries there (k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/
    nvlib.go newDeviceLib@v25.12.0), so a driver-root change is never the repair of a ready plugin."""
    (root,) = _roots(diagnosed(HOST_DRA, no_gpus("n1"), dra_release("n1", DONE, READY)))
    assert (root.id, root.link) == ("device-plugin.dra-unpublished", "device-plugin")
    assert root.fix.startswith(f"kubectl -n {DRA_NS} delete pod {DRA_DS}-7xk2p")
    (root,) = _roots(diagnosed(OPERATOR_DRA, no_gpus("n1"), dra_release("n1", DONE, READY, "/")))
    assert root.id == "device-plugin.dra-unpublished"
    assert root.fix.startswith(f"kubectl -n {DRA_NS} delete pod {DRA_DS}-7xk2p") and "nvidiaDriverRoot" not in root.fix


def test_a_dra_kubelet_plugin_held_in_its_init_container_under_the_wrong_driver_root_gets_the_operators() -> None:
    """The operator's driver container runs on the node and puts the driver at /run/nvidia/driver; the chart was
    installed with nvidiaDriverRoot=/ (the prestart script's own hint), so its init container never finishes."""
    report = diagnosed(OPERATOR_DRA, no_gpus("n1"), dra_release("n1", WAITING_INIT, CREATING, "/"))
    (root,) = _roots(report)
    assert (root.link, root.node) == ("device-plugin", "n1")
    assert any("init-container" in e for e in root.evidence)
    assert "NVIDIA_DRIVER_ROOT=/" in " ".join(root.evidence)
    assert root.fix.startswith(
        f"helm upgrade nvidia-dra-driver-gpu nvidia/nvidia-dra-driver-gpu -n {DRA_NS} --reuse-values "
        "--set nvidiaDriverRoot=/run/nvidia/driver"
    )


def test_a_dra_kubelet_plugin_held_in_its_init_container_where_its_driver_root_is_right_is_the_driver() -> None:
    """On host drivers with nvidiaDriverRoot=/, the init container that never finishes says no working driver
    answers under / on that node: the driver link, repaired on the node."""
    report = diagnosed(HOST_DRA, no_gpus("n1"), dra_release("n1", WAITING_INIT, CREATING, "/"))
    (root,) = _roots(report)
    assert (root.link, root.node) == ("driver", "n1")
    assert any("init-container" in e for e in root.evidence)
    assert root.action is not None and root.action.outside_cluster
    assert "driver" in root.fix and f"kubectl -n {DRA_NS} delete pod {DRA_DS}-7xk2p" in root.fix


def test_a_crash_looping_dra_kubelet_plugin_with_no_log_gets_its_previous_log_and_its_release() -> None:
    report = diagnosed(HOST_DRA, no_gpus("n1"), dra_release("n1", DONE, CRASH))
    (root,) = _roots(report)
    assert (root.link, root.node) == ("device-plugin", "n1")
    assert "DRA kubelet plugin" in root.cause and "14 restarts" in " ".join(root.evidence)
    assert root.fix.startswith(f"kubectl -n {DRA_NS} logs {DRA_DS}-7xk2p -c gpus --previous")
    assert "Helm release nvidia-dra-driver-gpu" in root.fix


OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n  - {name: n2}\n"
STANDALONE = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, hostDriver: 550.54.15}\n"


@pytest.mark.parametrize(
    ("scenario", "daemonset", "container", "link", "owner"),
    [
        (OPERATOR, "nvidia-device-plugin-daemonset", "nvidia-device-plugin", "device-plugin", "spec.devicePlugin"),
        (STANDALONE, "nvidia-device-plugin-daemonset", "nvidia-device-plugin-ctr", "device-plugin", "DaemonSet"),
        (OPERATOR, "gpu-feature-discovery", "gpu-feature-discovery", "gfd", "spec.gfd"),
        (OPERATOR, "nvidia-dcgm-exporter", "nvidia-dcgm-exporter", "exporter", "spec.dcgmExporter"),
        (OPERATOR, "nvidia-container-toolkit-daemonset", "nvidia-container-toolkit-ctr", "toolkit", "spec.toolkit"),
    ],
)
def test_a_chain_component_crash_looping_with_no_log_gets_its_previous_log_and_the_object_behind_it(
    scenario: str, daemonset: str, container: str, link: str, owner: str
) -> None:
    crash = crash_looping(container, 14)
    # The foundation's fault takes the node's GPUs away; GFD's and the exporter's do not.
    gone = [no_gpus("n1")] if link in ("toolkit", "device-plugin") else []
    pod = {"do": "pod", "daemonset": daemonset, "node": "n1", "containers": [crash], "logs": {container: ""}}
    report = diagnosed(scenario, *gone, pod)
    root = next(f for f in _roots(report) if f.node == "n1")
    assert root.link == link
    assert f"logs {daemonset}-" in root.fix and f"-c {container} --previous" in root.fix
    assert owner in root.fix
    assert "left no log line" not in root.fix


def test_a_component_running_but_never_ready_with_no_log_gets_its_current_log_and_probe() -> None:
    running = {"name": "nvidia-device-plugin-ctr", "state": {"running": True}, "ready": False}
    report = diagnosed(STANDALONE, no_gpus("n1"), plugin_pod("n1", running, log=""))
    (root,) = _roots(report)
    assert root.link == "device-plugin"
    assert "readiness" in root.cause
    assert " logs nvidia-device-plugin-daemonset-" in root.fix and "--previous" not in root.fix


def test_a_dra_kubelet_plugin_held_beside_the_operators_running_plugin_is_not_hidden_by_it() -> None:
    """A link is broken on a node when any of its pods is: the other release's pod that never gets ready
    (held in its init container) is read, not the stack's own ready one beside it."""
    scenario = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n"
    report = diagnosed(scenario, dra_release("n1", WAITING_INIT, CREATING, "/"))
    (root,) = _roots(report)
    assert (root.link, root.node) == ("device-plugin", "n1")
    assert "--set nvidiaDriverRoot=/run/nvidia/driver" in root.fix


def test_a_validation_failing_with_no_log_gets_its_previous_log_and_the_object_of_the_link_it_proves() -> None:
    """NVIDIA's validator's driver-validation (gpu-operator assets/state-operator-validation) crash-looping with
    no line: its previous run's log, and the driver's own object, not the package advice of a line it never left."""
    crash = crash_looping("driver-validation", 7)
    crash["state"] = {"waiting": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"}
    report = diagnosed(
        OPERATOR,
        no_gpus("n1"),
        {
            "do": "pod",
            "daemonset": "nvidia-operator-validator",
            "node": "n1",
            "init": [crash],
            "logs": {"driver-validation": ""},
        },
    )
    root = next(f for f in _roots(report) if f.node == "n1")
    assert (root.id, root.link) == ("driver.validation-failed", "driver")
    assert root.fix.startswith("kubectl -n gpu-operator logs nvidia-operator-validator-")
    assert "-c driver-validation --previous" in root.fix and "spec.driver of" in root.fix
    assert "kernel packages" not in root.fix


@pytest.mark.parametrize(
    ("image", "container", "link"),
    [
        ("nvcr.io/nvidia/driver:550.127.08-ubuntu22.04", "nvidia-driver-ctr", "driver"),
        ("nvcr.io/nvidia/k8s/container-toolkit:v1.17.4-ubuntu20.04", "nvidia-container-toolkit-ctr", "toolkit"),
    ],
)
def test_a_chain_component_run_as_a_daemonset_of_its_own_is_read_by_its_image(
    image: str, container: str, link: str
) -> None:
    """NVIDIA's driver container or toolkit run by hand beside the standalone device plugin (their images, any
    DaemonSet name): its crash with no line is its own link, found by the image, with its pod's previous log."""
    crash = crash_looping(container, 9)
    report = diagnosed(
        STANDALONE,
        no_gpus("n1"),
        {
            "do": "add-daemonset",
            "namespace": "gpu-host",
            "name": "host-setup",
            "containers": [container],
            "image": image,
            "nodes": ["n1"],
        },
        {
            "do": "pod",
            "daemonset": "host-setup",
            "namespace": "gpu-host",
            "node": "n1",
            "containers": [crash],
            "logs": {container: ""},
        },
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == (link, "n1")
    assert root.fix.startswith("kubectl -n gpu-host logs host-setup-") and f"-c {container} --previous" in root.fix
    assert "DaemonSet gpu-host/host-setup" in root.fix


def test_a_silent_driver_installer_of_a_stack_with_its_own_install_keeps_that_way_out() -> None:
    """GKE's nvidia-driver-installer (GoogleCloudPlatform/container-engine-accelerators, its DaemonSet in
    kube-system with init container ``nvidia-driver-installer``) crash-looping with no line: the log to read,
    and GKE's own way to install a driver for when that log names nothing, not only the DaemonSet to repair."""
    report = diagnosed(
        "name: t\nstack: gke\nnodes:\n  - {name: n1}\n",
        no_gpus("n1"),
        {
            "do": "add-daemonset",
            "namespace": "kube-system",
            "name": "nvidia-driver-installer",
            "image": "cos-nvidia-installer:fixed",
            "labels": {"k8s-app": "nvidia-driver-installer"},
            "containers": ["pause"],
            "nodes": ["n1"],
        },
        {
            "do": "pod",
            "daemonset": "nvidia-driver-installer",
            "namespace": "kube-system",
            "node": "n1",
            "init": [crash_looping("nvidia-driver-installer", 9)],
            "logs": {"nvidia-driver-installer": ""},
        },
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("driver", "n1")
    assert "-c nvidia-driver-installer --previous" in root.fix
    assert "gpu-driver-version=default" in root.fix and "daemonset-preloaded" in root.fix
    # The stack's way out is an action: it comes first, the log that shows the reason after it.
    assert root.fix.startswith("# install the NVIDIA driver on the node")


def test_a_dra_kubelet_plugin_merely_starting_beside_the_operators_ready_plugin_does_not_hide_it() -> None:
    """Only another release's pod that fails or is held in an init container is read over the stack's
    ready one: a pod that is just starting (its container being created) says nothing is broken."""
    scenario = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n"
    starting = {"state": {"waiting": {"reason": "ContainerCreating"}}, "restartCount": 0, "ready": False}
    report = diagnosed(scenario, dra_release("n1", DONE, starting, "/"))
    assert _roots(report) == []
    assert not [f for f in report.findings if f.link == "device-plugin" and f.severity is not Severity.INFO]
