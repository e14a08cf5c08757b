"""Classes of failure users report on the public trackers (issue 26), each on a small simulated cluster edited the way
the components leave it: the link the doctor names and the action that repairs. The report a class was read from and
the upstream source its facts stand on are named at each test."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import (
    crash_looping,
    crashing_pod,
    diagnosed,
    no_gpus,
    pending_gpu_pod,
    plugin_pod,
    refused_at_start,
)

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.kube import DAEMONSET, NODE, POD
from gpuchain.kube.objects import labels_of, name_of, namespace_of


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


# -- the standalone plugin on k3s / RKE2, under runc ------------------------------------------------------------------
# Report: k3s-io/k3s#4070 (NVML fails in the plugin; the k3s side answers: keep k3s's config and give the pod
# runtimeClassName nvidia); k3s-io/k3s#9702 (the agent's --default-runtime). Source: k3s-io/k3s
# pkg/agent/containerd/runtimes.go (the nvidia runtime is added, not as the default). The plugin's lines:
# NVIDIA/k8s-device-plugin internal/plugin/manager/factory.go@v0.15.0 ("Incompatible platform detected") and
# cmd/nvidia-device-plugin/main.go@v0.17.1 ("No devices found. Waiting indefinitely.").

RUNC_LOG = (
    "I0101 00:00:00.000000       1 factory.go:107] Detected non-NVML platform: could not load NVML library: "
    "libnvidia-ml.so.1: cannot open shared object file: No such file or directory\n"
    "I0101 00:00:00.000000       1 factory.go:107] Detected non-Tegra platform: /sys/devices/soc0/family file not found\n"
    "E0101 00:00:00.000000       1 factory.go:115] Incompatible platform detected\n"
    "E0101 00:00:00.000000       1 factory.go:116] If this is a GPU node, did you configure the NVIDIA Container "
    "Toolkit?\n"
    "I0101 00:00:00.000000       1 main.go:287] No devices found. Waiting indefinitely.\n"
)


def _plugin_under_runc(distribution: str) -> Report:
    scenario = (
        "name: t\nstack: nvidia-device-plugin\nnodes:\n"
        f"  - {{name: nas, hostDriver: 535.183.01, distribution: {distribution}}}\n"
    )
    running: dict[str, Any] = {"name": "nvidia-device-plugin-ctr", "state": {"running": True}}
    return diagnosed(scenario, no_gpus("nas"), plugin_pod("nas", running, RUNC_LOG))


def test_a_plugin_without_nvml_on_k3s_gets_the_nvidia_runtime_class_not_a_containerd_config_edit() -> None:
    (root,) = _roots(_plugin_under_runc("k3s"))
    assert (root.id, root.link, root.node) == ("toolkit.runtime-not-default", "toolkit", "nas")
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    assert root.action.changes == {"spec": {"template": {"spec": {"runtimeClassName": "nvidia"}}}}
    assert "default-runtime: nvidia in /etc/rancher/k3s/config.yaml" in root.fix
    assert "nvidia-ctk runtime configure" not in root.fix


def test_on_rke2_the_same_names_rke2s_config() -> None:
    (root,) = _roots(_plugin_under_runc("rke2"))
    assert root.link == "toolkit" and "/etc/rancher/rke2/config.yaml" in root.fix and "rke2-agent" in root.fix


def test_on_kubeadm_the_node_default_runtime_is_still_the_repair() -> None:
    (root,) = _roots(_plugin_under_runc("kubeadm"))
    assert root.link == "toolkit" and "--set-as-default" in root.fix
    assert root.action is not None and root.action.op is FixOp.NODE


# -- a GPU pod asking for a name the device plugin does not announce ---------------------------------------------------
# Reports: kai-scheduler/KAI-Scheduler#1876 (MIG strategy mixed: the nodes offer nvidia.com/mig-<profile>, not what
# the pods ask for), NVIDIA/k8s-device-plugin#1150 (sharing with renameByDefault: ask for nvidia.com/gpu.shared).
# Source: NVIDIA/k8s-device-plugin cmd/nvidia-device-plugin/mig-strategy.go (mixed: one resource per MIG profile);
# its README "With CUDA Time-Slicing" (renameByDefault: replicas as <name>.shared). The scheduler's words: kube-scheduler
# NodeResourcesFit "Insufficient <resource>".

INSUFFICIENT = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def _deployment_pod(resource: str, message: str) -> dict[str, Any]:
    """A Deployment's pod (its ReplicaSet train-5d8f7) asking for one ``resource``, Pending Unschedulable."""
    pod = pending_gpu_pod(1, message, name="train-5d8f7-x2x4q")
    pod["metadata"]["labels"] = {"pod-template-hash": "5d8f7"}
    pod["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "train-5d8f7", "controller": True}]
    pod["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"}}
    return pod


