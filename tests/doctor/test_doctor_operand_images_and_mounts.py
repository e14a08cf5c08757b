"""Operand failures whose repair is an image or manifest release, not a restart, a privilege or the kernel's headers.

Fixtures, each from its source:
- the glibc loader's refusal, "version `%s' not found (required by %s)" (bminor/glibc elf/dl-version.c@630da022), of the
  KubeVirt GPU device plugin binary (nvcr.io/nvidia/kubevirt-gpu-device-plugin, fixed in v1.2.4 by
  NVIDIA/kubevirt-gpu-device-plugin#82; the GPU Operator ships v1.2.4 from v23.9.1, deployments/gpu-operator/
  values.yaml@v23.9.1), here with other glibc versions, library paths and node names than any report;
- GFD's "Writing labels to output file %v" (NVIDIA/k8s-device-plugin internal/lm/output.go@v0.17.1);
- containerd's "failed to mkdir %q: %w" for a missing bind-mount source (containerd internal/cri/opts/
  spec_linux_opts.go@v2.0.5), with the GPU Operator's driver hostPath /sys/devices/system/memory/auto_online_blocks
  (assets/state-driver/0500_daemonset.yaml v23.9.1 to v26.3.3; /sys/devices/system from v26.7.0);
- the driver pod's nvidia-fs / GDRCopy sidecars, which the operator gives driver.repoConfig/certConfig mounts only from
  v24.3.0 (controllers/object_controls.go@v24.3.0 transformGDSContainer, transformGDRCopyContainer);
- the vGPU device manager's manifest without the nvidia.com/gpu toleration up to v26.3.3
  (assets/state-vgpu-device-manager/0600_daemonset.yaml@v26.7.0 adds it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doctor.small_cluster import diagnosed
from doctor.test_sandbox_chain import VMS, _root, _without_pod

from gpuchain.doctor import Severity, catalog
from gpuchain.doctor.model import FixOp, Report
from gpuchain.doctor.stacks import NVIDIA_CLUSTER_POLICY
from gpuchain.kube import DAEMONSET
from gpuchain.sim.build import SimCluster

# -- the KubeVirt GPU device plugin refused by the loader ------------------------------------------------------------

KUBEVIRT = """
name: kubevirt
stack: none
nodes:
  - {name: vfio-07, preset: a100-40gb-x8}
"""
GLIBC_234 = (
    "nvidia-kubevirt-gpu-device-plugin: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found (required by "
    "/usr/bin/nvidia-kubevirt-gpu-device-plugin)\n"
)


def _standalone(image: str, log: str = "") -> list[dict[str, Any]]:
    edits: list[dict[str, Any]] = [
        {
            "do": "node",
            "node": "vfio-07",
            "capacity": {"nvidia.com/gpu": None},
            "allocatable": {"nvidia.com/gpu": None},
        },
        {
            "do": "add-daemonset",
            "namespace": "kubevirt-gpu",
            "name": "kubevirt-gpu-dp",
            "image": image,
            "containers": ["plugin"],
            "nodes": ["vfio-07"],
        },
    ]
    if log:
        edits.append(
            {
                "do": "pod",
                "daemonset": "kubevirt-gpu-dp",
                "namespace": "kubevirt-gpu",
                "node": "vfio-07",
                "containers": [
                    {
                        "name": "plugin",
                        "restarts": 7,
                        "state": {"waiting": "CrashLoopBackOff"},
                        "last": {"terminated": "Error", "exitCode": 1},
                    }
                ],
                "logs": {"plugin": log},
            }
        )
    return edits


def _errors(report: Report) -> list[Any]:
    return [f for f in report.findings if f.severity is Severity.ERROR]


def test_a_standalone_kubevirt_plugin_the_loader_refuses_is_repaired_by_its_release_not_a_restart() -> None:
    report = diagnosed(KUBEVIRT, *_standalone("nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.2.2", GLIBC_234))
    (root,) = _errors(report)
    assert (root.id, root.link, root.node) == ("vm.plugin-failing", "device-plugin", "vfio-07")
    assert "v1.2.4" in root.fix and "kubevirt-gpu-dp" in root.fix and "delete pod" not in root.fix
    assert any("kubevirt-gpu-device-plugin.glibc-not-found" in e for e in root.evidence)


def test_a_running_standalone_kubevirt_plugin_stays_quiet() -> None:
    assert _errors(diagnosed(KUBEVIRT, *_standalone("nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.2.7"))) == []


def test_the_operators_sandbox_plugin_refused_by_the_loader_names_the_plugin_and_operator_releases() -> None:
    crash = {
        "do": "pod",
        "daemonset": "nvidia-sandbox-device-plugin-daemonset",
        "node": "pt",
        "containers": [
            {
                "name": "nvidia-sandbox-device-plugin-ctr",
                "restarts": 40,
                "state": {"waiting": "CrashLoopBackOff"},
                "last": {"terminated": "Error", "exitCode": 1},
            }
        ],
        "logs": {"nvidia-sandbox-device-plugin-ctr": GLIBC_234.replace("2.34", "2.33")},
    }
    root = _root(diagnosed(VMS, crash), "pt")
    assert (root.id, root.link) == ("sandbox.operand-failing", "device-plugin")
    assert "v1.2.4" in root.fix and "v23.9.1" in root.fix and "sandboxDevicePlugin" in root.fix


def test_another_binarys_glibc_refusal_is_not_read_as_the_kubevirt_plugins() -> None:
    line = "/lib64/libc.so.6: version `GLIBC_2.32' not found (required by /usr/bin/nvidia-device-plugin)"
    found = catalog.known_error(line)
    assert found is None or found.entry.id != "kubevirt-gpu-device-plugin.glibc-not-found"


# -- GFD's feature file written, the node never labelled -------------------------------------------------------------

OPERATOR = """
name: rhel-nodes
stack: gpu-operator
nodes:
  - {name: gpu-a, preset: a100-40gb-x8, osImage: Red Hat Enterprise Linux 9.4 (Plow)}
