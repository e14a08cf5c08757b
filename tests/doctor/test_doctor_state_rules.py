"""Rules the walk applies from component source and pod state (issue 26, items 2 and 4), each on a
small simulated cluster edited the way the real components would leave it: the finding's link, and a
fix that acts (the repairing change, never the diagnosis again)."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import crash_looping, crashing_pod, diagnosed, no_gpus, plugin_pod, refused_at_start

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp, Report


def _roots(report: Report) -> list[Any]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n  - {name: n2}\n"


def test_the_kernels_own_refusal_of_an_unsigned_module_gets_the_secure_boot_fix() -> None:
    report = diagnosed(
        OPERATOR,
        crashing_pod(
            "nvidia-driver-daemonset",
            "nvidia-driver-ctr",
            "n2",
            "Loading of module with unavailable key is rejected\nERROR: failed\n",
        ),
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("driver", "n2")
    assert "Secure Boot" in root.fix and root.action is not None and root.action.op is FixOp.NODE
    assert any("kernel.unsigned-module-rejected" in e for e in root.evidence)
    assert not [f for f in report.findings if f.id == "log.unrecognised"]


def test_a_pending_mig_mode_change_the_manager_could_not_reset_is_repaired_by_a_reboot() -> None:
    log = (
        'level=debug msg="    Mode change pending: true"\n'
        'level=debug msg="At least one mode change pending"\n'
        'level=fatal msg="Error applying MIG configuration with hooks: error resetting all GPUs: exit status 3"\n'
    )
    report = diagnosed(
        "name: t\nstack: gpu-operator\npolicy: {mig: {strategy: mixed}}\nnodes:\n  - {name: m, preset: a100-80gb-x8}\n",
        {"do": "node", "node": "m", "labels": {"nvidia.com/mig.config": "all-3g.40gb"}},
        {"do": "node", "node": "m", "labels": {"nvidia.com/mig.config.state": "failed"}},
        {"do": "pod", "daemonset": "nvidia-mig-manager", "node": "m", "logs": {"nvidia-mig-manager": log}},
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("mig.failed", "mig")
    assert root.action is not None and root.action.op is FixOp.NODE and "reboot" in root.fix
    assert "WITH_REBOOT=true" in root.fix and "all-disabled" not in root.fix


def test_a_validation_whose_image_cannot_be_pulled_is_its_own_pods_failure_not_the_link_it_validates() -> None:
    pull = {
        "name": "driver-validation",
        "state": {
            "waiting": "ImagePullBackOff",
            "message": 'Back-off pulling image "registry.example/validator:v9"',
        },
    }
    report = diagnosed(
        OPERATOR,
        {"do": "pod", "daemonset": "nvidia-container-toolkit-daemonset", "node": "n1", "init": [pull]},
        {"do": "node", "node": "n1", "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("toolkit", "n1")
    assert root.id != "driver.validation-failed"
    # The image that fails is the validator's, not the toolkit's: no toolkit version is blamed.
    assert "imagePullSecrets" in root.fix and '"toolkit"' not in root.fix


def _no_image_for_os(node: str) -> dict[str, Any]:
    image = "nvcr.io/nvidia/driver:570.1.2-alpine3.20"
    return {
        "do": "pod",
        "daemonset": "nvidia-driver-daemonset",
        "node": node,
        "containers": [
            {
                "name": "nvidia-driver-ctr",
                "state": {"waiting": "ImagePullBackOff", "message": f'pulling image "{image}"'},
            }
        ],
        "events": [{"reason": "Failed", "message": f'Failed to pull image "{image}": {image}: not found'}],
    }


def test_a_driver_image_for_an_os_nvidia_builds_none_for_turns_the_driver_container_off() -> None:
    # The only GPU node: the policy's driver container goes off (the host's driver replaces it).
    report = diagnosed("name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n", _no_image_for_os("n1"))
    (root,) = _roots(report)
    assert (root.link, root.node) == ("driver", "n1")
    assert root.action is not None and root.action.changes == {"spec": {"driver": {"enabled": False}}}
    assert "driver.enabled=false" in root.fix
    # Beside nodes whose driver container runs, only that node opts out.
    (root,) = _roots(diagnosed(OPERATOR, _no_image_for_os("n2")))
    assert root.action is not None and root.action.op is FixOp.LABEL_NODE
    assert root.action.changes == {"nvidia.com/gpu.deploy.driver": "false"} and root.node == "n2"


def test_a_missing_driver_image_for_a_published_os_is_still_a_version_the_registry_lacks() -> None:
    image = "nvcr.io/nvidia/driver:999.1.2-ubuntu22.04"
    report = diagnosed(
        "name: t\nstack: gpu-operator\npolicy: {driver: {version: 999.1.2}}\nnodes:\n  - {name: n1}\n",
        {
            "do": "pod",
            "daemonset": "nvidia-driver-daemonset",
            "node": "n1",
            "containers": [
                {
                    "name": "nvidia-driver-ctr",
                    "state": {"waiting": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'},
                }
            ],
            "events": [{"reason": "Failed", "message": f'Failed to pull image "{image}": not found'}],
        },
    )
    (root,) = _roots(report)
    assert root.action is not None and root.action.changes == {"spec": {"driver": {"version": None}}}


def _second_exporter(nodes: list[str]) -> dict[str, Any]:
    return {
        "do": "add-daemonset",
        "namespace": "metrics",
        "name": "dcgm-exporter",
        "labels": {"app.kubernetes.io/name": "dcgm-exporter", "app.kubernetes.io/instance": "gpu-metrics"},
        "containers": ["exporter"],
        "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.1-ubuntu22.04",
        "nodes": nodes,
    }


def test_a_failing_second_exporter_beside_the_operators_own_is_the_one_removed() -> None:
    crash = {
        "name": "exporter",
        "restarts": 20,
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "Error"},
    }
    report = diagnosed(
        OPERATOR,
        _second_exporter(["n1"]),
        {"do": "pod", "daemonset": "dcgm-exporter", "namespace": "metrics", "node": "n1", "containers": [crash]},
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("exporter", "n1")
    assert root.action is not None and root.action.op is FixOp.DELETE
    assert root.action.changes == {"kind": "DaemonSet", "namespace": "metrics", "name": "dcgm-exporter"}
    assert root.fix.startswith("helm -n metrics uninstall gpu-metrics")


def test_an_oom_killed_operand_gets_its_memory_limit_raised_where_its_release_lives() -> None:
    oom = {
        "name": "exporter",
        "restarts": 9,
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "OOMKilled", "exitCode": 137},
    }
    report = diagnosed(
        "name: t\nstack: eks\nnodes:\n  - {name: e1}\n",
        _second_exporter(["e1"]),
        {"do": "pod", "daemonset": "dcgm-exporter", "namespace": "metrics", "node": "e1", "containers": [oom]},
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("exporter", "e1")
    assert "kubectl -n metrics set resources ds/dcgm-exporter -c exporter --limits=memory=512Mi" in root.fix
    assert "delete pod" not in root.fix


def test_a_running_plugin_that_logs_a_version_mismatch_names_the_driver_not_its_registration() -> None:
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: h, hostDriver: 550.54.15}\n",
        {"do": "node", "node": "h", "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "node": "h",
            "logs": {
                "nvidia-device-plugin-ctr": "Loading NVML\nFailed to initialize NVML: Driver/library version mismatch\n"
            },
        },
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("driver.version-mismatch", "driver")
    assert "reboot the node" in root.fix


def test_a_plugin_that_cannot_build_its_nvml_managers_on_a_host_driver_wants_nvidia_as_default_runtime() -> None:
    log = "E0101 00:00:00.000000 1 main.go:1] error starting plugins: failed to construct NVML resource managers\n"
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: h, hostDriver: 550.54.15}\n",
        no_gpus("h"),
        plugin_pod("h", crash_looping("nvidia-device-plugin-ctr", restarts=4), log),
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("toolkit.runtime-not-default", "toolkit")
    assert "--set-as-default" in root.fix


def test_gpu_pods_refused_for_cdi_devices_no_spec_defines_get_the_spec_generated() -> None:
    refused = (
        "failed to create containerd task: OCI runtime create failed: error modifying OCI spec: failed to inject "
        "CDI devices: unresolvable CDI devices management.nvidia.com/gpu=GPU-0000"
    )
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\nworkloads:\n  - {name: app, count: 2, gpus: 1, node: n1}\n",
        refused_at_start("app", refused),
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("workload.runtime-hook-failed", "toolkit", "n1")
    assert "nvidia-ctk cdi generate" in root.fix


def test_a_pod_whose_configmap_is_not_in_its_namespace_gets_it_created_there() -> None:
    report = diagnosed(
        "name: t\nstack: gpu-operator\npolicy: {devicePlugin: {config: {name: sharing}}}\nnodes:\n  - {name: n1}\n",
        {"do": "node", "node": "n1", "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "node": "n1",
            "init": [{"name": "toolkit-validation", "state": {"waiting": "PodInitializing"}}],
            "events": [
                {
                    "reason": "FailedMount",
                    "message": 'MountVolume.SetUp failed for volume "sharing" : configmap "sharing" not found',
                }
            ],
        },
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("device-plugin", "n1")
    assert root.fix.startswith("kubectl -n gpu-operator create configmap sharing ")
    assert "delete pod" not in root.fix


PLUGIN_ON_NFD = {
    "do": "add-daemonset",
    "namespace": "gpu",
    "name": "gpu-plugin",
    "containers": ["plugin"],
    "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
    "nodeSelector": {"feature.node.kubernetes.io/pci-10de.present": "true"},
    "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    "nodes": [],
}


def test_an_nfd_worker_that_does_not_tolerate_the_gpu_taint_gets_the_toleration() -> None:
    report = diagnosed(
        "name: t\nstack: eks\nnodes:\n  - {name: cpu, gpu: false}\n"
        "  - {name: g, taints: [{key: dedicated, value: gpu, effect: NoSchedule}]}\n",
        {"do": "delete-daemonset", "namespace": "kube-system", "name": "nvidia-device-plugin-daemonset"},
        PLUGIN_ON_NFD,
        {
            "do": "add-daemonset",
            "namespace": "nfd",
            "name": "nfd-worker",
            "containers": ["worker"],
            "image": "registry.k8s.io/nfd/node-feature-discovery:v0.17.3",
            "nodes": ["cpu"],
        },
        {"do": "node", "node": "g", "labels": {"feature.node.kubernetes.io/pci-10de.present": None}},
        {"do": "node", "node": "g", "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("nfd.not-labelled", "gfd", "g")
    assert (
        root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET and root.action.target == "nfd/nfd-worker"
    )
    tolerations = root.action.changes["spec"]["template"]["spec"]["tolerations"]
    assert {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"} in tolerations


def test_a_node_nfd_labelled_under_another_device_label_gets_the_label_the_daemonset_selects() -> None:
    report = diagnosed(
        "name: t\nstack: eks\nnodes:\n  - {name: g, nfd: false}\n",
        {"do": "delete-daemonset", "namespace": "kube-system", "name": "nvidia-device-plugin-daemonset"},
        PLUGIN_ON_NFD,
        {"do": "node", "node": "g", "labels": {"feature.node.kubernetes.io/pci-0302_10de.present": "true"}},
        {"do": "node", "node": "g", "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("nfd.not-labelled", "gfd")
    assert root.action is not None and root.action.op is FixOp.LABEL_NODE
    assert root.action.changes == {"feature.node.kubernetes.io/pci-10de.present": "true"}
    assert "deviceLabelFields" in root.fix


def test_a_node_whose_nfd_os_build_label_is_stale_gets_nfd_to_relabel_it() -> None:
    crash = {
        "name": "nvidia-driver-ctr",
        "restarts": 7,
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "Error"},
    }
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - name: w\n    osImage: Red Hat Enterprise Linux CoreOS 418.94.202511010000-0\n"
        "    labels: {feature.node.kubernetes.io/system-os_release.OSTREE_VERSION: 418.94.202509010000-0}\n",
        {"do": "pod", "daemonset": "nvidia-driver-daemonset", "node": "w", "containers": [crash]},
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("driver", "w")
    assert "OSTREE_VERSION" in root.fix and "418.94.202511010000-0" in root.fix
    # The same crash on a node whose label matches its build is not this rule's.
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - name: w\n    osImage: Red Hat Enterprise Linux CoreOS 418.94.202511010000-0\n"
        "    labels: {feature.node.kubernetes.io/system-os_release.OSTREE_VERSION: 418.94.202511010000-0}\n",
        {"do": "pod", "daemonset": "nvidia-driver-daemonset", "node": "w", "containers": [crash]},
    )
    assert "OSTREE_VERSION" not in _roots(report)[0].fix


def test_a_failing_driver_manager_on_a_node_marked_upgrade_done_under_gpu_pods_is_marked_upgrade_required() -> None:
    manager = {
        "name": "k8s-driver-manager",
        "restarts": 5,
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "Error"},
    }
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: u, labels: {nvidia.com/gpu-driver-upgrade-state: upgrade-done}}\n"
        "workloads:\n  - {name: job, count: 2, gpus: 1, node: u}\n",
        {"do": "pod", "daemonset": "nvidia-driver-daemonset", "node": "u", "init": [manager]},
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("driver", "u")
    assert root.action is not None and root.action.changes == {
        "nvidia.com/gpu-driver-upgrade-state": "upgrade-required"
    }


def test_a_secret_an_operand_needs_that_is_not_in_its_namespace_gets_created_there() -> None:
    report = diagnosed(
        OPERATOR,
        {
            "do": "pod",
            "daemonset": "nvidia-dcgm-exporter",
            "node": "n1",
            "containers": [
                {
                    "name": "nvidia-dcgm-exporter",
                    "state": {"waiting": "CreateContainerConfigError", "message": 'secret "dcgm-tls" not found'},
                }
            ],
        },
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("exporter", "n1")
    assert root.fix.startswith("kubectl -n gpu-operator create secret generic dcgm-tls ")


def test_a_mig_reset_refused_because_clients_hold_the_gpus_frees_them_rather_than_relabelling() -> None:
    log = (
        'level=error msg="The following GPUs could not be reset:\\n  GPU 00000000:07:00.0: In use by another client"\n'
        'level=fatal msg="Error applying MIG configuration with hooks: error resetting all GPUs: exit status 255"\n'
    )
    report = diagnosed(
        "name: t\nstack: gpu-operator\npolicy: {mig: {strategy: mixed}}\nnodes:\n  - {name: m, preset: a100-80gb-x8}\n",
        {"do": "node", "node": "m", "labels": {"nvidia.com/mig.config": "all-2g.20gb"}},
        {"do": "node", "node": "m", "labels": {"nvidia.com/mig.config.state": "failed"}},
        {"do": "pod", "daemonset": "nvidia-mig-manager", "node": "m", "logs": {"nvidia-mig-manager": log}},
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("mig.failed", "mig")
    assert "rmmod nvidia_drm" in root.fix and "all-disabled" not in root.fix


def test_gpu_pods_refused_at_start_over_a_version_mismatch_name_the_driver_not_the_hook() -> None:
    refused = (
        "OCI runtime create failed: error running hook #0: error running hook: exit status 1, stdout: , stderr: "
        "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown"
    )
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\nworkloads:\n  - {name: app, count: 2, gpus: 1, node: n1}\n",
        refused_at_start("app", refused),
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("driver.version-mismatch", "driver", "n1")
    assert "workload.runtime-hook-failed" not in report.ids


def test_a_gpu_pod_whose_cuda_requirement_the_driver_cannot_meet_names_the_driver_too_old() -> None:
    refused = (
        "OCI runtime create failed: error running hook #0: error running hook: exit status 1, stdout: , stderr: "
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.6, please update your driver to a "
        "newer version, or use an earlier cuda container: unknown"
    )
    report = diagnosed(
        "name: t\nstack: gpu-operator\npolicy: {driver: {version: 535.1.2}}\nnodes:\n  - {name: n1}\n"
        "workloads:\n  - {name: app, count: 2, gpus: 1, node: n1}\n",
        refused_at_start("app", refused),
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("driver.too-old", "driver", "n1")
    assert root.action is not None and root.action.changes["spec"] == {"driver": {"version": None}}


STANDALONE_TS = (
    "name: t\nstack: nvidia-device-plugin\n"
    "devicePluginConfigs:\n  ts4: {version: v1, sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}}\n"
    "nodes:\n  - {name: t4, preset: t4-x4, hostDriver: 550.127.05, devicePluginConfig: ts4}\n"
)


def test_a_standalone_plugin_running_with_its_labelled_config_is_not_told_the_config_is_missing() -> None:
    """No ClusterPolicy names the plugin's ConfigMap (NVIDIA's chart mounts its own), so the doctor cannot
    read the configs; a plugin that runs and says nothing of a missing key has the one its label names."""
    report = diagnosed(STANDALONE_TS)
    assert not [f for f in report.findings if f.severity is Severity.ERROR], report.ids()


def test_a_standalone_plugin_whose_config_manager_says_the_key_is_missing_is_the_config() -> None:
    crash = {
        "name": "nvidia-device-plugin-ctr",
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "Error"},
    }
    said = "E1205 10:00:00.000000 1 main.go:180] error: specified config ts4 does not exist\n"
    report = diagnosed(
        STANDALONE_TS,
        {"do": "pod", "daemonset": "nvidia-device-plugin-daemonset", "namespace": "kube-system", "node": "t4",
         "containers": [crash], "logs": {"nvidia-device-plugin-ctr": said}},
    )  # fmt: skip
    (root,) = _roots(report)
    assert (root.id, root.node) == ("device-plugin.config-missing", "t4")


def test_a_layout_naming_a_profile_the_driver_calls_otherwise_is_repaired_with_the_name_the_gpu_lists() -> None:
    """NVIDIA/mig-parted pkg/mig/config/config.go@v0.10.0 checks each device it made against the layout's profile
    ("unsupported MIG Device specified %v, expected %v instead"): the driver names the A100 80GB's full slice
    7g.79gb where the layout says 7g.80gb. The fix names that profile and the key the MIG manager reads."""
    log = (
        'level=info msg="Applying the selected MIG config to the node"\n'
        'level=fatal msg="Error applying MIG configuration with hooks: error setting MIG config: error creating MIG '
        'devices: unsupported MIG Device specified 7g.80gb, expected 7g.79gb instead"\n'
    )
    report = diagnosed(
        "name: t\nstack: gpu-operator\npolicy: {mig: {strategy: mixed}}\nnodes:\n  - {name: m, preset: a100-80gb-x8}\n",
        {"do": "node", "node": "m", "labels": {"nvidia.com/mig.config": "all-7g.80gb"}},
        {"do": "node", "node": "m", "labels": {"nvidia.com/mig.config.state": "failed"}},
        {"do": "pod", "daemonset": "nvidia-mig-manager", "node": "m", "logs": {"nvidia-mig-manager": log}},
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("mig.failed", "mig")
    assert "7g.79gb" in root.fix and "spec.migManager.config.name" in root.fix and "driver" in root.fix
    assert "7g.79gb" in root.cause


def test_a_profile_mig_parted_does_not_find_on_the_gpu_is_named_with_the_key_the_manager_reads() -> None:
    """mig-parted v0.15 resolves the layout's profile on the GPU first (pkg/mig/config/config.go@v0.15.0, "MIG
    profile %q not found on this GPU"; logrus escapes the quotes in its msg)."""
    log = 'level=fatal msg="Error applying MIG configuration with hooks: MIG profile \\"7g.80gb\\" not found on this GPU"\n'
    report = diagnosed(
        "name: t\nstack: gpu-operator\npolicy: {mig: {strategy: mixed}}\nnodes:\n  - {name: m, preset: a100-80gb-x8}\n",
        {"do": "node", "node": "m", "labels": {"nvidia.com/mig.config": "all-7g.80gb"}},
        {"do": "node", "node": "m", "labels": {"nvidia.com/mig.config.state": "failed"}},
        {"do": "pod", "daemonset": "nvidia-mig-manager", "node": "m", "logs": {"nvidia-mig-manager": log}},
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("mig.failed", "mig")
    assert "nvidia-smi mig -lgip" in root.fix and "spec.migManager.config.name" in root.fix and "7g.80gb" in root.cause
    assert any(e.startswith("catalog: mig-parted.profile-not-found (") for e in root.evidence)


def test_a_gpu_instance_profile_nvml_refuses_on_one_gpu_is_repaired_by_the_mig_manager_release() -> None:
    """mig-parted before v0.15.0 creates GPU instances by a profile ID resolved once for the node's GPUs
    (pkg/mig/config/config.go@v0.14.5 "error getting GPU instance profile info for '%v': %v"); the release that
    resolves it per GPU is the repair, not a reboot for a mode change the log never said was pending."""
    log = (
        "Applying the MIG mode change from the selected config to the node (and double checking it took effect)\n"
        'level=debug msg="Asserting MIG mode: Enabled"\n'
        "Error getting GPU instance profile info for '2g.20gb': ERROR_NOT_SUPPORTED\n"
    )
    report = diagnosed(
        "name: t\nstack: gpu-operator\npolicy: {mig: {strategy: mixed}}\nnodes:\n  - {name: m, preset: a100-40gb-x8}\n",
        {
            "do": "node",
            "node": "m",
            "labels": {"nvidia.com/mig.config": "custom", "nvidia.com/mig.config.state": "failed"},
        },
        {"do": "pod", "daemonset": "nvidia-mig-manager", "node": "m", "logs": {"nvidia-mig-manager": log}},
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("mig.failed", "mig")
    assert any(e.startswith("catalog: mig-parted.gi-profile-not-supported (") for e in root.evidence)
    assert "v0.15.0" in root.fix and "spec.migManager.version" in root.fix and "reboot" not in root.fix
