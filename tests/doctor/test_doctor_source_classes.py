"""Classes of failure read from the components' source rather than from a scenario (issue 26): each rule on a
small simulated cluster edited the way the real components leave it, the link it names and the fix that acts.
The upstream facts each test stands on are named in it (repository, path, release)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from doctor.small_cluster import diagnosed, no_gpus, plugin_pod, toolkit_pod
from doctor.test_doctor_silent_pods import CRASH, DONE, DRA_DS, DRA_NS, OPERATOR_DRA, READY, dra_release
from doctor.test_doctor_user_pods import STANDALONE, failing_gpu_pod

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp, Report
from gpuchain.sim.build import SimCluster


def _roots(report: Report) -> list[Any]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


# -- a NotReady node whose containerd the toolkit's config write stopped ------------------------------------

#: The kubelet's FailedCreatePodSandBox Events (kuberuntime_manager.go "Failed to create pod sandbox: %v") with
#: containerd's "no runtime for %q is configured" (internal/cri/config/config.go@v2.2.9), then grpc-go's
#: "transport: Error while dialing: %v" (internal/transport/http2_client.go@v1.72.1) once containerd is down.
NO_HANDLER = (
    "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: "
    'no runtime for "nvidia" is configured'
)
REFUSED = (
    "Failed to create pod sandbox: rpc error: code = Unavailable desc = connection error: desc = "
    '"transport: Error while dialing: dial unix /run/containerd/containerd.sock: connect: connection refused"'
)


def _operator(runtime: str, toolkit: str) -> str:
    """A GPU Operator cluster of one NotReady node (the kubelet's condition once containerd is gone) running
    ``runtime`` with the operator's toolkit at ``toolkit``; the node image carries the driver."""
    return (
        "name: t\nstack: gpu-operator\n"
        f"policy: {{driver: {{enabled: false}}, toolkit: {{version: {toolkit}}}}}\n"
        "nodes:\n"
        f"  - {{name: w, preset: a100-80gb-x8, hostDriver: 570.124.06, containerRuntime: '{runtime}', "
        "nodeProblems: [kubelet-stopped]}\n"
    )


def _no_sandbox(*messages: str) -> dict[str, Any]:
    """The validator's pod on w waiting for a sandbox, with the kubelet's Events."""
    return {
        "do": "pod",
        "daemonset": "nvidia-operator-validator",
        "node": "w",
        "phase": "Pending",
        "init": [{"name": "driver-validation", "state": {"waiting": "ContainerCreating"}}],
        "events": [{"reason": "FailedCreatePodSandBox", "count": 12, "message": m} for m in messages],
    }


def test_containerd_23_stopped_after_the_toolkits_drop_in_is_the_toolkit_with_its_config_source() -> None:
    """containerd 2.3 dumps config version 4 (version/version.go@v2.3.4) and will not load a drop-in above its
    root config's version (cmd/containerd/server/config/config.go@v2.3.4); the toolkit from v1.18.0 writes its
    runtime as a drop-in at the dumped version unless RUNTIME_CONFIG_SOURCE=file (cmd/nvidia-ctk-installer/
    container/runtime/runtime.go@v1.18.0; drop-in /etc/containerd/config.d/99-nvidia.toml there)."""
    report = diagnosed(_operator("containerd://2.3.5", "v1.18.0-ubuntu20.04"), _no_sandbox(REFUSED))
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("toolkit.runtime-stopped", "toolkit", "w")
    assert "catalog: grpc.runtime-socket-refused (grpc/grpc-go " in " ".join(root.evidence)
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert {"name": "RUNTIME_CONFIG_SOURCE", "value": "file"} in root.action.changes["spec"]["toolkit"]["env"]
    assert "rm /etc/containerd/config.d/99-nvidia.toml" in root.fix and "systemctl restart containerd" in root.fix
    assert not [f for f in report.findings if f.id == "node.not-ready"]


def test_containerds_own_refusal_of_the_drop_in_names_the_toolkit_whatever_the_versions() -> None:
    refusal = "containerd: drop-in config version 4 higher than root config version 2"
    report = diagnosed(_operator("containerd://2.1.4", "v1.19.1-ubuntu20.04"), _no_sandbox(refusal))
    (root,) = _roots(report)
    assert root.id == "toolkit.runtime-stopped" and "catalog: containerd.drop-in-version" in " ".join(root.evidence)
    assert "RUNTIME_CONFIG_SOURCE" in root.fix and "rm /etc/containerd/conf.d/99-nvidia.toml" in root.fix


def test_a_notready_node_with_no_word_of_its_runtime_stays_a_node_problem() -> None:
    """The same versions without an Event that ties containerd's fall to the toolkit: the node, as before."""
    (root,) = _roots(diagnosed(_operator("containerd://2.3.5", "v1.18.0-ubuntu20.04")))
    assert (root.id, root.link) == ("node.not-ready", "node")


def test_a_refused_socket_under_a_toolkit_that_writes_no_drop_in_needs_the_handler_missing_first() -> None:
    """Toolkit v1.17 edits containerd's config in place (no drop-in before v1.18.0): a refused socket alone on
    containerd 2.3 is not tied to it; the nvidia handler missing and then the socket refused is."""
    old = _operator("containerd://2.3.5", "v1.17.8-ubuntu20.04")
    (alone,) = _roots(diagnosed(old, _no_sandbox(REFUSED)))
    assert alone.id == "node.not-ready"
    (both,) = _roots(diagnosed(old, _no_sandbox(NO_HANDLER, REFUSED)))
    assert (both.id, both.link) == ("toolkit.runtime-stopped", "toolkit")
    assert "CONTAINERD_CONFIG" in both.fix and "RUNTIME_CONFIG_SOURCE" not in both.fix


# -- a driver container whose module another kernel driver keeps off the GPUs ------------------------------

DRIVER_NODE = (
    "name: t\nstack: gpu-operator\nnodes:\n"
    "  - {name: w, preset: t4-x4, osImage: Ubuntu 22.04.4 LTS, kernel: 5.15.0-105-generic}\n"
)


def _driver_crash(log: str) -> dict[str, Any]:
    """The operator's driver container on w exiting at every start with ``log``."""
    return {
        "do": "pod",
        "daemonset": "nvidia-driver-daemonset",
        "node": "w",
        "containers": [
            {
                "name": "nvidia-driver-ctr",
                "restarts": 5,
                "state": {"waiting": "CrashLoopBackOff"},
                "last": {"terminated": "Error", "exitCode": 1},
            }
        ],
        "logs": {"nvidia-driver-ctr": log},
    }


@pytest.mark.parametrize(
    ("line", "entry"),
    [
        # gpu-driver-container ubuntu22.04/nvidia-driver _load_driver's `modprobe nvidia`; nvidia.ko's init returns
        # -ENODEV when it probed no GPU (open-gpu-kernel-modules kernel-open/nvidia/nv.c@570.211.01), and modprobe
        # prints strerror (kmod tools/modprobe.c@v30 "could not insert '%s': %s").
        ("modprobe: ERROR: could not insert 'nvidia': No such device", "kmod.insert-no-device"),
        # The kernel's own line, as dmesg quotes it (kernel-open/nvidia/nv.c@570.211.01).
        (
            "[  530.504692] NVRM: The NVIDIA probe routine was not called for 4 device(s).",
            "nvidia-kernel.probe-not-called",
        ),
        # nvidia-installer's load test (kernel.c@580.119.02), printed with its ERROR: prefix.
        (
            "ERROR: Unable to load the kernel module 'nvidia.ko'.  This happens most frequently when this kernel module "
            "was built against the wrong or improperly configured kernel sources",
            "nvidia-installer.load-failed",
        ),
    ],
)
def test_a_driver_module_another_kernel_driver_keeps_off_the_gpus_gets_nouveau_blacklisted(
    line: str, entry: str
) -> None:
    log = (
        f"Starting installation of NVIDIA driver version 570.124.06\nLoading NVIDIA driver kernel modules...\n{line}\n"
    )
    report = diagnosed(DRIVER_NODE, _driver_crash(log))
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("driver.not-ready", "driver", "w")
    assert f"catalog: {entry} (" in " ".join(root.evidence)
    assert "blacklist nouveau" in root.fix and "update-initramfs -u" in root.fix and "reboot" in root.fix
    assert not [f for f in report.findings if f.id == "log.unrecognised"]


# -- a DRA kubelet plugin that published an empty ResourceSlice --------------------------------------------


def _empty_slice(node: str) -> Callable[[SimCluster], None]:
    """An edit: the ResourceSlice NVIDIA's kubelet plugin publishes for ``node`` when it enumerated no GPU at its
    start (k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/driver.go@v25.12.0 publishes state.allocatable once; k8s.io/api
    resource/v1: spec.driver, spec.nodeName, spec.pool, no spec.devices)."""

    def edit(sim: SimCluster) -> None:
        pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
        sim.cluster.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-gpu.nvidia.com-q8w2c"},
                "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "pool": pool},
            }
        )

    return edit


