"""Classes of failure the doctor missed on clusters it had never seen (issue 26), each rule on a small
simulated cluster edited the way the real components leave it: the link the finding names, and a fix
that acts. Log lines are the components' own (their catalog entries name the source); pod states are
as the kubelet writes them (k8s.io/api core/v1 ContainerStateWaiting/Terminated)."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed, no_gpus, plugin_pod

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Report

PLUGIN = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: m, preset: a100-80gb-x8, hostDriver: 550.54.15}\n"
NO_GPU = no_gpus("m")
CRASH = {
    "name": "nvidia-device-plugin-ctr",
    "restarts": 6,
    "state": {"waiting": "CrashLoopBackOff"},
    "last": {"terminated": "Error"},
}


def _roots(report: Report) -> list[Any]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def _plugin_log(text: str) -> dict[str, Any]:
    return plugin_pod("m", CRASH, text)


def test_the_newer_plugins_no_mig_devices_configured_error_is_the_mig_link_too() -> None:
    # NVIDIA/k8s-device-plugin internal/rm/device_map.go@v0.17.1, wrapped in "invalid MIG configuration".
    log = (
        "E0101 00:00:00.000000 1 main.go:1] error starting plugins: error getting plugins: failed to construct "
        "NVML resource managers: error building device map: invalid MIG configuration: at least one device with "
        "migEnabled=true was not configured correctly: device 2 has no MIG devices configured\n"
    )
    (root,) = _roots(diagnosed(PLUGIN, NO_GPU, _plugin_log(log)))
    assert (root.id, root.link) == ("mig.no-instances", "mig")


def test_a_mig_layout_that_does_not_fit_the_single_strategy_is_filed_under_mig() -> None:
    log = "E0101 00:00:00.000000 1 main.go:1] invalid MIG configuration: all devices must have the same MIG profile\n"
    (root,) = _roots(diagnosed(PLUGIN, NO_GPU, _plugin_log(log)))
    assert (root.id, root.link) == ("mig.invalid-for-strategy", "mig")
    assert "MIG_STRATEGY" in root.fix


def test_the_plugins_exit_line_when_nvml_cannot_load_is_known_not_unrecognised() -> None:
    # NVIDIA/k8s-device-plugin internal/plugin/manager/factory.go@v0.16.2 (failOnInitError: the exit error only).
    log = (
        "E0101 00:00:00.000000 1 main.go:1] error starting plugins: error creating plugin manager: "
        "unable to create plugin manager: nvml init failed: ERROR_LIBRARY_NOT_FOUND\n"
    )
    report = diagnosed(PLUGIN, NO_GPU, _plugin_log(log))
    assert not [f for f in report.findings if f.id == "log.unrecognised"]
    (root,) = _roots(report)
    assert root.link == "toolkit" and "catalog: k8s-device-plugin.nvml-init-failed-exit" in " ".join(root.evidence)


#: runc's refusal as containerd reports it and the kubelet keeps it (lastState.terminated, reason StartError):
#: runc libcontainer "unable to start container process" quoting Go's os/exec ErrNotFound.
NO_BINARY = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: "
    'unable to start container process: exec: "{}": executable file not found in $PATH: unknown'
)


def test_a_plugin_container_whose_image_lacks_its_command_names_the_chart_and_image_releases() -> None:
    from gpuchain.kube import DAEMONSET

    def chart_labels(sim: Any) -> None:
        # NVIDIA/k8s-device-plugin deployments/helm/nvidia-device-plugin/templates/_helpers.tpl (labels).
        labels = {
            "helm.sh/chart": "nvidia-device-plugin-0.17.1",
            "app.kubernetes.io/instance": "gpu",
            "app.kubernetes.io/version": "0.17.1",
        }
        sim.cluster.patch(
            DAEMONSET,
            name="nvidia-device-plugin-daemonset",
            patch={"metadata": {"labels": labels}},
            namespace="kube-system",
        )

    start_error = {
        "name": "nvidia-device-plugin-ctr",
        "restarts": 3,
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "StartError", "exitCode": 128, "message": NO_BINARY.format("nvidia-device-plugin")},
    }
    report = diagnosed(
        PLUGIN,
        chart_labels,
        NO_GPU,
        plugin_pod("m", start_error),
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("device-plugin", "m")
    assert any("executable file not found in $PATH" in e for e in root.evidence)
    assert "no log line" not in root.cause and "delete pod" not in root.fix
    assert root.fix.startswith(
        "helm upgrade gpu nvdp/nvidia-device-plugin -n kube-system --reuse-values --set image.tag=v0.17.1"
    )


def test_an_operator_operand_whose_image_lacks_its_command_goes_back_to_the_operators_version() -> None:
    start_error = {
        "name": "gpu-feature-discovery",
        "restarts": 2,
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "StartError", "exitCode": 128, "message": NO_BINARY.format("gpu-feature-discovery")},
    }
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n  - {name: n2}\n",
        {"do": "pod", "daemonset": "gpu-feature-discovery", "node": "n2", "containers": [start_error]},
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("gfd", "n2")
    assert root.action is not None and root.action.changes == {"spec": {"gfd": {"version": None}}}


def test_a_plugin_without_a_sandbox_on_a_node_whose_runtime_no_toolkit_touches_is_the_node() -> None:
    # The kubelet's Event (kuberuntime_manager.go "Failed to create pod sandbox: %v") around containerd's
    # CNI error (containernetworking/cni pkg/invoke/find.go "failed to find plugin %q in path %s").
    event = (
        'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "51ab": '
        'plugin type="cilium-cni" failed (add): failed to find plugin "cilium-cni" in path [/usr/libexec/cni]'
    )
    pod = {
        "do": "pod",
        "daemonset": "nvidia-device-plugin-daemonset",
        "node": "m",
        "containers": [{"name": "nvidia-device-plugin-ctr", "state": {"waiting": "ContainerCreating"}}],
        "events": [{"reason": "FailedCreatePodSandBox", "message": event, "count": 12}],
    }
    (root,) = _roots(diagnosed(PLUGIN, NO_GPU, pod))
    assert (root.id, root.link, root.node) == ("node.sandbox-failed", "node", "m")
    assert "the toolkit rewrote" not in root.fix and "bin_dir" in root.fix


#: containerd's words when it cannot pull the sandbox image (containerd pkg/cri/sbserver/sandbox_run.go@v1.7.23
#: "failed to get sandbox image %q: %w"), under the kubelet's Event, for the image containerd uses when its config
#: names none.
PAUSE_REFUSED = (
    "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox image "
    '"registry.k8s.io/pause:3.8": failed to pull image "registry.k8s.io/pause:3.8": failed to pull and unpack image '
    '"registry.k8s.io/pause:3.8": failed to resolve reference "registry.k8s.io/pause:3.8": failed to do request: '
    'Head "https://registry.k8s.io/v2/pause/manifests/3.8": dial tcp 34.96.108.209:443: i/o timeout'
)


def _no_sandbox(node: str, event: str) -> dict[str, Any]:
    return {
        "do": "pod",
        "daemonset": "nvidia-device-plugin-daemonset",
        "node": node,
        "containers": [{"name": "nvidia-device-plugin-ctr", "state": {"waiting": "ContainerCreating"}}],
        "events": [{"reason": "FailedCreatePodSandBox", "message": event, "count": 12}],
    }


def test_a_sandbox_image_the_node_cannot_pull_names_containerds_setting_and_on_an_eks_ami_the_toolkits_config() -> None:
    (root,) = _roots(diagnosed(PLUGIN, NO_GPU, _no_sandbox("m", PAUSE_REFUSED)))
    assert (root.id, root.link) == ("node.sandbox-failed", "node")
    assert "sandbox_image" in root.fix and "restart containerd" in root.fix
    # An EKS AMI's containerd config names the regional ECR pause image: containerd's own default in its place is a
    # config that lost it, which on the GPU AMI is the one the NVIDIA toolkit wrote.
    eks = "name: t\nstack: eks\nnodes:\n  - {name: m, preset: t4-x4}\n"
    (root,) = _roots(diagnosed(eks, NO_GPU, _no_sandbox("m", PAUSE_REFUSED)))
    assert (root.id, root.link, root.node) == ("node.sandbox-failed", "toolkit", "m")
    assert "set sandbox_image back to the regional ECR pause image" in root.fix
    # The image's own pause image refused is the node's reach to its registry, not a lost setting.
    own = PAUSE_REFUSED.replace("registry.k8s.io/pause", "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/pause")
    (root,) = _roots(diagnosed(eks, NO_GPU, _no_sandbox("m", own)))
    assert (root.id, root.link) == ("node.sandbox-failed", "node")


def _own_driver(version: str) -> Any:
    """An edit: node ``own`` keeps its host's driver: the GPU Operator's per-node opt-out of its driver container
    (nvidia.com/gpu.deploy.driver=false, which its driver DaemonSet's node selector excludes), so no driver pod
    runs there, and GFD labels the host driver's version (nvidia.com/cuda.driver-version.full)."""
    from gpuchain.kube import NODE, POD

    def edit(sim: Any) -> None:
        labels = {"nvidia.com/gpu.deploy.driver": "false", "nvidia.com/cuda.driver-version.full": version}
        sim.cluster.patch(NODE, name="own", patch={"metadata": {"labels": labels}})
        for pod in sim.cluster.list(POD, namespace="gpu-operator"):
            if pod["metadata"]["name"].startswith("nvidia-driver-daemonset") and pod["spec"].get("nodeName") == "own":
                sim.cluster.delete(POD, name=pod["metadata"]["name"], namespace="gpu-operator")

    return edit


THREE = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n  - {name: n2}\n  - {name: own}\n"


def test_a_node_keeping_its_own_driver_beside_operator_driver_nodes_is_a_warning_without_a_policy_patch() -> None:
    report = diagnosed(THREE, _own_driver("535.183.06"))
    skew = [f for f in report.findings if f.id == "driver.version-skew"]
    assert [f.severity for f in skew] == [Severity.WARNING]
    assert skew[0].action is None and "kubectl" not in skew[0].fix
    assert "own (nvidia.com/gpu.deploy.driver=false)" in skew[0].cause
    assert not _roots(report)


def test_two_operator_driver_versions_beside_a_host_driver_node_are_still_a_skew_to_repair() -> None:
    from gpuchain.kube import NODE

    report = diagnosed(
        THREE,
        _own_driver("535.183.06"),
        lambda sim: sim.cluster.patch(
            NODE, name="n2", patch={"metadata": {"labels": {"nvidia.com/cuda.driver-version.full": "550.54.14"}}}
        ),
    )
    (skew,) = [f for f in report.findings if f.id == "driver.version-skew"]
    assert skew.severity is Severity.ERROR


def test_a_driver_that_cannot_unload_where_the_policy_turns_gdrcopy_on_frees_gdrdrv_not_the_host() -> None:
    # NVIDIA/gpu-operator api/nvidia/v1/clusterpolicy_types.go `gdrcopy` (its driver pod's nvidia-gdrcopy-ctr
    # loads gdrdrv, which gpu-driver-container's _unload_driver never removes); the entrypoint's own words.
    from gpuchain.doctor.stacks import NVIDIA_CLUSTER_POLICY

    def gdrcopy_on(sim: Any) -> None:
        policy = sim.cluster.list(NVIDIA_CLUSTER_POLICY)[0]
        patch = {"spec": {"gdrcopy": {"enabled": True}}}
        sim.cluster.patch(NVIDIA_CLUSTER_POLICY, name=policy["metadata"]["name"], patch=patch)

    refused = {
        "name": "nvidia-driver-ctr",
        "restarts": 3,
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {
            "terminated": "Error",
            "message": "Unloading NVIDIA driver kernel modules...\n"
            "Could not unload NVIDIA driver kernel modules, driver is in use",
        },
    }
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n  - {name: n2}\n",
        gdrcopy_on,
        {"do": "pod", "daemonset": "nvidia-driver-daemonset", "node": "n2", "containers": [refused]},
    )
    (root,) = _roots(report)
    assert (root.id, root.node) == ("driver.module-held", "n2")
    assert "rmmod gdrdrv" in root.fix and "deploy.driver=false" not in root.fix


