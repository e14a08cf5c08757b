"""Classes of failure on the lower links (driver, toolkit/runtime) read from the components' source and from pod and
node state (issue 26): each on a small simulated cluster edited the way the components leave it, with the link it
names and a fix that repairs. The upstream facts each test stands on are named in it."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed, gke_installer_on, no_gpus
from sim.heldout3.harness import _apply

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.doctor.node_image import os_tag

CRASH = {"waiting": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"}


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def _operator(*nodes: str, policy: str = "{}") -> str:
    return "name: t\nstack: gpu-operator\npolicy: " + policy + "\nnodes:\n" + "".join(f"  - {n}\n" for n in nodes)


def _driver_crash(node: str, log: str, container: str = "nvidia-driver-ctr") -> dict[str, Any]:
    return {
        "do": "pod",
        "daemonset": "nvidia-driver-daemonset",
        "node": node,
        "containers": [{"name": container, "restarts": 5, "state": CRASH, "last": {"terminated": "Error"}}],
        "logs": {container: log},
    }


# -- the driver manager's MOFED wait ------------------------------------------------------------------------------

#: NVIDIA/k8s-driver-manager cmd/driver-manager/main.go (waitForMofedDriver): "Waiting for MOFED to be installed",
#: then the same with "..." every 5 seconds until its check passes, at info level.
MOFED_LOG = (
    'level=info msg="Waiting for MOFED to be installed"\nlevel=info msg="Waiting for MOFED to be installed..."\n'
)


def _held_in_manager(node: str) -> dict[str, Any]:
    return {
        "do": "pod",
        "daemonset": "nvidia-driver-daemonset",
        "node": node,
        "init": [{"name": "k8s-driver-manager", "state": {"running": True}}],
        "logs": {"k8s-driver-manager": MOFED_LOG},
    }


def _mofed_wait(host_mofed: bool) -> Finding:
    """The one root finding of an operator node with RDMA on (MOFED from the host or not) held in that wait."""
    rdma = {"do": "policy", "spec": {"driver": {"rdma": {"enabled": True, "useHostMofed": host_mofed}}}}
    report = diagnosed(
        _operator("{name: n1, preset: a100-80gb-x8}"),
        lambda s: _apply(s.cluster, rdma),
        _held_in_manager("n1"),
        no_gpus("n1"),
    )
    (root,) = _roots(report)
    return root


def test_a_driver_held_by_the_managers_host_mofed_wait_names_the_manager_release_and_the_rdma_key() -> None:
    root = _mofed_wait(True)
    assert (root.link, root.node) == ("driver", "n1")
    assert "catalog: k8s-driver-manager.waiting-for-mofed (NVIDIA/k8s-driver-manager " in " ".join(root.evidence)
    assert "spec.driver.manager.version" in root.fix and "useHostMofed=false" in root.fix
    assert "mlx5_core" in root.cause


def test_the_same_wait_for_the_network_operators_mofed_asks_for_that_mofed_not_a_manager_release() -> None:
    root = _mofed_wait(False)
    assert root.link == "driver" and "network operator" in root.fix and "useHostMofed=true" in root.fix
    assert "manager.version" not in root.fix


# -- nvidia-installer without the package's kernel files, with nouveau loaded -------------------------------------

#: NVIDIA/nvidia-installer files.c copy_file: "Unable to open '%s' for copying (%s)", printed with ERROR: by ui_error.
DKMS = "Installing NVIDIA driver kernel modules...\nERROR: Unable to open 'kernel/dkms.conf' for copying (No such file or directory)\n"


def test_missing_kernel_files_are_nouveau_even_where_other_nodes_run_the_driver_on_another_kernel() -> None:
    report = diagnosed(
        _operator(
            "{name: a, preset: t4-x4, kernel: 5.15.0-105-generic}",
            "{name: b, preset: t4-x4, kernel: 4.15.0-66-generic}",
        ),
        _driver_crash("b", DKMS),
        no_gpus("b"),
    )
    (root,) = _roots(report)
    assert (root.id, root.node) == ("driver.not-ready", "b")
    assert "nouveau" in root.fix and "update-initramfs" in root.fix
    assert "catalog: nvidia-installer.kernel-files-missing" in " ".join(root.evidence)
    assert "log.unrecognised" not in report.ids


# -- an RHCOS kernel the driver container finds no headers for ----------------------------------------------------

#: NVIDIA/gpu-driver-container's driver script: "Could not resolve Linux kernel version" (catalog
#: driver-container.kernel-unresolved).
UNRESOLVED = "Resolving Linux kernel version...\nCould not resolve Linux kernel version\n"


def test_rhcos_builds_before_410_read_as_their_openshift_release() -> None:
    def node(image: str) -> dict[str, Any]:
        return {"status": {"nodeInfo": {"osImage": image}}}

    assert os_tag(node("Red Hat Enterprise Linux CoreOS 46.82.202101191342-0 (Ootpa)")) == "rhcos4.6"
    assert os_tag(node("Red Hat Enterprise Linux CoreOS 416.94.202410211619-0")) == "rhcos4.16"


def test_an_rhcos_kernel_without_headers_is_repaired_by_the_operator_not_by_a_reimage() -> None:
    report = diagnosed(
        _operator(
            "{name: w, preset: t4-x4, osImage: 'Red Hat Enterprise Linux CoreOS 47.83.202103251640-0 (Ootpa)', "
            "kernel: 4.18.0-240.22.1.el8_3.x86_64}"
        ),
        _driver_crash("w", UNRESOLVED),
        no_gpus("w"),
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("driver.kernel-mismatch", "driver")
    assert root.fix.startswith("# upgrade the GPU Operator") and "Driver Toolkit" in root.fix
    assert root.action is None and "reimage" not in root.fix


def test_a_kernel_without_headers_elsewhere_is_still_a_reimage() -> None:
    report = diagnosed(
        _operator("{name: w, preset: t4-x4, osImage: Ubuntu 22.04.4 LTS, kernel: 6.5.0-1024-custom}"),
        _driver_crash("w", UNRESOLVED),
        no_gpus("w"),
    )
    (root,) = _roots(report)
    assert root.action is not None and root.action.op is FixOp.NODE and "reimage" in root.fix


# -- a driver image missing for a new OS release ------------------------------------------------------------------


def test_a_driver_tag_missing_for_the_nodes_os_names_the_operator_release_that_adds_it() -> None:
    tag = "535.161.08-ubuntu24.04"
    report = diagnosed(
        _operator("{name: u, preset: l4-x2, osImage: Ubuntu 24.04.1 LTS}", policy="{driver: {version: 535.161.08}}"),
        {
            "do": "pod",
            "daemonset": "nvidia-driver-daemonset",
            "node": "u",
            "phase": "Pending",
            "containers": [
                {
                    "name": "nvidia-driver-ctr",
                    "state": {
                        "waiting": "ImagePullBackOff",
                        "message": f'Back-off pulling image "nvcr.io/nvidia/driver:{tag}"',
                    },
                }
            ],
        },
        no_gpus("u"),
    )
    (root,) = _roots(report)
    assert root.link == "driver" and "upgrade the GPU Operator to a release whose supported OSes list it" in root.fix


# -- a host driver the operator's driver container meets ----------------------------------------------------------

#: NVIDIA/k8s-driver-manager and gpu-driver-container: "Could not unload NVIDIA driver kernel modules, driver is in
#: use" (catalog driver-container.unload-in-use).
IN_USE = "Could not unload NVIDIA driver kernel modules, driver is in use\n"


def test_a_host_driver_conflict_says_to_use_the_host_driver_with_driver_enabled_false() -> None:
    report = diagnosed(_operator("{name: h, preset: t4-x4}"), _driver_crash("h", IN_USE), no_gpus("h"))
    (root,) = _roots(report)
    assert root.id == "driver.host-driver-conflict"
    assert "use the host driver" in root.fix and "driver.enabled=false" in root.fix


def test_a_node_labelled_pre_installed_whose_validator_proved_the_driver_has_no_driver_finding() -> None:
    report = diagnosed(
        _operator("{name: p, preset: t4-x4, hostDriver: 570.124.06}"),
        {"do": "node", "node": "p", "labels": {"nvidia.com/gpu.deploy.driver": "pre-installed"}},
        _driver_crash("p", IN_USE),
        {
            "do": "pod",
            "daemonset": "nvidia-operator-validator",
            "node": "p",
            "init": [{"name": "driver-validation", "state": {"terminated": "Completed", "exitCode": 0}}],
        },
    )
    assert not [f for f in report.findings if f.link == "driver" and f.severity is Severity.ERROR]


# -- GKE's driver installer ---------------------------------------------------------------------------------------


GKE = "name: t\nstack: gke\nnodes:\n  - {name: gke-p-pool-0, preset: t4-x4, osImage: Container-Optimized OS from Google}\n"


def _gke_installer(log: str | None) -> list[Any]:
    node = "gke-p-pool-0"
    pod: dict[str, Any] = {
        "do": "pod",
        "daemonset": "nvidia-driver-installer",
        "namespace": "kube-system",
        "node": node,
        "phase": "Pending",
        "init": [{"name": "nvidia-driver-installer", "restarts": 9, "state": CRASH, "last": {"terminated": "Error"}}],
    }
    if log is not None:
        pod["logs"] = {"nvidia-driver-installer": log}
    return [
        {"do": "node", "node": node, "labels": {"cloud.google.com/gke-gpu-driver-version": None}},
        gke_installer_on(node),
        pod,
        no_gpus(node),
    ]


def test_gkes_installer_refusing_to_replace_its_install_dir_names_the_directory_to_remove() -> None:
    """coreutils src/ln.c: "%s: cannot overwrite directory"; GKE's installer links /home/kubernetes/bin/nvidia."""
    edits = _gke_installer(
        "Verifying Nvidia installation... DONE.\nln: /root/home/kubernetes/bin/nvidia: cannot overwrite directory\n"
    )
    report = diagnosed(GKE, *edits)
    (root,) = _roots(report)
    assert root.link == "driver" and "rm -rf /home/kubernetes/bin/nvidia" in root.fix
    assert "catalog: gke-driver-installer.install-dir-exists (coreutils/coreutils src/ln.c@" in " ".join(root.evidence)


