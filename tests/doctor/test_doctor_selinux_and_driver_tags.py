"""Fix texts for two classes of driver-container failure, from their sources:

- SELinux: the driver container's ``chcon -R -t container_file_t`` of the device files fails where SELinux
  is disabled (NVIDIA/gpu-operator#452, #1489: coreutils chcon's "can't apply partial context to unlabeled
  file" and "failed to get security context of"; NVIDIA: SELinux must be permissive or enforcing), and
  the module load is denied where it enforces (#553: modprobe's "could not insert 'nvidia': Permission
  denied"); device files containers may not open get relabelled container_file_t (nvidia-docker#640);
- a driver image tag the registry lacks: the operator asks for ``<version>-<os tag>``, the OS tag from NFD's
  system-os_release ID and VERSION_ID (major only for rhel; gpu-operator state_manager.go
  getGPUNodeOSInfo), and the fix names that tag and how to provide one."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import crash_looping, diagnosed, no_gpus, plugin_pod

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.doctor.stacks import NVIDIA_CLUSTER_POLICY
from gpuchain.sim.build import SimCluster

RHEL = (
    "name: t\nstack: gpu-operator\n{policy}nodes:\n  - name: r1\n    osImage: Red Hat Enterprise Linux 9.4 (Plow)\n"
    "    kernel: 5.14.0-427.13.1.el9_4.x86_64\n"
    "    labels: {{feature.node.kubernetes.io/system-os_release.ID: rhel, "
    "feature.node.kubernetes.io/system-os_release.VERSION_ID: '9.4'}}\n"
)


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def _driver(node: str, log: str = "", **state: Any) -> dict[str, Any]:
    container = {"name": "nvidia-driver-ctr", **state} if state else crash_looping("nvidia-driver-ctr")
    return {
        "do": "pod",
        "daemonset": "nvidia-driver-daemonset",
        "node": node,
        "containers": [container],
        "logs": {"nvidia-driver-ctr": log},
    }


#: The driver container's lines on a node with SELinux disabled, as NVIDIA/gpu-operator#452 quotes them.
CHCON = (
    "Post-install sanity check passed.\n"
    "Change device files security context for selinux compatibility\n"
    "chcon: can't apply partial context to unlabeled file 'shm'\n"
    "chcon: failed to get security context of 'mqueue': Operation not supported\n"
    "chcon: can't apply partial context to unlabeled file '/run/nvidia/driver/dev'\n"
    "Stopping NVIDIA persistence daemon...\n"
    "Unloading NVIDIA driver kernel modules...\n"
)


def test_chcon_failing_where_selinux_is_disabled_gets_selinux_permissive_on_the_node() -> None:
    report = diagnosed(RHEL.format(policy=""), no_gpus("r1"), _driver("r1", CHCON))
    (root,) = _roots(report)
    assert (root.link, root.node) == ("driver", "r1")
    assert any("coreutils.chcon-unlabeled" in e for e in root.evidence)
    assert root.action is not None and root.action.op is FixOp.NODE
    assert "SELINUX=permissive" in root.fix and "/.autorelabel" in root.fix
    assert "delete pod nvidia-driver-daemonset-" in root.fix
    assert "log.unrecognised" not in report.ids


def test_a_module_load_selinux_denies_gets_permissive_mode_not_secure_boot() -> None:
    log = "Loading NVIDIA driver kernel modules...\nmodprobe: ERROR: could not insert 'nvidia': Permission denied\n"
    (root,) = _roots(diagnosed(RHEL.format(policy=""), no_gpus("r1"), _driver("r1", log)))
    assert root.link == "driver"
    assert any("kmod.insert-permission-denied" in e for e in root.evidence)
    assert "setenforce 0" in root.fix and "Secure Boot" not in root.fix


def test_device_files_containers_may_not_open_get_relabelled_for_containers() -> None:
    crash = crash_looping("nvidia-device-plugin-ctr")
    log = "E0101 00:00:00.000000 1 main.go:1] error starting plugins: nvml init failed: ERROR_NO_PERMISSION\n"
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: h, hostDriver: 550.54.15}\n",
        no_gpus("h"),
        plugin_pod("h", crash, log),
    )
    (root,) = _roots(report)
    assert "chcon -t container_file_t /dev/nvidia*" in root.fix


def _pull(node: str, image: str) -> dict[str, Any]:
    waiting = {"waiting": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
    event = {"reason": "Failed", "message": f'Failed to pull image "{image}": {image}: not found'}
    return {**_driver(node, state=waiting), "events": [event]}


def test_a_pinned_driver_version_not_built_for_the_nodes_os_names_the_tag_and_how_to_provide_it() -> None:
    image = "nvcr.io/nvidia/driver:535.104.05-rhel9"
    policy = "policy: {driver: {version: 535.104.05}}\n"
    (root,) = _roots(diagnosed(RHEL.format(policy=policy), no_gpus("r1"), _pull("r1", image)))
    assert root.action is not None and root.action.changes == {"spec": {"driver": {"version": None}}}
    assert "535.104.05-rhel9" in root.fix and "spec.driver.repository" in root.fix
    assert any("the node's OS tag rhel9" in e for e in root.evidence)


def test_the_default_driver_not_built_for_a_new_os_release_names_the_tag_and_the_versions_to_set() -> None:
    """Before: 'make the image reachable: a tag that exists, the pull secret ...' for every missing tag."""
    image = "nvcr.io/nvidia/driver:535.183.01-ubuntu24.04"
    scenario = (
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: u1, osImage: Ubuntu 24.04.1 LTS, kernel: 6.8.0-45-generic}\n"
    )
    (root,) = _roots(diagnosed(scenario, no_gpus("u1"), _pull("u1", image)))
    assert root.link == "driver"
    assert "535.183.01-ubuntu24.04" in root.fix
    assert "spec.driver.version" in root.fix and "nvcr.io/nvidia/driver:<version>-ubuntu24.04" in root.fix
    assert "imagePullSecrets" not in root.fix


def test_an_os_nvidia_builds_no_driver_for_names_the_tag_to_build() -> None:
    image = "nvcr.io/nvidia/driver:570.124.06-scos4.17"
    scenario = (
        "name: t\nstack: gpu-operator\nnodes:\n  - name: o1\n    osImage: CentOS Stream CoreOS 417.9.202411052033-0\n"
        "    labels: {feature.node.kubernetes.io/system-os_release.ID: scos, "
        "feature.node.kubernetes.io/system-os_release.VERSION_ID: '4.17'}\n"
    )
    (root,) = _roots(diagnosed(scenario, no_gpus("o1"), _pull("o1", image)))
    # CentOS Stream CoreOS is image-based: no driver on the host, a driver image its owners build
    # (test_doctor_driver_image_own_build); a package-managed OS keeps the host's driver first (test_doctor_state_rules).
    assert root.action is None and "enabled" not in root.fix
    assert "build a driver image for scos4.17" in root.fix and "<your registry>/driver:570.124.06-scos4.17" in root.fix
    # the way out is the stack's: no cloud named on a node that is not that cloud's, and the operator's
    # driver OSes as it publishes them (DRIVER_IMAGE_OS), not a list of two
    assert "GKE" not in root.fix and "/home/kubernetes" not in root.fix
    assert "ubuntu, rhel, rhcos, rocky, flatcar, fedora, sles" in root.fix


def test_a_precompiled_driver_missing_for_the_nodes_kernel_names_the_tag_per_kernel() -> None:
    """Precompiled images are tagged <branch>-<kernel>-<os tag> (resolveDriverTag): the kernel is the node's."""
    image = "nvcr.io/nvidia/driver:535-5.15.0-1041-azure-ubuntu22.04"
    scenario = (
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: k1, osImage: Ubuntu 22.04.3 LTS, kernel: 5.15.0-1041-azure}\n"
    )

    def precompiled(sim: SimCluster) -> None:
        # NVIDIA's ClusterPolicy spec.driver.usePrecompiled (gpuchain's own policy has no precompiled drivers).
        policy = sim.cluster.list(NVIDIA_CLUSTER_POLICY)[0]
        patch = {"spec": {"driver": {"usePrecompiled": True, "version": "535"}}}
        sim.cluster.patch(NVIDIA_CLUSTER_POLICY, name=policy["metadata"]["name"], patch=patch)

    (root,) = _roots(diagnosed(scenario, precompiled, no_gpus("k1"), _pull("k1", image)))
    assert root.link == "driver" and root.action is not None
    assert root.action.changes["spec"] == {"driver": {"usePrecompiled": False}}
    assert "535-5.15.0-1041-azure-ubuntu22.04" in root.fix