def test_a_ready_dra_plugin_whose_slice_is_empty_is_restarted_once_the_driver_is_up_not_given_a_new_root() -> None:
    """Ready proves the driver root right (cmd/gpu-kubelet-plugin/nvlib.go newDeviceLib exits on "failed to locate
    driver libraries", device_state.go@v25.12.0), and the plugin publishes only what it enumerated at its start:
    an empty slice is a start before the driver had the GPUs up, repaired by a new plugin pod, whatever root the
    doctor would have guessed for the driver (here the operator's /run/nvidia/driver against the chart's /)."""
    report = diagnosed(OPERATOR_DRA, no_gpus("n1"), dra_release("n1", DONE, READY, "/"), _empty_slice("n1"))
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("device-plugin.dra-unpublished", "device-plugin", "n1")
    assert "n1-gpu.nvidia.com-q8w2c" in " ".join(root.evidence) and "before the driver" in root.cause
    assert root.fix.startswith(f"kubectl -n {DRA_NS} delete pod {DRA_DS}-7xk2p")
    assert "nvidiaDriverRoot" not in root.fix and "republishes" in root.fix


# -- the plugin refused NVML on MIG devices for want of the MIG monitor capability --------------------------


def test_a_plugin_refused_the_mig_profiles_by_nvml_gets_the_mig_monitor_devices_env() -> None:
    """go-nvlib's VisitMigProfiles "error getting device memory info: %v" (vendored in k8s-device-plugin@v0.17.1)
    with NVML's no-permission answer; NVIDIA's chart sets NVIDIA_MIG_MONITOR_DEVICES=all for any MIG strategy
    other than none (templates/_helpers.tpl addMigMonitorDevices@v0.17.1): the fix is that setting, not a plugin
    release."""
    log = (
        "I0101 00:00:00.000000 1 main.go:1] Starting NVML\n"
        "E0101 00:00:00.000000 1 main.go:1] error starting plugins: unable to add default resources to config: error "
        "visiting devices: error visiting device: error visiting device: error getting device memory info: "
        "Insufficient Permissions\n"
    )
    crash = {"name": "nvidia-device-plugin-ctr", "restarts": 6, "state": {"waiting": "CrashLoopBackOff"}}
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: m, preset: a100-80gb-x8, hostDriver: 550.54.15}\n",
        no_gpus("m"),
        plugin_pod("m", {**crash, "last": {"terminated": "Error"}}, log),
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("device-plugin", "m")
    assert "catalog: go-nvlib.mig-no-permission (" in " ".join(root.evidence)
    assert "NVIDIA_MIG_MONITOR_DEVICES=all" in root.fix
    assert not [f for f in report.findings if f.id == "log.unrecognised"]


