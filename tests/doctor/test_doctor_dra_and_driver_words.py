"""Three rules the DRA path and the driver link read from the components' state, not from a case:

- NVIDIA's DRA kubelet plugin finds the driver's libraries under its NVIDIA_DRIVER_ROOT and exits when they are
  not there (NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/nvlib.go newDeviceLib "failed to locate driver
  libraries"@v25.12.0): a plugin pod that crash-loops with its root elsewhere than this node's driver (the GPU
  Operator's driver container installs under /run/nvidia/driver) is repaired by the chart's ``nvidiaDriverRoot``;
  its first release ran image nvcr.io/nvidia/cloud-native/k8s-dra-driver (NVIDIA/k8s-dra-driver README, v0.1.0),
  which is the same plugin;
- the kubelet sends FailedPrepareDynamicResources only for a pod with ResourceClaims (kubernetes
  pkg/kubelet/kuberuntime/kuberuntime_manager.go@v1.34.4), so that Event names a claim's pod even where the dump
  left the pod's claims out;
- a driver container whose own log names its failure (catalog.yaml) is that failure, even where driver pods run
  ready on another kernel: the kernel difference is a guess for a log that names nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doctor.small_cluster import crashing_pod, diagnosed, no_gpus
from test_doctor_dra_prepare import STALE_CDI, claim_pod, kubelet_event
from test_doctor_selinux_and_driver_tags import CHCON
from test_doctor_silent_pods import CRASH, DONE, DRA_DS, DRA_NS, dra_release

from gpuchain.doctor.model import Finding, FixOp, Report, Severity
from gpuchain.kube import DAEMONSET, POD
from gpuchain.kube.objects import name_of
from gpuchain.sim.build import SimCluster

#: The operator, its device plugin on, with NVIDIA's DRA driver installed beside it.
OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n"
#: Two nodes of the operator on different kernels (driver pods ready on the first).
TWO_KERNELS = (
    "name: t\nstack: gpu-operator\nnodes:\n  - {name: a1, kernel: 5.15.0-105-generic}\n"
    "  - {name: a2, kernel: 5.15.0-119-generic}\n"
)
FIRST_RELEASE = "nvcr.io/nvidia/cloud-native/k8s-dra-driver:v0.1.0"


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def _image(image: str) -> Callable[[SimCluster], None]:
    """An edit: the DRA plugin's DaemonSet and pod run ``image``."""

    def edit(sim: SimCluster) -> None:
        def images(spec: dict[str, Any]) -> dict[str, Any]:
            return {k: [{**c, "image": image} for c in spec[k]] for k in ("initContainers", "containers")}

        pod = sim.cluster.get(POD, name=f"{DRA_DS}-7xk2p", namespace=DRA_NS)
        sim.cluster.patch(POD, name=name_of(pod), patch={"spec": images(pod["spec"])}, namespace=DRA_NS)
        template = sim.cluster.get(DAEMONSET, name=DRA_DS, namespace=DRA_NS)["spec"]["template"]
        patch = {"spec": {"template": {"spec": images(template["spec"])}}}
        sim.cluster.patch(DAEMONSET, name=DRA_DS, patch=patch, namespace=DRA_NS)

    return edit


def test_a_crashing_dra_plugin_whose_driver_root_is_not_the_operators_gets_the_charts_driver_root() -> None:
    report = diagnosed(OPERATOR, dra_release("n1", DONE, CRASH, "/"))
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("device-plugin.not-ready", "device-plugin", "n1")
    assert "NVIDIA_DRIVER_ROOT=/ " in root.cause and "/run/nvidia/driver" in root.cause
    assert "--set nvidiaDriverRoot=/run/nvidia/driver" in root.fix and f"-n {DRA_NS}" in root.fix


def test_a_crashing_dra_plugin_pointed_at_the_driver_is_not_told_to_move_its_root() -> None:
    (root,) = _roots(diagnosed(OPERATOR, dra_release("n1", DONE, CRASH, "/run/nvidia/driver")))
    assert (root.link, root.node) == ("device-plugin", "n1")
    assert "nvidiaDriverRoot" not in root.fix


def test_the_dra_drivers_first_release_image_is_its_kubelet_plugin() -> None:
    report = diagnosed(OPERATOR, dra_release("n1", DONE, CRASH, "/"), _image(FIRST_RELEASE))
    (root,) = _roots(report)
    assert (root.link, root.node) == ("device-plugin", "n1")
    assert "--set nvidiaDriverRoot=/run/nvidia/driver" in root.fix


def _claims_dropped(sim: SimCluster) -> None:
    """An edit: the claim pod as a dump without its spec.resourceClaims shows it."""
    sim.cluster.patch(POD, name="train-7c9f8-abcde", patch={"spec": {"resourceClaims": None}}, namespace="ml")


def test_a_prepare_event_names_a_claim_pod_whose_claims_the_dump_left_out() -> None:
    ready = {"state": {"running": {"startedAt": "2026-12-01T10:00:00Z"}}, "restartCount": 0, "ready": True}
    report = diagnosed(
        OPERATOR, no_gpus("n1"), dra_release("n1", DONE, ready, "/run/nvidia/driver"), claim_pod(), _claims_dropped,
        kubelet_event(STALE_CDI),
    )  # fmt: skip
    (found,) = [f for f in report.findings if f.id == "device-plugin.dra-prepare-failed"]
    assert found.action is not None and found.action.op is FixOp.DELETE
    assert found.action.target == f"{DRA_NS}/{DRA_DS}-7xk2p"
    # Without the Event, a pod with no claims is no claim pod.
    quiet = diagnosed(OPERATOR, dra_release("n1", DONE, ready, "/run/nvidia/driver"), claim_pod(), _claims_dropped)
    assert "device-plugin.dra-prepare-failed" not in quiet.ids


def test_a_driver_log_that_names_its_failure_outranks_the_other_kernels_guess() -> None:
    crash = crashing_pod("nvidia-driver-daemonset", "nvidia-driver-ctr", "a2", CHCON)
    (root,) = _roots(diagnosed(TWO_KERNELS, no_gpus("a2"), crash))
    assert (root.link, root.node) == ("driver", "a2") and root.id != "driver.kernel-mismatch"
    assert any("coreutils.chcon-unlabeled" in e for e in root.evidence)
    # A log that names nothing leaves the guess: driver pods run ready on the other kernel only.
    silent = crashing_pod("nvidia-driver-daemonset", "nvidia-driver-ctr", "a2", "")
    (guess,) = _roots(diagnosed(TWO_KERNELS, no_gpus("a2"), silent))
    assert guess.id == "driver.kernel-mismatch"