def _offering(node: str, resources: dict[str, str | None]) -> dict[str, Any]:
    """An edit: ``node`` offers ``resources`` (None: the resource gone) in capacity and allocatable."""
    return {"do": "node", "node": node, "capacity": resources, "allocatable": resources}


def _misnamed(report: Report) -> Finding:
    (root,) = [f for f in _roots(report) if f.id == "workload.resource-name-not-offered"]
    assert "workload.insufficient-gpu" not in report.ids
    return root


def test_a_pod_asking_for_whole_gpus_on_mixed_mig_nodes_is_told_the_mig_resource_to_ask_for() -> None:
    report = diagnosed(
        "name: t\nstack: gpu-operator\npolicy: {mig: {strategy: mixed}}\nnodes:\n"
        "  - {name: m, preset: a100-80gb-x8, mig: {config: all-1g.10gb}}\n",
        lambda s: s.cluster.create(_deployment_pod("nvidia.com/gpu", INSUFFICIENT)),
    )
    root = _misnamed(report)
    assert root.link == "mig"
    assert root.action is not None and root.action.op is FixOp.PATCH_WORKLOAD
    assert root.action.target == "Deployment/ml/train" and root.action.changes["type"] == "json"
    ops = root.action.changes["patch"]
    assert {"op": "remove", "path": "/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu"} in ops
    assert {
        "op": "add",
        "path": "/spec/template/spec/containers/0/resources/limits/nvidia.com~1mig-1g.10gb",
        "value": "1",
    } in ops
    assert "kubectl -n ml patch deployment train --type json" in root.fix
    assert '"strategy":"single"' in root.fix and "nvidia.com/mig.config=all-disabled" in root.fix


def test_a_pod_asking_for_nvidia_gpu_where_sharing_renamed_it_is_told_gpu_shared_or_rename_by_default() -> None:
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: h, hostDriver: 550.54.15}\n",
        _offering("h", {"nvidia.com/gpu": None, "nvidia.com/gpu.shared": "4"}),
        lambda s: s.cluster.create(_deployment_pod("nvidia.com/gpu", INSUFFICIENT)),
    )
    root = _misnamed(report)
    assert root.link == "device-plugin" and "nvidia.com~1gpu.shared" in root.fix
    assert "renameByDefault: false" in root.fix and "config.map" in root.fix


def test_the_reverse_asks_for_nvidia_gpu_where_nothing_is_shared() -> None:
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: a}\n",
        lambda s: s.cluster.create(
            _deployment_pod("nvidia.com/gpu.shared", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.shared.")
        ),
    )
    root = _misnamed(report)
    assert '"path":"/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu"' in root.fix
    assert "renameByDefault: true" in root.fix and "spec.devicePlugin.config.name" in root.fix


def test_a_full_cluster_whose_nodes_offer_the_name_asked_for_stays_capacity() -> None:
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: a}\n",
        lambda s: s.cluster.create(_deployment_pod("nvidia.com/gpu", INSUFFICIENT)),
    )
    assert "workload.resource-name-not-offered" not in report.ids
    (capacity,) = [f for f in report.findings if f.id == "workload.insufficient-gpu"]
    assert capacity.severity is Severity.INFO


def test_while_a_node_offers_no_gpu_for_a_broken_link_the_name_is_not_blamed() -> None:
    report = diagnosed(
        "name: t\nstack: gpu-operator\npolicy: {mig: {strategy: mixed}}\nnodes:\n"
        "  - {name: m, preset: a100-80gb-x8, mig: {config: all-1g.10gb}}\n  - {name: b}\n",
        no_gpus("b"),
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "node": "b",
            "containers": [crash_looping("nvidia-device-plugin")],
        },
        lambda s: s.cluster.create(_deployment_pod("nvidia.com/gpu", INSUFFICIENT)),
    )
    assert "workload.resource-name-not-offered" not in report.ids
    assert any(f.root and f.node == "b" for f in report.findings)