def test_gkes_installer_failing_silently_is_told_to_move_to_the_installer_release_of_the_nodes_milestone() -> None:
    report = diagnosed(GKE, *_gke_installer(None))
    (root,) = _roots(report)
    assert root.link == "driver" and "update the driver installer DaemonSet's image" in root.fix


# -- the toolkit's config and the node's runtime ------------------------------------------------------------------

#: pelletier/go-toml's parse error at a Go template's '{{' (catalog nvidia-container-toolkit.load-config).
TEMPLATE = 'level=fatal msg="Error: unable to load config: failed to load config: (1, 1): parsing error: keys cannot contain { character"\n'


def test_a_template_config_on_a_node_that_names_no_distribution_names_k3s_and_rke2_rendered_files() -> None:
    report = diagnosed(
        _operator("{name: r, preset: t4-x4}"),
        {
            "do": "pod",
            "daemonset": "nvidia-container-toolkit-daemonset",
            "node": "r",
            "containers": [
                {"name": "nvidia-container-toolkit-ctr", "restarts": 3, "state": CRASH, "last": {"terminated": "Error"}}
            ],
            "logs": {"nvidia-container-toolkit-ctr": TEMPLATE},
        },
    )
    (root,) = [f for f in _roots(report) if f.link == "toolkit"]
    assert "CONTAINERD_CONFIG=/var/lib/rancher/rke2/agent/etc/containerd/config.toml" in root.fix
    assert "CONTAINERD_CONFIG=/var/lib/rancher/k3s/agent/etc/containerd/config.toml" in root.fix