"""
UNLABELLED = {
    "do": "node",
    "node": "gpu-a",
    "labels": {"nvidia.com/gpu.product": None, "nvidia.com/gpu.count": None, "nvidia.com/gpu.memory": None},
}


def _gfd_log(text: str) -> dict[str, Any]:
    return {"do": "pod", "daemonset": "gpu-feature-discovery", "logs": {"gpu-feature-discovery": text}}


def test_gfd_that_wrote_its_feature_file_to_no_effect_moves_to_the_nodefeature_api() -> None:
    wrote = (
        "I0301 10:00:00.000000       1 main.go:300] Writing labels to output file "
        "/etc/kubernetes/node-feature-discovery/features.d/gfd\n"
    )
    report = diagnosed(OPERATOR, UNLABELLED, _gfd_log(wrote))
    (root,) = [f for f in _errors(report) if f.id == "gfd.labels-missing"]
    assert "USE_NODE_FEATURE_API" in root.fix and "delete pod" not in root.fix
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert {"name": "USE_NODE_FEATURE_API", "value": "true"} in root.action.changes["spec"]["gfd"]["env"]


def test_gfd_whose_log_says_nothing_of_a_file_keeps_the_restart() -> None:
    report = diagnosed(
        OPERATOR, UNLABELLED, _gfd_log("I0301 10:00:00.000000       1 main.go:168] Loading configuration.\n")
    )
    (root,) = [f for f in _errors(report) if f.id == "gfd.labels-missing"]
    assert "USE_NODE_FEATURE_API" not in root.fix


def test_gfd_that_wrote_its_file_without_nvml_keeps_the_restart() -> None:
    no_nvml = (
        "I0301 10:00:00.000000       1 factory.go:50] Detected non-NVML platform: could not load NVML library: "
        "libnvidia-ml.so.1: cannot open shared object file: No such file or directory\n"
        "I0301 10:00:00.100000       1 output.go:82] Writing labels to output file /etc/nfd/features.d/gfd\n"
    )
    report = diagnosed(OPERATOR, UNLABELLED, _gfd_log(no_nvml))
    (root,) = [f for f in _errors(report) if f.id == "gfd.labels-missing"]
    assert "USE_NODE_FEATURE_API" not in root.fix


# -- a hostPath under /sys the kernel does not provide ----------------------------------------------------------------

UBUNTU = """
name: edge
stack: gpu-operator
nodes:
  - {name: kiosk-3, preset: l4-x2, kernel: 6.6.40-tiny}