# -- the toolkit's own words read as the toolkit's, and the config it cannot read ---------------------------


#: The toolkit before v1.17 (tools/container/containerd/containerd.go@v1.16.2 "unable to load config: %v") on a
#: Go template: pelletier/go-toml's parse error at the template's first "{{".
TEMPLATE_LOG = (
    'level=fatal msg="Error: unable to load config: failed to load config: (1, 1): parsing error: keys cannot '
    'contain { character"\n'
)


def test_a_toolkit_pointed_at_the_distributions_config_template_is_given_the_config_rendered_beside_it() -> None:
    """k3s and RKE2 render config.toml.tmpl into the config.toml their containerd loads; the toolkit reads its
    CONTAINERD_CONFIG as TOML (the device plugin's "unable to load config" shares the words: not its entry)."""
    tmpl = "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl"
    scenario = (
        "name: t\nstack: gpu-operator\n"
        f"policy: {{toolkit: {{env: [{{name: CONTAINERD_CONFIG, value: '{tmpl}'}}]}}}}\nnodes:\n  - {{name: n1}}\n"
    )
    (root,) = _roots(diagnosed(scenario, toolkit_pod("n1", TEMPLATE_LOG, restarts=9)))
    assert (root.link, root.node) == ("toolkit", "n1")
    assert "catalog: nvidia-container-toolkit.load-config (" in " ".join(root.evidence)
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    env = root.action.changes["spec"]["toolkit"]["env"]
    assert env == [{"name": "CONTAINERD_CONFIG", "value": "/var/lib/rancher/rke2/agent/etc/containerd/config.toml"}]