# -- the standalone plugin's DaemonSet requiring labels nothing writes ------------------------------------------------
# Reports: NVIDIA/k8s-device-plugin#708 (chart 0.15.0: the DaemonSet wants 0 pods), NVIDIA/nvkind#20 (repaired by
# labelling the node nvidia.com/gpu.present=true, or --set gfd.enabled=true). Source: NVIDIA/k8s-device-plugin
# deployments/helm/nvidia-device-plugin/values.yaml (affinity) and Chart.yaml (NFD comes with gfd.enabled).

CHART_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": k, "operator": "In", "values": [v]}]}
                for k, v in (
                    ("feature.node.kubernetes.io/pci-10de.present", "true"),
                    ("feature.node.kubernetes.io/cpu-model.vendor_id", "NVIDIA"),
                    ("nvidia.com/gpu.present", "true"),
                )
            ]
        }
    }
}


def _plugin_placed_nowhere(sim: Any) -> None:
    """The chart's affinity on the plugin's DaemonSet, its pods gone, and no node with a discovery label."""
    for ds in sim.cluster.list(DAEMONSET):
        if name_of(ds).startswith("nvidia-device-plugin"):
            patch = {"spec": {"template": {"spec": {"affinity": CHART_AFFINITY}}}, "status": None}
            sim.cluster.patch(DAEMONSET, name=name_of(ds), namespace=namespace_of(ds), patch=patch)
    for pod in sim.cluster.list(POD):
        if name_of(pod).startswith("nvidia-device-plugin"):
            sim.cluster.delete(POD, name=name_of(pod), namespace=namespace_of(pod))
    for node in sim.cluster.list(NODE):
        found = [k for k in labels_of(node) if k.startswith(("feature.node.kubernetes.io/", "nvidia.com/"))]
        sim.cluster.patch(NODE, name=name_of(node), patch={"metadata": {"labels": dict.fromkeys(found)}})


BARE_METAL = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: h, hostDriver: 550.54.15}\n"


def test_a_plugin_daemonset_needing_labels_nothing_writes_gets_the_gpu_node_labelled_or_gfd_enabled() -> None:
    report = diagnosed(
        BARE_METAL,
        _plugin_placed_nowhere,
        no_gpus("h"),
        lambda s: s.cluster.create(pending_gpu_pod(1, INSUFFICIENT)),
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("device-plugin.placed-nowhere", "device-plugin")
    assert root.action is not None and root.action.op is FixOp.LABEL_NODE
    assert root.action.changes == {"nvidia.com/gpu.present": "true"} and root.action.target == "h"
    assert "--set gfd.enabled=true" in root.fix
    assert "workload.insufficient-gpu" not in report.ids


def test_with_node_feature_discovery_running_an_unlabelled_node_has_no_gpu_and_the_pods_wait_for_one() -> None:
    nfd = {
        "do": "add-daemonset",
        "namespace": "node-feature-discovery",
        "name": "node-feature-discovery-worker",
        "image": "registry.k8s.io/nfd/node-feature-discovery:v0.16.4",
        "labels": {"app.kubernetes.io/name": "node-feature-discovery"},
        "containers": ["worker"],
        "nodes": ["h"],
    }
    report = diagnosed(
        BARE_METAL,
        _plugin_placed_nowhere,
        no_gpus("h"),
        nfd,
        lambda s: s.cluster.create(pending_gpu_pod(1, INSUFFICIENT)),
    )
    assert "device-plugin.placed-nowhere" not in report.ids
    assert [f.severity for f in report.findings if f.id == "workload.insufficient-gpu"] == [Severity.WARNING]


# -- an operand image with no build for the node's CPU architecture ----------------------------------------------------
# Reports: NVIDIA/gpu-operator#2265 (an amd64 digest launched on an ARM server: "Exec format error"), NVIDIA/nvidia-docker
# #1116 (an amd64-only image on ARM). Source: the kernel's ENOEXEC as Go spells it (golang/go
# src/syscall/zerrors_linux_amd64.go), in runc's "exec <path>: <error>" (catalog runc.exec-format-error).


def test_an_exporter_whose_image_has_no_build_for_the_arm64_node_is_told_to_run_the_nodes_architecture() -> None:
    def arm64(sim: Any) -> None:
        sim.cluster.patch(NODE, name="g", patch={"metadata": {"labels": {"kubernetes.io/arch": "arm64"}}})

    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: g}\n",
        arm64,
        crashing_pod(
            "nvidia-dcgm-exporter", "nvidia-dcgm-exporter", "g", "exec /usr/bin/dcgm-exporter: exec format error\n"
        ),
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("exporter", "g")
    assert "catalog: runc.exec-format-error (golang/go " in " ".join(root.evidence)
    assert "kubectl get node g -L kubernetes.io/arch" in root.fix and "skopeo copy --all" in root.fix
    assert "log.unrecognised" not in report.ids