"""


def _driver_not_created(path: str, why: str) -> dict[str, Any]:
    message = f'failed to generate container "0a1b" spec: failed to generate spec: failed to mkdir "{path}": {why}'
    return {
        "do": "pod",
        "daemonset": "nvidia-driver-daemonset",
        "node": "kiosk-3",
        "phase": "Pending",
        "containers": [
            {
                "name": "nvidia-driver-ctr",
                "restarts": 0,
                "state": {"waiting": "CreateContainerError", "message": message},
            }
        ],
    }


def _driver_root(report: Report) -> Any:
    return next(f for f in _errors(report) if f.link == "driver" and f.node == "kiosk-3")


def test_a_driver_hostpath_the_kernel_lacks_is_the_operators_mount_release_or_the_kernel_option() -> None:
    refused = _driver_not_created(
        "/sys/devices/system/memory/auto_online_blocks", "mkdir /sys/devices/system/memory: read-only file system"
    )
    root = _driver_root(diagnosed(UBUNTU, refused))
    assert "v26.7.0" in root.fix and "CONFIG_MEMORY_HOTPLUG" in root.fix
    assert "privileged" not in root.fix.split("otherwise")[0]


def test_another_sysfs_source_the_kernel_lacks_names_the_mount_not_a_release() -> None:
    root = _driver_root(
        diagnosed(UBUNTU, _driver_not_created("/sys/kernel/mm/lru_gen/enabled", "operation not permitted"))
    )
    assert "remove or change that hostPath volume" in root.fix and "v26.7.0" not in root.fix


def test_a_host_path_outside_sys_and_proc_is_not_read_as_a_kernel_file() -> None:
    root = _driver_root(diagnosed(UBUNTU, _driver_not_created("/run/nvidia/driver", "permission denied")))
    assert "does not provide" not in root.fix


# -- a driver sidecar without the driver container's repository configuration ---------------------------------------


def _driver_pod(sidecar: str, *, sidecar_mounts: bool) -> Callable[[SimCluster], None]:
    """An edit: the driver pod on gpu-r1 built whole, its driver container running with the repository ConfigMap
    mounted, its ``sidecar`` crash-looping (with or without that mount)."""
    mount = {"name": "repo-config", "mountPath": "/etc/yum.repos.d/local.repo", "subPath": "local.repo"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "nvidia-driver-daemonset-q2x7c",
            "namespace": "gpu-operator",
            "labels": {"app": "nvidia-driver-daemonset"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": "nvidia-driver-daemonset",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": "gpu-r1",
            "containers": [
                {
                    "name": "nvidia-driver-ctr",
                    "image": "nvcr.io/nvidia/driver:550.54.15-rhel9.2",
                    "volumeMounts": [mount],
                },
                {
                    "name": sidecar,
                    "image": "nvcr.io/nvidia/cloud-native/gdrdrv:v2.4.1-rhel9.2",
                    "volumeMounts": [mount] if sidecar_mounts else [],
                },
            ],
            "volumes": [{"name": "repo-config", "configMap": {"name": "local-mirror"}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "nvidia-driver-ctr", "ready": True, "restartCount": 0, "state": {"running": {}}},
                {
                    "name": sidecar,
                    "ready": False,
                    "restartCount": 9,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
                },
            ],
        },
    }

    def edit(sim: SimCluster) -> None:
        sim.cluster.create(pod)

    return edit


RHEL = """
name: rdma
stack: gpu-operator
nodes:
  - {name: gpu-r1, preset: h100-80gb-x8, osImage: Red Hat Enterprise Linux 9.2 (Plow), kernel: 5.14.0-284.11.1.el9_2.x86_64}