#: NVIDIA/k8s-device-plugin internal/plugin/manager/factory.go: "Incompatible platform detected" after go-nvlib's
#: "could not load NVML library".
NO_NVML = (
    "I0101 00:00:00.000000       1 factory.go:104] Detected non-NVML platform: could not load NVML library: "
    "libnvidia-ml.so.1: cannot open shared object file: No such file or directory\n"
    "E0101 00:00:00.000000       1 factory.go:112] Incompatible platform detected\n"
)


def _plugin_without_nvml(*nodes: str, failing: str) -> Report:
    """An EKS cluster of ``nodes`` (l4-x2) whose plugin on ``failing`` crash-loops without NVML."""
    scenario = "name: t\nstack: eks\nnodes:\n" + "".join(f"  - {{name: {n}, preset: l4-x2}}\n" for n in nodes)
    crash = {"name": "nvidia-device-plugin-ctr", "restarts": 4, "state": CRASH, "last": {"terminated": "Error"}}
    plugin = {
        "do": "pod",
        "daemonset": "nvidia-device-plugin-daemonset",
        "node": failing,
        "containers": [crash],
        "logs": {"nvidia-device-plugin-ctr": NO_NVML},
    }
    return diagnosed(scenario, plugin, no_gpus(failing))


def test_a_plugin_without_nvml_stays_the_node_image_even_where_another_node_of_its_os_image_serves_gpus() -> None:
    """EKS's standard and accelerated AMIs report the same osImage (awslabs/amazon-eks-ami#1817: the standard
    AL2023 AMI, no driver, beside GPU nodes that serve), so another serving node of that osImage does not prove
    this node's image carries the driver: the plugin without NVML stays the node image's, alone or not."""
    for nodes in (("e1", "e2"), ("e2",)):
        (root,) = _roots(_plugin_without_nvml(*nodes, failing="e2"))
        assert root.link == "driver", nodes