# -- an image's CUDA requirement refused with a brand condition --------------------------------------------------------
# Reports: NVIDIA/nvidia-docker#861 and moby/moby#38757 ("unsatisfied condition: brand = tesla" on drivers older than
# the image's CUDA), NVIDIA/nvidia-container-toolkit#24 (newer brand names need toolkit 1.9.0). Source:
# NVIDIA/libnvidia-container src/dsl.c (dsl_evaluate: the last failing condition of NVIDIA_REQUIRE_CUDA's
# alternatives, "unsatisfied condition: %s"); catalog libnvidia-container.brand-requirement.

BRAND_REFUSED = (
    "OCI runtime create failed: runc create failed: unable to start container process: error during container init: "
    "error running hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n"
    "nvidia-container-cli: requirement error: unsatisfied condition: brand = tesla: unknown"
)


def test_a_gpu_pod_refused_on_a_brand_condition_is_the_driver_too_old_for_its_cuda() -> None:
    report = diagnosed(
        "name: t\nstack: gpu-operator\npolicy: {driver: {version: 535.1.2}}\nnodes:\n  - {name: n1}\n"
        "workloads:\n  - {name: app, count: 2, gpus: 1, node: n1}\n",
        refused_at_start("app", BRAND_REFUSED),
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("driver.too-old", "driver", "n1")
    assert "catalog: libnvidia-container.brand-requirement" in " ".join(root.evidence)
    assert root.action is not None and root.action.changes["spec"] == {"driver": {"version": None}}
    # The simulator's note stays out of the patch the user pastes.
    assert '-p \'{"spec":{"driver":{"version":null}}}\'' in root.fix
    assert "workload.runtime-hook-failed" not in report.ids


# -- a host driver with no module for the running kernel, under an operator that leaves the driver to the host -------
# Report: GoogleCloudPlatform/compute-gpu-installation#18 (after a kernel upgrade the installed driver stops working:
# nvidia-smi "couldn't communicate with the NVIDIA driver"; DKMS rebuilds the module). The validator's driver check
# runs nvidia-smi (NVIDIA/gpu-operator validator/main.go, driver validation); with spec.driver.enabled=false no
# driver container exists to build anything, so its repair is the host's.

SMI_FAILED = (
    "running command chroot with args [/host nvidia-smi]\n"
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
    "driver is installed and running.\n"
)


def test_a_host_driver_that_fails_validation_is_rebuilt_on_the_host_not_in_a_driver_container() -> None:
    report = diagnosed(
        "name: x\nstack: gpu-operator\npolicy: {driver: {enabled: false}}\nnodes:\n  - {name: a, hostDriver: 550.54.15}\n",
        {
            "do": "pod",
            "daemonset": "nvidia-operator-validator",
            "node": "a",
            "init": [
                {
                    "name": "driver-validation",
                    "restarts": 6,
                    "state": {"waiting": "CrashLoopBackOff"},
                    "last": {"terminated": "Error", "exitCode": 1},
                }
            ],
            "logs": {"driver-validation": SMI_FAILED},
        },
        no_gpus("a"),
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("driver", "a")
    assert "dkms autoinstall" in root.fix and "running kernel" in root.fix
    assert "driver container" not in root.fix and "usePrecompiled" not in root.fix


# -- an image pull the node refuses -------------------------------------------------------------------------------------
# Report: NVIDIA/gpu-operator#1519 (x509 at image pull from a private registry; a maintainer: the cluster's
# configuration, not the operator's). Source: golang/go src/crypto/x509/verify.go (UnknownAuthorityError) and
# src/syscall/zerrors_linux_amd64.go (ENOSPC), as containerd quotes them in the pull error (catalog image-pull.*).

PULL = (
    'Back-off pulling image "nvcr.io/nvidia/k8s-device-plugin:v0.17.0": ErrImagePull: failed to pull and unpack image '
    '"nvcr.io/nvidia/k8s-device-plugin:v0.17.0": '
)


def _pull_refused(reason: str) -> Finding:
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: h, hostDriver: 550.54.15}\n",
        no_gpus("h"),
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "node": "h",
            "containers": [
                {"name": "nvidia-device-plugin-ctr", "state": {"waiting": "ImagePullBackOff", "message": PULL + reason}}
            ],
        },
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("device-plugin", "h")
    return root


