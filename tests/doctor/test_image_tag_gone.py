"""An operand's image whose tag the registry does not have, where no policy key sets it: the fix names the image and
sets its tag where the DaemonSet comes from (gpuchain.doctor.links.image_tag_gone).

Fixtures: the kubelet's words (kubernetes pkg/kubelet/images/image_manager.go "Back-off pulling image %q", kuberuntime
"Failed to pull image %q: %v") around the runtime's for a reference the registry lacks (containerd's "not found";
Docker's "manifest for %s not found: manifest unknown", the distribution spec's MANIFEST_UNKNOWN). GKE's installer
DaemonSet is GoogleCloudPlatform/container-engine-accelerators nvidia-driver-installer/cos/daemonset-preloaded.yaml's
(init container nvidia-driver-installer, image gcr.io/cos-cloud/cos-gpu-installer); minikube's addon labels its objects
``kubernetes.io/minikube-addons: <addon>`` (kubernetes/minikube deploy/addons/gpu/nvidia-driver-installer.yaml.tmpl)
and takes a custom image with ``minikube addons enable <addon> --images=<name>=<image>`` (minikube docs
handbook/addons/custom-images). The case it generalises is tests/sim/heldout34 h34-11 (minikube, an untagged image
pulled as :latest); these use another installer, tag, node and runtime."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed, gke_installer_on, no_gpus

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp, Report

GKE = (
    "name: t\nstack: gke\nnodes:\n  - {name: gke-pool-b-2, preset: t4-x4, osImage: Container-Optimized OS from Google, "
    "labels: {cloud.google.com/gke-accelerator: nvidia-tesla-t4}}\n"
)
IMAGE = "gcr.io/cos-cloud/cos-gpu-installer:v2.0.99"


def _pulling(node: str, image: str, said: str, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    installer = gke_installer_on(node) | {"image": image}
    if labels:
        installer["labels"] = labels
    pod = {
        "do": "pod",
        "daemonset": "nvidia-driver-installer",
        "namespace": "kube-system",
        "node": node,
        "phase": "Pending",
        "init": [
            {
                "name": "nvidia-driver-installer",
                "state": {"waiting": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'},
            }
        ],
        "events": [
            {"reason": "Failed", "count": 3, "message": f'Failed to pull image "{image}": {said}'},
            {"reason": "BackOff", "count": 20, "message": f'Back-off pulling image "{image}"'},
        ],
    }
    return [installer, pod, no_gpus(node)]


def _roots(report: Report) -> list[Any]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


NOT_FOUND = (
    f'rpc error: code = NotFound desc = failed to pull and unpack image "{IMAGE}": failed to resolve reference '
    f'"{IMAGE}": {IMAGE}: not found'
)


def test_an_installer_tag_the_registry_lacks_sets_the_daemonsets_image_tag() -> None:
    (root,) = _roots(diagnosed(GKE, *_pulling("gke-pool-b-2", IMAGE, NOT_FOUND)))
    assert (root.link, root.node) == ("driver", "gke-pool-b-2")
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    assert root.action.target == "kube-system/nvidia-driver-installer"
    assert "gcr.io/cos-cloud/cos-gpu-installer:<a tag the registry has>" in root.fix
    assert "set the image tag of nvidia-driver-installer" in root.fix


def test_a_minikube_addons_untagged_image_is_set_through_the_addon() -> None:
    untagged = "registry.k8s.io/minikube-nvidia-driver-installer"
    said = f"Error response from daemon: manifest for {untagged}:latest not found: manifest unknown"
    labels = {"k8s-app": "nvidia-driver-installer", "kubernetes.io/minikube-addons": "nvidia-driver-installer"}
    edits = _pulling("gke-pool-b-2", untagged, said, labels)
    edits[1]["init"][0]["state"]["message"] = f'Back-off pulling image "{untagged}:latest"'
    edits[1]["events"][0]["message"] = f'Failed to pull image "{untagged}:latest": {said}'
    (root,) = _roots(diagnosed(GKE, *edits))
    assert "with no tag" in root.cause and f"{untagged}:latest" in root.cause
    assert "minikube addons enable nvidia-driver-installer --images=" in root.fix
    assert "upgrade minikube" in root.fix


def test_a_pull_the_registry_refuses_for_credentials_keeps_the_pull_secret_repair() -> None:
    said = "rpc error: code = Unknown desc = failed to pull and unpack image: unexpected status: 401 Unauthorized"
    (root,) = _roots(diagnosed(GKE, *_pulling("gke-pool-b-2", IMAGE, said)))
    assert root.action is None and "pull secret" in root.fix


def test_a_running_installer_is_quiet() -> None:
    report = diagnosed(GKE, gke_installer_on("gke-pool-b-2") | {"image": IMAGE})
    assert not [f for f in report.findings if f.link == "driver" and f.severity is Severity.ERROR]


def test_docker_hubs_refusal_that_also_says_does_not_exist_keeps_the_pull_secret_repair() -> None:
    # Docker Engine's words for a repository it may not read (moby/moby distribution/errors.go: "pull access denied for %s,
    # repository does not exist or may require 'docker login'"): a refusal, not a missing tag.
    said = (
        "Error response from daemon: pull access denied for example/nvidia-driver-installer, repository does not "
        "exist or may require 'docker login': denied: requested access to the resource is denied"
    )
    (root,) = _roots(diagnosed(GKE, *_pulling("gke-pool-b-2", "example/nvidia-driver-installer:v1", said)))
    assert root.action is None and "pull secret" in root.fix