def test_a_toolkit_that_cannot_run_the_hosts_containerd_config_dump_gets_a_release_that_reads_the_file() -> None:
    """Toolkit v1.17.0 reads the config only through `containerd config dump` on the host (pkg/config/toml/
    source-cli.go "failed to run command %v %v: %w"); v1.17.1 falls back to the file (toml.LoadFirst), v1.18.0 takes
    RUNTIME_CONFIG_SOURCE=file: the deepest words name that cause, not the config file's TOML."""
    log = (
        'time="2024-11-01T14:02:11Z" level=error msg="error running nvidia-toolkit: unable to determine runtime '
        "options: unable to load containerd config: failed to load config: failed to run command chroot [/host "
        'containerd config dump]: exit status 127"\n'
    )
    (root,) = _roots(
        diagnosed("name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n", toolkit_pod("n1", log, restarts=9))
    )
    assert root.link == "toolkit" and "catalog: nvidia-container-toolkit.config-dump-failed (" in " ".join(
        root.evidence
    )
    assert "v1.17.1" in root.fix and "RUNTIME_CONFIG_SOURCE=file" in root.fix


# -- the device plugin's config: a ConfigMap that does not exist, and the plugin's own words ----------------


def test_a_plugin_configmap_the_policy_names_and_nobody_created_is_created_with_the_default_key() -> None:
    """The operator mounts spec.devicePlugin.config.name into the plugin's pod whether or not the ConfigMap
    exists (NVIDIA/gpu-operator#2641); the kubelet's FailedMount ("configmap %q not found", pkg/volume/configmap)
    holds it Pending. Patching the default to another key of a map that does not exist repairs nothing."""
    pending = {
        "do": "pod",
        "daemonset": "nvidia-device-plugin-daemonset",
        "node": "n1",
        "phase": "Pending",
        "init": [{"name": "toolkit-validation", "state": {"waiting": "PodInitializing"}}],
        "events": [
            {
                "reason": "FailedMount",
                "count": 9,
                "message": 'MountVolume.SetUp failed for volume "plugin-config" : configmap "plugin-config" not found',
            }
        ],
    }
    scenario = (
        "name: t\nstack: gpu-operator\n"
        "policy: {devicePlugin: {config: {name: plugin-config, default: any}}}\nnodes:\n  - {name: n1}\n"
    )
    (root,) = _roots(diagnosed(scenario, no_gpus("n1"), pending))
    assert (root.id, root.link, root.node) == ("device-plugin.config-missing", "device-plugin", "n1")
    assert root.action is not None and root.action.op is FixOp.CREATE
    assert root.action.changes["metadata"] == {"name": "plugin-config", "namespace": "gpu-operator"}
    assert root.action.changes["data"] == {"any": "version: v1\n"}
    assert 'configmap "plugin-config" not found' in " ".join(root.evidence)