def test_a_pull_refused_on_an_untrusted_certificate_makes_the_nodes_runtime_trust_the_ca() -> None:
    root = _pull_refused(
        'failed to resolve reference "nvcr.io/nvidia/k8s-device-plugin:v0.17.0": failed to do request: Head '
        '"https://nvcr.io/v2/nvidia/k8s-device-plugin/manifests/v0.17.0": tls: failed to verify certificate: '
        "x509: certificate signed by unknown authority"
    )
    assert "catalog: image-pull.unknown-authority" in " ".join(root.evidence)
    assert "/etc/containerd/certs.d/" in root.fix and "systemctl restart containerd" in root.fix
    assert "pull secret" not in root.fix


def test_a_pull_refused_for_a_full_disk_frees_the_nodes_image_filesystem() -> None:
    root = _pull_refused(
        "failed to extract layer sha256:0a1b: write /var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/"
        "snapshots/12/fs/usr/bin/nvidia-device-plugin: no space left on device: unknown"
    )
    assert "catalog: image-pull.no-space-left" in " ".join(root.evidence)
    assert "crictl rmi --prune" in root.fix and "h's disk" in root.fix


def test_a_tag_the_registry_lacks_still_gets_a_tag_secret_or_mirror() -> None:
    root = _pull_refused('failed to resolve reference "nvcr.io/nvidia/k8s-device-plugin:v0.17.0": not found')
    # The registry says the reference is missing: the fix sets the DaemonSet's image tag (links/image_tag_gone.py),
    # with the pull secret where a private registry hides a tag that exists; never the node's CA.
    assert "set the image tag of nvidia-device-plugin-daemonset" in root.fix and "pull secret" in root.fix
    assert "certs.d" not in root.fix


# -- a pod asking for more than one shared GPU -------------------------------------------------------------------------
# Documented in NVIDIA/k8s-device-plugin README, "With CUDA Time-Slicing" (the UnexpectedAdmissionError of a pod
# asking for 2 under failRequestsGreaterThanOne); no tracker report found to cite. Source: NVIDIA/k8s-device-plugin internal/plugin/server.go (Allocate: "request for '%v: %v' too large: maximum
# request size for shared resources is 1"), which the kubelet reports as UnexpectedAdmissionError.


def test_a_pod_refused_for_asking_two_shared_gpus_asks_for_one_not_a_kubelet_restart() -> None:
    def refused(sim: Any) -> None:
        pod = next(p for p in sim.cluster.list(POD) if name_of(p).startswith("app"))
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{name_of(pod)}.admission", "namespace": namespace_of(pod)},
                "involvedObject": {"kind": "Pod", "name": name_of(pod), "namespace": namespace_of(pod)},
                "type": "Warning",
                "reason": "UnexpectedAdmissionError",
                "message": "Allocate failed due to rpc error: code = Unknown desc = request for 'nvidia.com/gpu: 2' "
                "too large: maximum request size for shared resources is 1, which is unexpected",
                "source": {"component": "kubelet", "host": "n1"},
            }
        )

    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\nworkloads:\n  - {name: app, count: 1, gpus: 2, node: n1}\n",
        refused,
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("workload.shared-request-too-large", "device-plugin", "n1")
    assert root.action is not None and root.action.op is FixOp.PATCH_WORKLOAD
    # The scenario's workload pods are bare pods: made again with the request, since a pod's resources are fixed.
    replace = {"op": "replace", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu", "value": "1"}
    assert root.action.changes["patch"] == [replace] and root.action.changes["recreate"] is True
    assert "failRequestsGreaterThanOne: false" in root.fix and "restart kubelet" not in root.fix