def test_the_plugins_mig_panic_is_the_mig_link_even_while_the_kubelet_still_shows_its_old_capacity() -> None:
    # The kubelet keeps a resource's capacity after its plugin stops (allocatable drops to 0); the panic is the
    # plugin's at its start (NVIDIA/k8s-device-plugin internal/mig/mig.go@v0.12.3).
    log = (
        "panic: At least one device with migEnabled=true was not configured correctly: "
        "No MIG devices associated with /dev/nvidia5: GPU-77aa88bb-0000-1111-2222-333344445555\n"
    )
    stale = {"do": "node", "node": "m", "allocatable": {"nvidia.com/gpu": "0"}}
    (root,) = _roots(diagnosed(PLUGIN, stale, _plugin_log(log)))
    assert (root.id, root.link) == ("mig.no-instances", "mig")


def test_a_plugin_that_finds_no_gpu_on_a_managed_gpu_node_image_is_the_images_driver() -> None:
    # NVML loads (the node image's runtime injects it) but lists no device on a GPU instance: the image's
    # driver does not drive this GPU (NVIDIA/k8s-device-plugin cmd/nvidia-device-plugin/main.go@v0.17.1).
    running = {"name": "nvidia-device-plugin-ctr", "ready": True, "state": {"running": True}}
    log = (
        "I0101 00:00:00.000000 1 main.go:1] Retrieving plugins.\n"
        "I0101 00:00:00.000000 1 main.go:1] No devices found. Waiting indefinitely.\n"
    )
    report = diagnosed(
        "name: x\nstack: eks\nnodes:\n  - {name: a}\n",
        no_gpus("a"),
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin",
            "node": "a",
            "containers": [running],
            "logs": {"nvidia-device-plugin-ctr": log},
        },
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("driver.not-on-node-image", "driver", "a")
    assert "delete pod" not in root.fix