#: go-nvml's text for NVML_ERROR_LIB_RM_VERSION_MISMATCH (catalog nvml.version-mismatch), as the device plugin logs it.
MISMATCH = "E0101 00:00:00.000000       1 main.go:132] error starting plugins: failed to initialize NVML: Driver/library version mismatch\n"


def test_a_driver_mismatch_on_a_managed_image_that_carries_the_driver_names_the_pools_node_image() -> None:
    node = "aks-gpu-1-vmss000000"
    report = diagnosed(
        f"name: t\nstack: aks\nnodes:\n  - {{name: {node}, preset: t4-x4}}\n",
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "node": node,
            "containers": [
                {"name": "nvidia-device-plugin-ctr", "restarts": 6, "state": CRASH, "last": {"terminated": "Error"}}
            ],
            "logs": {"nvidia-device-plugin-ctr": MISMATCH},
        },
        no_gpus(node),
    )
    (root,) = _roots(report)
    assert (root.id, root.node) == ("driver.version-mismatch", node)
    assert "reboot the node" in root.fix and "--node-image-only" in root.fix


def test_a_toolkit_that_logged_no_error_on_the_drop_in_release_pair_reads_its_config_from_the_file() -> None:
    """containerd 2.3 dumps config version 4; the toolkit from v1.18.0 writes its drop-in at the dumped version
    (NVIDIA/gpu-operator#2646's repair: RUNTIME_CONFIG_SOURCE=file)."""
    report = diagnosed(
        _operator(
            "{name: c, preset: a100-80gb-x8, containerRuntime: 'containerd://2.3.2'}",
            policy="{toolkit: {version: v1.18.1}}",
        ),
        {
            "do": "pod",
            "daemonset": "nvidia-container-toolkit-daemonset",
            "node": "c",
            "containers": [
                {
                    "name": "nvidia-container-toolkit-ctr",
                    "restarts": 40,
                    "state": CRASH,
                    "last": {"terminated": "Error", "exitCode": 255},
                }
            ],
            "logs": {"nvidia-container-toolkit-ctr": 'level=info msg="Waiting for signal"\n'},
        },
    )
    (root,) = [f for f in _roots(report) if f.link == "toolkit"]
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert {"name": "RUNTIME_CONFIG_SOURCE", "value": "file"} in root.action.changes["spec"]["toolkit"]["env"]


# -- a kubelet whose DevicePlugins gate is off by default ---------------------------------------------------------


def _old_kubelet(version: str, gpus: bool) -> Report:
    node = {"do": "node", "node": "k", "nodeInfo": {"kubeletVersion": version}}
    if not gpus:
        node |= {"capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}}
    return diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: k, preset: t4-x4, hostDriver: '390.48'}\n", node
    )


def test_a_kubelet_before_110_listing_no_gpu_under_a_device_plugin_is_the_node_with_the_feature_gate() -> None:
    """kubernetes pkg/features/kube_features.go@v1.8.0: DevicePlugins alpha, default false (beta, on, from 1.10)."""
    (root,) = _roots(_old_kubelet("v1.9.11", gpus=False))
    assert (root.id, root.link, root.node) == ("node.device-plugins-disabled", "node", "k")
    assert "--feature-gates=DevicePlugins=true" in root.fix and "restart kubelet" in root.fix


def test_the_gate_is_no_finding_where_the_kubelet_lists_gpus_or_is_110_or_later() -> None:
    assert "node.device-plugins-disabled" not in _old_kubelet("v1.9.11", gpus=True).ids
    assert "node.device-plugins-disabled" not in _old_kubelet("v1.10.0", gpus=False).ids


def test_an_openshift_3_kubelet_gets_its_node_config_gate_and_the_containerised_kubelets_plugin_mount() -> None:
    """OpenShift 3.x kubelets report the origin commit after the release (v1.9.1+<hash>); their flags are
    node-config.yaml's kubeletArguments and a containerised node service sees only the host paths it mounts."""
    (root,) = _roots(_old_kubelet("v1.9.1+0123abcd45", gpus=False))
    assert root.id == "node.device-plugins-disabled" and "kubeletArguments" in root.fix
    assert "-v /var/lib/kubelet/device-plugins/:/var/lib/kubelet/device-plugins/" in root.fix
    assert "KUBELET_EXTRA_ARGS" not in root.fix