"""
DROP_DRIVER_PODS = _without_pod("nvidia-driver-daemonset", "gpu-r1")


def _policy(patch: dict[str, Any]) -> Callable[[SimCluster], None]:
    """An edit: the ClusterPolicy merged with ``patch``."""

    def edit(sim: SimCluster) -> None:
        (policy,) = sim.cluster.list(NVIDIA_CLUSTER_POLICY)
        sim.cluster.patch(NVIDIA_CLUSTER_POLICY, name=policy["metadata"]["name"], patch=patch)

    return edit


MIRROR = _policy({"spec": {"driver": {"repoConfig": {"configMapName": "local-mirror"}}}})


def _sidecar_log(container: str, text: str) -> dict[str, Any]:
    return {"do": "pod", "daemonset": "nvidia-driver-daemonset", "node": "gpu-r1", "logs": {container: text}}


def test_a_gdrcopy_sidecar_on_a_mirror_the_policy_names_is_the_operator_release_that_mounts_it() -> None:
    report = diagnosed(RHEL, DROP_DRIVER_PODS, MIRROR, _driver_pod("nvidia-gdrcopy-ctr", sidecar_mounts=False))
    (root,) = [f for f in _errors(report) if f.node == "gpu-r1" and f.link == "driver"]
    assert root.id == "driver.sidecar-without-configs"
    assert "v24.3.0" in root.fix and "gdrcopy" in root.fix
    assert any("local-mirror" in e for e in root.evidence)


def test_an_nvidia_fs_sidecar_without_headers_the_driver_container_found_is_the_same_release() -> None:
    no_headers = (
        "Installing Linux kernel headers...\nE: Unable to locate package linux-headers-5.14.0-284.11.1.el9_2.x86_64\n"
    )
    report = diagnosed(
        RHEL,
        DROP_DRIVER_PODS,
        _driver_pod("nvidia-fs-ctr", sidecar_mounts=False),
        _sidecar_log("nvidia-fs-ctr", no_headers),
    )
    (root,) = [f for f in _errors(report) if f.node == "gpu-r1" and f.link == "driver"]
    assert root.id == "driver.sidecar-without-configs" and "v24.3.0" in root.fix and "spec.gds" in root.fix


def test_a_sidecar_on_an_operator_that_mounts_the_configuration_is_not_read_as_the_missing_mount() -> None:
    labelled = _policy({"metadata": {"labels": {"helm.sh/chart": "gpu-operator-v24.9.2"}}})
    report = diagnosed(
        RHEL, DROP_DRIVER_PODS, MIRROR, labelled, _driver_pod("nvidia-gdrcopy-ctr", sidecar_mounts=False)
    )
    assert "driver.sidecar-without-configs" not in {f.id for f in report.findings}


def test_a_failing_sidecar_with_nothing_showing_a_missing_configuration_is_not_read_as_one() -> None:
    report = diagnosed(RHEL, DROP_DRIVER_PODS, _driver_pod("nvidia-gdrcopy-ctr", sidecar_mounts=True))
    assert "driver.sidecar-without-configs" not in {f.id for f in report.findings}


# -- an operand DaemonSet without a toleration its ClusterPolicy lists -----------------------------------------------

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


def _untolerating(name: str) -> Callable[[SimCluster], None]:
    """An edit: DaemonSet ``name`` renders no toleration (as its release's manifest did not) and has no pod on vgpu."""

    def edit(sim: SimCluster) -> None:
        sim.cluster.patch(
            DAEMONSET,
            name=name,
            namespace="gpu-operator",
            patch={"spec": {"template": {"spec": {"tolerations": None}}}},
        )
        _without_pod(name, "vgpu")(sim)

    return edit


def test_the_vgpu_device_manager_without_the_listed_toleration_is_patched_itself_not_the_policy_again() -> None:
    report = diagnosed(
        VMS,
        {"do": "node", "node": "vgpu", "taints": [GPU_TAINT]},
        _untolerating("nvidia-vgpu-device-manager"),
    )
    root = _root(report, "vgpu")
    assert (root.id, root.link) == ("sandbox.operand-missing", "mig")
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    assert "v26.7.0" in root.fix and "already lists" in root.fix


def test_another_operand_without_a_listed_toleration_names_no_release_it_does_not_know() -> None:
    report = diagnosed(
        VMS,
        {"do": "node", "node": "vgpu", "taints": [GPU_TAINT]},
        _untolerating("nvidia-sandbox-validator"),
    )
    root = _root(report, "vgpu")
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    assert "already lists" in root.fix and "v26.7.0" not in root.fix


def test_a_taint_the_policy_does_not_list_is_added_to_it_once() -> None:
    taint = {"key": "dedicated", "value": "vdi", "effect": "NoSchedule"}
    report = diagnosed(
        VMS, {"do": "node", "node": "vgpu", "taints": [taint]}, _without_pod("nvidia-sandbox-validator", "vgpu")
    )
    root = _root(report, "vgpu")
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    listed = root.action.changes["spec"]["daemonsets"]["tolerations"]
    assert len(listed) == len({(t.get("key"), t.get("effect"), t.get("operator")) for t in listed})
    assert {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"} in listed
