"""Failures that only a log says, each with the repair its reason calls for:

- GPU pods that keep running ready after a systemd reload took their GPUs (runc's systemd cgroup driver and no
  /dev/char links: NVIDIA/nvidia-container-toolkit#48): the gather step reads a ready GPU pod's log on each of a few
  GPU nodes, and the repair is whatever should have made the links -- the GPU Operator's driver validation from
  v22.9.2 (NVIDIA/gpu-operator validator/main.go@v22.9.2 createDevCharSymlinks, its DISABLE_DEV_CHAR_SYMLINK_CREATION
  switch), else nvidia-ctk system create-dev-char-symlinks --create-all (NVIDIA/nvidia-container-toolkit
  cmd/nvidia-ctk/system/create-dev-char-symlinks@v1.12.0) at every boot;
- a GPU pod without its driver beside a device plugin whose DaemonSet asks for a RuntimeClass: the DaemonSet
  controller makes its pods from the template, so the default runtime is not proven to inject the driver and the
  pod's runtime is what it lacks (not an admission without the plugin's allocation);
- the RHEL driver container's dnf finding no kernel-headers / kernel-devel of the node's kernel: on an EUS minor of
  RHEL 9 the AppStream EUS repository that NVIDIA/gpu-driver-container 4fd766a enables, on RHEL 8 the entitlement, on
  a rebuild distribution a kernel its mirror carries, under a repoConfig the mirror it names.

The NVML line is the one NVIDIA/k8s-device-plugin internal/plugin/factory.go@v0.17.1 writes ("Failed to initialize
NVML: %v.") as nvidia-smi prints it in a workload; the dnf lines follow NVIDIA/gpu-driver-container
rhel9/nvidia-driver@06a208c's install command and dnf's "Unable to find a match" (rpm-software-management/dnf
dnf/cli/commands/install.py@4.24.0). Node names, kernels, versions and pod names are made up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doctor.small_cluster import built, crash_looping, diagnosed
from sim.heldout3.harness import _apply

from gpuchain.doctor.model import Finding, FixOp, Report, Severity
from gpuchain.doctor.ready_gpu_logs import MAX_READY_LOGS, ready_gpu_samples
from gpuchain.doctor.snapshot import gather, with_logs
from gpuchain.doctor.stacks import NVIDIA_CLUSTER_POLICY
from gpuchain.kube.objects import name_of
from gpuchain.sim.build import SimCluster

LOST = "Failed to initialize NVML: Unknown Error"
OPERATOR = (
    "name: t\nstack: gpu-operator\nnodes:\n"
    "  - {name: dgx-07, preset: l4-x2, osImage: Ubuntu 24.04.1 LTS, kernel: 6.8.0-49-generic}\n"
    "  - {name: dgx-08, preset: l4-x2, osImage: Ubuntu 24.04.1 LTS, kernel: 6.8.0-49-generic}\n"
    "workloads:\n  - {name: infer, namespace: serving, count: 2, node: dgx-07}\n"
    "  - {name: batch, namespace: jobs, count: 2, node: dgx-08}\n"
)


def _ready_with_log(name: str, node: str, namespace: str, text: str) -> dict[str, Any]:
    """An edit: the workload pod ``name``-* on ``node`` running ready with no restart, ``text`` in its log."""
    return {
        "do": "pod",
        "daemonset": name,
        "namespace": namespace,
        "node": node,
        "containers": [{"name": "main", "ready": True, "restarts": 0, "state": {"running": True}}],
        "logs": {"main": text},
    }


def _policy(patch: dict[str, Any]) -> Callable[[SimCluster], None]:
    """An edit: the ClusterPolicy merged with ``patch``."""

    def edit(sim: SimCluster) -> None:
        (policy,) = sim.cluster.list(NVIDIA_CLUSTER_POLICY)
        sim.cluster.patch(NVIDIA_CLUSTER_POLICY, name=name_of(policy), patch=patch)

    return edit


def _operator_release(version: str) -> Callable[[SimCluster], None]:
    """An edit: the ClusterPolicy as Helm labels it from the gpu-operator chart at ``version``."""
    labels = {"helm.sh/chart": f"gpu-operator-{version}", "app.kubernetes.io/instance": "gpu-operator"}
    return _policy({"metadata": {"labels": labels}})


def _found(report: Report, fid: str) -> list[Finding]:
    return [f for f in report.findings if f.id == fid]


def test_a_ready_pod_that_lost_its_gpus_is_read_and_gets_the_links_the_operator_makes() -> None:
    # A pod whose GPUs a systemd reload took stays Running and ready: only its log says so.
    report = diagnosed(OPERATOR, _ready_with_log("infer", "dgx-07", "serving", f"step 41 ok\n{LOST}\n{LOST}\n"))
    (lost,) = _found(report, "workload.nvml-lost")
    assert (lost.link, lost.node, lost.severity) == ("toolkit", "dgx-07", Severity.ERROR)
    assert "create-dev-char-symlinks --create-all" in lost.fix and "udev" in lost.fix
    assert "drain" not in lost.fix and "serving infer-0" in lost.fix
    # The operator of this cluster makes the links from v22.9.2: an older one is upgraded first.
    old = diagnosed(OPERATOR, _operator_release("v22.9.1"), _ready_with_log("infer", "dgx-07", "serving", f"{LOST}.\n"))
    (aged,) = _found(old, "workload.nvml-lost")
    assert "v22.9.2" in aged.fix and "GPU Operator" in aged.fix
    assert any("release: gpu-operator.systemd-cgroup-device-access" in e for e in aged.evidence)


def test_a_policy_that_turns_the_validators_links_off_is_turned_back_on() -> None:
    env = [{"name": "DISABLE_DEV_CHAR_SYMLINK_CREATION", "value": "true"}, {"name": "WITH_WAIT", "value": "true"}]
    report = diagnosed(
        OPERATOR,
        _policy({"spec": {"validator": {"driver": {"env": env}}}}),
        _ready_with_log("batch", "dgx-08", "jobs", f"{LOST}\n"),
    )
    (lost,) = _found(report, "workload.nvml-lost")
    assert lost.node == "dgx-08" and lost.action is not None and lost.action.op is FixOp.PATCH_POLICY
    assert lost.action.changes["spec"]["validator"]["driver"]["env"] == [{"name": "WITH_WAIT", "value": "true"}]
    assert "DISABLE_DEV_CHAR_SYMLINK_CREATION" in lost.fix


def test_a_readiness_probe_that_runs_nvidia_smi_says_it_for_a_pod_whose_log_does_not() -> None:
    # The server's log stays quiet; its exec probe (nvidia-smi) fails, and the kubelet's Unhealthy Event quotes it
    # (shaped after tests/sim/heldout57 h57-03: the toolkit's troubleshooting page, Triton on an L4 node).
    probe = {
        "do": "pod",
        "daemonset": "infer",
        "namespace": "serving",
        "node": "dgx-07",
        "containers": [{"name": "main", "ready": False, "restarts": 0, "state": {"running": True}}],
        "logs": {"main": "I1102 serving on 0.0.0.0:8000\n"},
        "events": [{"reason": "Unhealthy", "count": 90, "message": f"Readiness probe failed: {LOST}"}],
    }
    (lost,) = _found(diagnosed(OPERATOR, probe), "workload.nvml-lost")
    assert lost.node == "dgx-07" and "or their probes saying it" in lost.evidence[0]
    assert "create-dev-char-symlinks --create-all" in lost.fix
    # A probe that fails for another reason is not read as lost GPUs.
    other = {**probe, "events": [{"reason": "Unhealthy", "message": "Readiness probe failed: HTTP 503"}]}
    assert not _found(diagnosed(OPERATOR, other), "workload.nvml-lost")


def test_ready_gpu_pods_that_say_nothing_of_nvml_stay_quiet() -> None:
    report = diagnosed(OPERATOR, _ready_with_log("infer", "dgx-07", "serving", "step 41 ok\nNVML initialised\n"))
    assert not _found(report, "workload.nvml-lost")
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_one_ready_gpu_pod_per_gpu_node_is_read_and_no_more_than_a_few_nodes() -> None:
    nodes = "".join(f"  - {{name: g{i}, preset: l4-x2}}\n" for i in range(MAX_READY_LOGS + 2))
    pods = "".join(f"  - {{name: w{i}, namespace: apps, count: 2, node: g{i}}}\n" for i in range(MAX_READY_LOGS + 2))
    sim = built(f"name: t\nstack: gpu-operator\nnodes:\n{nodes}workloads:\n{pods}")
    snapshot = gather(sim.cluster)
    picked = ready_gpu_samples(snapshot.pods, snapshot.nodes, skip=("gpu-operator", "kube-system"))
    assert [key[1] for key, _ in picked] == [f"w{i}-0" for i in range(MAX_READY_LOGS)]
    # A probe: read, and kept only where it says the GPU was lost.
    said = {key[1]: LOST if key[1] == "w1-0" else "serving\n" for key, _ in picked}
    probed, reads = with_logs(snapshot, reader=lambda ns, pod, c, previous=False: said.get(pod))
    assert reads >= MAX_READY_LOGS and [key[1] for key in probed.logs] == ["w1-0"]
    # The stack's own pods are read by the operand rules, not as users' GPU pods.
    assert not ready_gpu_samples(snapshot.pods, snapshot.nodes, skip=("apps",))


def test_a_plugin_whose_daemonset_asks_for_a_runtime_class_leaves_the_pods_runtime_the_cause() -> None:
    # The plugin's pod predates its DaemonSet's RuntimeClass: the template says how the cluster runs it.
    scenario = (
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: edge-3, preset: t4-x4}\n"
        "workloads:\n  - {name: tune, namespace: lab, count: 2, node: edge-3}\n"
    )
    template = {
        "do": "daemonset",
        "namespace": "kube-system",
        "name": "nvidia-device-plugin-daemonset",
        "spec": {"template": {"spec": {"runtimeClassName": "nvidia"}}},
    }
    # PyTorch's words for a container without libcuda.so.1 (pytorch/pytorch c10/cuda/CUDAFunctions.cpp, catalog.yaml).
    said = "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU"
    unready = {
        "do": "pod",
        "daemonset": "tune",
        "namespace": "lab",
        "node": "edge-3",
        "containers": [{"name": "main", "ready": False, "restarts": 2, "state": {"running": True}}],
        "logs": {"main": said},
    }

    def classed(sim: SimCluster) -> None:
        _apply(sim.cluster, template)

    report = diagnosed(scenario, classed, unready)
    assert not _found(report, "node.pod-admitted-without-device")
    (no_driver,) = _found(report, "workload.no-driver-in-pod")
    assert no_driver.link == "toolkit" and "runtimeClassName" in no_driver.fix
    # Without the template's class the same pod was admitted without the plugin's allocation.
    assert _found(diagnosed(scenario, unready), "node.pod-admitted-without-device")


def _rhel(os_image: str, kernel: str) -> str:
    return (
        "name: t\nstack: gpu-operator\n"
        f"driverBuilds: [{kernel}-none]\nnodes:\n"
        f"  - {{name: rh-gpu-2, preset: a100-40gb-x8, osImage: {os_image}, kernel: {kernel}}}\n"
    )


def _dnf_refused(kernel: str, release: str) -> dict[str, Any]:
    """An edit: the driver container crash-looping after dnf found no headers of ``kernel``."""
    log = (
        f"Proceeding with Linux kernel version {kernel}\nInstalling Linux kernel headers...\n"
        f"+ dnf -q -y --releasever={release} install kernel-headers-{kernel} kernel-devel-{kernel}\n"
        f"Error: Unable to find a match: kernel-headers-{kernel} kernel-devel-{kernel}\n"
    )
    return {
        "do": "pod",
        "daemonset": "nvidia-driver-daemonset",
        "namespace": "gpu-operator",
        "node": "rh-gpu-2",
        "containers": [crash_looping("nvidia-driver-ctr", 6)],
        "logs": {"nvidia-driver-ctr": log},
    }


def _driver_root(report: Report) -> Finding:
    (root,) = [f for f in report.findings if f.root and f.link == "driver"]
    return root


def test_an_eus_kernel_of_rhel9_needs_the_driver_image_that_enables_appstream_eus() -> None:
    kernel = "5.14.0-427.50.1.el9_4.x86_64"
    root = _driver_root(diagnosed(_rhel("Red Hat Enterprise Linux 9.4 (Plow)", kernel), _dnf_refused(kernel, "9.4")))
    assert root.node == "rh-gpu-2" and "rhel-9-for-x86_64-appstream-eus-rpms" in root.fix and "4fd766a" in root.fix
    assert f"kernel-devel-{kernel}" in root.fix and "repoConfig.configMapName" in root.fix
    assert "9.4" in root.cause


def test_headers_missing_elsewhere_get_their_own_reason() -> None:
    rhel8 = "4.18.0-553.22.1.el8_10.x86_64"
    root = _driver_root(diagnosed(_rhel("Red Hat Enterprise Linux 8.10 (Ootpa)", rhel8), _dnf_refused(rhel8, "8.10")))
    assert "entitlement" in root.fix and "appstream-eus" not in root.fix
    rocky = "5.14.0-503.14.1.el9_5.x86_64"
    root = _driver_root(diagnosed(_rhel("Rocky Linux 9.5 (Blue Onyx)", rocky), _dnf_refused(rocky, "9.5")))
    assert "mirror carries" in root.fix and "appstream-eus" not in root.fix and "entitlement" not in root.fix
    mirrored = _policy({"spec": {"driver": {"repoConfig": {"configMapName": "site-rpms"}}}})
    scenario = _rhel("Red Hat Enterprise Linux 9.4 (Plow)", "5.14.0-427.50.1.el9_4.x86_64")
    root = _driver_root(diagnosed(scenario, mirrored, _dnf_refused("5.14.0-427.50.1.el9_4.x86_64", "9.4")))
    assert "ConfigMap site-rpms" in root.fix and "appstream-eus" not in root.fix


def test_a_dnf_miss_that_names_no_kernel_package_keeps_the_catalogs_words() -> None:
    kernel = "5.14.0-427.50.1.el9_4.x86_64"
    other = _dnf_refused(kernel, "9.4")
    other["logs"] = {"nvidia-driver-ctr": "+ dnf -q -y install elfutils-libelf-devel\nError: Unable to find a match\n"}
    root = _driver_root(diagnosed(_rhel("Red Hat Enterprise Linux 9.4 (Plow)", kernel), other))
    assert "appstream-eus" not in root.fix and "4fd766a" not in root.fix


def test_a_release_the_node_has_left_is_named_before_the_repositories() -> None:
    # The operator asks dnf for the release it derived at install; the node was upgraded since (NVIDIA/gpu-operator#190).
    kernel = "4.18.0-477.27.1.el8_8.x86_64"
    scenario = _rhel("Red Hat Enterprise Linux 8.8 (Ootpa)", kernel)
    root = _driver_root(diagnosed(scenario, _dnf_refused(kernel, "8.6")))
    assert "RHEL_VERSION=8.8" in root.fix and "re-create the ClusterPolicy" in root.fix and "8.6" in root.cause
    # The same release as the kernel's: not this reason.
    same = _driver_root(diagnosed(scenario, _dnf_refused(kernel, "8.8")))
    assert "RHEL_VERSION" not in same.fix