def test_a_config_manager_that_says_why_it_stops_is_read_not_second_guessed_from_the_label() -> None:
    """The standalone chart's own ConfigMap is out of the doctor's sight; the config-manager's own line
    (cmd/config-manager/main.go@v0.17.1 "error creating symlink: %v") names the failure and its repair."""
    log = (
        'time="2022-12-23T13:54:55Z" level=info msg="Updating to config: config-3"\n'
        'time="2022-12-23T13:54:55Z" level=info msg="Error: error creating symlink: symlink '
        '/available-configs/config-3 /config/config.yaml: file exists"\n'
    )
    label = {"do": "node", "node": "m", "labels": {"nvidia.com/device-plugin.config": "config-3"}}
    crash = {"name": "nvidia-device-plugin-ctr", "restarts": 38, "state": {"waiting": "CrashLoopBackOff"}}
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: m, preset: a100-80gb-x8, hostDriver: 550.54.15}\n",
        no_gpus("m"),
        label,
        plugin_pod("m", {**crash, "last": {"terminated": "Error"}}, log),
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("device-plugin.not-ready", "device-plugin")
    assert "catalog: k8s-device-plugin.config-symlink (" in " ".join(root.evidence)
    assert "delete pod" in root.fix and (root.action is None or root.action.op is not FixOp.LABEL_NODE)


def test_a_kernel_whose_headers_the_driver_container_cannot_find_gets_the_host_driver_or_a_published_kernel() -> None:
    """gpu-driver-container resolves linux-headers-$KERNEL_VERSION (ubuntu22.04/nvidia-driver
    _resolve_kernel_version@25.01.21) and stops with "Could not resolve Linux kernel version" when the OS
    repositories it reads publish none (a FIPS or other custom kernel): the repairs are a kernel they publish, or
    the driver built on the host from the kernel's own headers with the driver container off."""
    fips = "name: t\nstack: gpu-operator\nnodes:\n  - {name: w, preset: t4-x4, kernel: 5.4.0-1068-fips}\n"
    log = "Resolving Linux kernel version...\nCould not resolve Linux kernel version\n"
    (root,) = _roots(diagnosed(fips, _driver_crash(log)))
    assert (root.id, root.node) == ("driver.kernel-mismatch", "w")
    assert "linux-headers-5.4.0-1068-fips" in root.cause
    assert "spec.driver.enabled=false" in root.fix and "linux-headers 5.4.0-1068-fips" in root.fix
    assert "kernel a kernel" not in root.fix and "whose headers its OS repositories publish" in root.fix


def test_a_dra_plugin_that_refuses_to_start_on_an_unregistered_nvlink_fabric_gets_the_fabric_or_the_gate() -> None:
    """k8s-dra-driver-gpu cmd/compute-domain-kubelet-plugin/nvlib.go@v25.12.0 exits with "NVLink fabric not attached
    (device %d/%s): state=%d, refusing to start" under its CrashOnNVLinkFabricErrors gate (on by default from v25.12,
    pkg/featuregates): the fabric's registration, or the gate, not "the release the stack ships"."""
    log = (
        "E0722 18:02:11.533907       1 main.go:196] error creating driver: error getting clique ID: error getting "
        "fabric information from one or more devices: NVLink fabric not attached (device 5/GPU-7c41d0a2-9e3b-4f51-"
        "8a6d-2b0e5c9f1d34): state=2, refusing to start\n"
    )
    said = {"do": "pod", "daemonset": DRA_DS, "namespace": DRA_NS, "node": "n1", "logs": {"gpus": log}}
    report = diagnosed(OPERATOR_DRA, no_gpus("n1"), dra_release("n1", DONE, CRASH), said)
    (root,) = _roots(report)
    assert (root.link, root.node) == ("device-plugin", "n1")
    assert "catalog: k8s-dra-driver-gpu.fabric-not-attached (" in " ".join(root.evidence)
    assert "featureGates.CrashOnNVLinkFabricErrors=false" in root.fix and "nvidia-fabricmanager" in root.fix