def test_a_precompiled_tag_for_the_nodes_own_kernel_is_precompiled_whatever_the_policy_shows() -> None:
    """NVIDIA/gpu-operator#1203 (precompiled images for 5.15 kernels only): a policy that does not show
    usePrecompiled still asks for <branch>-<kernel>-<os tag> (resolveDriverTag) of the node's 6.8 kernel; only a
    precompiled image names a kernel, so the fix is the standard driver container, not "make the image reachable"."""
    image = "nvcr.io/nvidia/driver:535-6.8.0-51-generic-ubuntu22.04"
    scenario = (
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: k6, osImage: Ubuntu 22.04.5 LTS, kernel: 6.8.0-51-generic}\n"
    )
    (root,) = _roots(diagnosed(scenario, no_gpus("k6"), _pull("k6", image)))
    assert root.link == "driver" and root.action is not None
    assert root.action.changes["spec"] == {"driver": {"usePrecompiled": False}}
    assert "kernel 6.8.0-51-generic" in root.cause and "spec.driver.version to a full driver version" in root.fix


def test_a_tag_whose_kernel_part_is_not_the_nodes_is_not_read_as_precompiled() -> None:
    """The same tag shape on a node with another kernel, without usePrecompiled: nothing says precompiled, so the
    doctor does not tell the user to turn a setting off that the policy does not show."""
    image = "nvcr.io/nvidia/driver:535-6.8.0-51-generic-ubuntu22.04"
    scenario = "name: t\nstack: gpu-operator\nnodes:\n  - {name: k5, osImage: Ubuntu 22.04.5 LTS, kernel: 5.15.0-126-generic}\n"
    (root,) = _roots(diagnosed(scenario, no_gpus("k5"), _pull("k5", image)))
    assert root.link == "driver" and "usePrecompiled" not in root.fix