def test_a_driver_tag_the_registry_answers_manifest_unknown_for_is_a_tag_nvidia_does_not_publish() -> None:
    """CRI-O's image library quotes the registry's own error for a missing tag, MANIFEST_UNKNOWN "manifest unknown"
    (opencontainers/distribution-spec spec.md error codes), where containerd says "not found": both are a tag the
    registry lacks, and a driver tag is the driver's version and the node's OS."""
    image = "nvcr.io/nvidia/driver:570.124.06-rocky9.4"
    pulling = {
        "do": "pod",
        "daemonset": "nvidia-driver-daemonset",
        "node": "w",
        "phase": "Pending",
        "containers": [
            {
                "name": "nvidia-driver-ctr",
                "state": {"waiting": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'},
            }
        ],
        "events": [
            {
                "reason": "Failed",
                "count": 3,
                "message": f'Failed to pull image "{image}": initializing source docker://{image}: reading manifest '
                "570.124.06-rocky9.4 in nvcr.io/nvidia/driver: manifest unknown",
            }
        ],
    }
    rocky = (
        "name: t\nstack: gpu-operator\nnodes:\n"
        "  - {name: w, preset: t4-x4, osImage: Rocky Linux 9.4 (Blue Onyx), containerRuntime: 'cri-o://1.30.4'}\n"
    )
    (root,) = _roots(diagnosed(rocky, pulling))
    assert (root.link, root.node) == ("driver", "w")
    assert "make the image reachable" not in root.fix
    assert "spec.driver.repository" in root.fix or "driver.enabled" in root.fix


def test_a_gpu_pod_whose_nvidia_smi_is_not_in_its_container_gets_the_nvidia_runtime_class() -> None:
    """nvidia-smi is one of the driver's binaries only the NVIDIA runtime mounts into a container
    (nvidia-container-toolkit pkg/nvcdi/driver-nvml.go NewDriverBinariesDiscoverer@v1.17.4); runc's StartError
    quoting Go's os/exec ErrNotFound for it is a pod that ran under another runtime, like PyTorch's "no driver"."""
    started = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: "
        'unable to start container process: exec: "nvidia-smi": executable file not found in $PATH: unknown'
    )
    (found,) = [
        f
        for f in diagnosed(STANDALONE, failing_gpu_pod(said=started, reason="StartError")).findings
        if f.id == "workload.no-driver-in-pod"
    ]
    assert found.root and (found.link, found.node) == ("toolkit", "n1")
    assert "catalog: runc.driver-binary-missing (" in " ".join(found.evidence)
    assert found.action is not None and found.action.changes["patch"] == {
        "spec": {"template": {"spec": {"runtimeClassName": "nvidia"}}}
    }


def test_a_silent_toolkit_on_containerd_23_with_a_drop_in_release_is_told_to_read_the_config_file() -> None:
    """The pair of releases of toolkit.runtime-stopped, with the node still Ready and the toolkit crash-looping
    without a word (NVIDIA/gpu-operator#2646's shape): RUNTIME_CONFIG_SOURCE=file; not where it is already set,
    nor under a toolkit that writes no drop-in (before v1.18.0)."""
    silent = toolkit_pod("n1", "", restarts=9)  # no log line: the kubelet's back-off only

    def node(toolkit: str, env: str = "") -> str:
        return (
            f"name: t\nstack: gpu-operator\npolicy: {{toolkit: {{version: {toolkit}{env}}}}}\n"
            "nodes:\n  - {name: n1, containerRuntime: 'containerd://2.3.2'}\n"
        )

    (root,) = _roots(diagnosed(node("v1.18.1"), silent))
    assert (root.link, root.node) == ("toolkit", "n1") and root.action is not None
    assert {"name": "RUNTIME_CONFIG_SOURCE", "value": "file"} in root.action.changes["spec"]["toolkit"]["env"]
    assert "catalog: containerd.drop-in-version (" in " ".join(root.evidence)
    told = ", env: [{name: RUNTIME_CONFIG_SOURCE, value: 'file=/etc/containerd/config.toml'}]"
    for scenario in (node("v1.18.1", told), node("v1.17.8")):
        (other,) = _roots(diagnosed(scenario, silent))
        assert "RUNTIME_CONFIG_SOURCE" not in other.fix
