"""Operand containers the container runtime never started because the NVIDIA runtime hook failed
(issue 26): the runtime's message, in the container's state or in the kubelet's Warning ``Failed``
Event, names the toolkit as the root whatever pod it hit, and the fix is the catalog's repair for that
message, not the victim operand's release."""

from __future__ import annotations

import copy
from typing import Any

from doctor.small_cluster import diagnosed
from sim.heldout import harness

from gpuchain.doctor import Severity
from gpuchain.doctor.evidence import toolkit_tag_for_old_glibc
from gpuchain.doctor.model import Finding, Report
from gpuchain.kube import POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim.build import SimCluster

#: runc's wrapping of a failed hook as containerd's CRI returns it (opencontainers/runc
#: libcontainer/configs/config.go@v1.2.5 "error running %s hook #%d: %w"; containerd
#: internal/cri/server/container_start.go@v2.0.5 "failed to create containerd task: %w").
RUNC = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: "
    "unable to start container process: error during container init: error running {hook}hook #{n}: "
    "exit status 1, stdout: , stderr: {stderr}: unknown"
)
#: NVIDIA/libnvidia-container src/cli/configure.c@09df17a2 warnx("container error: %s") with
#: src/cgroup_legacy.c@a4e5e71e "cgroup subsystem %s not found" (the devices controller of cgroup v1).
CGROUP = "nvidia-container-cli: container error: cgroup subsystem devices not found"
#: glibc elf/dl-version.c@630da022 "version `%s' not found (required by %s)", as the loader prints it for the
#: toolkit's host binary (the operator's toolkit installs it under /usr/local/nvidia/toolkit).
GLIBC = (
    "/usr/local/nvidia/toolkit/nvidia-container-cli.real: /lib64/libc.so.6: version `GLIBC_2.27' not found "
    "(required by /usr/local/nvidia/toolkit/nvidia-container-cli.real)"
)
#: NVIDIA/nvidia-container-toolkit cmd/nvidia-cdi-hook/update-application-profile/update-application-profile.go
#: @v1.20.0 "failed to create application profiles directory: %w" (os.Root.MkdirAll's *PathError).
PROFILES = (
    "failed to create application profiles directory: mkdirat etc/nvidia/nvidia-application-profiles-rc.d: "
    "read-only file system"
)


def _start_error(message: str) -> dict[str, Any]:
    """A container as the kubelet shows one the runtime could not start (held-out format): waiting in
    CrashLoopBackOff, its last state terminated StartError, exit 128, with the runtime's message (containerd
    internal/cri/server/container_start.go@v2.0.5)."""
    return {
        "restarts": 6,
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "StartError", "exitCode": 128, "message": message},
    }


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def _cites(finding: Finding, entry: str) -> bool:
    return any(e.startswith(f"catalog: {entry} (") for e in finding.evidence)


def test_cgroup_v2_under_an_old_libnvidia_container_is_the_toolkit_not_the_plugin_it_hit() -> None:
    message = RUNC.format(hook="", n=0, stderr=CGROUP)
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: nas, hostDriver: 535.183.01, distribution: k3s}\n",
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "node": "nas",
            "containers": [{"name": "nvidia-device-plugin-ctr", **_start_error(message)}],
        },
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("toolkit.hook-failed", "toolkit", "nas")
    assert _cites(root, "libnvidia-container.cgroup-subsystem-missing")
    assert "1.8" in root.fix and "cgroup" in root.fix
    assert "device-plugin.not-ready" not in report.ids


def test_the_runtimes_message_is_read_from_the_kubelets_failed_event_when_the_state_holds_none() -> None:
    """The kubelet's Warning Failed Event ("Error: " and the runtime's error, kubernetes
    pkg/kubelet/kuberuntime/kuberuntime_container.go@v1.34.4 startContainer) is all a report may keep."""
    message = "Error: " + RUNC.format(hook="", n=0, stderr=CGROUP)
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: nas, hostDriver: 535.183.01}\n",
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "node": "nas",
            "containers": [
                {
                    "name": "nvidia-device-plugin-ctr",
                    "restarts": 6,
                    "state": {"waiting": "CrashLoopBackOff"},
                    "last": {"terminated": "StartError", "exitCode": 128},
                }
            ],
            "events": [{"reason": "Failed", "message": message}],
        },
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("toolkit.hook-failed", "toolkit")
    assert _cites(root, "libnvidia-container.cgroup-subsystem-missing")


def test_a_driver_container_the_toolkits_hook_refuses_is_the_toolkit_with_the_image_for_the_hosts_glibc() -> None:
    message = RUNC.format(hook="", n=0, stderr=GLIBC)
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n"
        "  - {name: c7, osImage: CentOS Linux 7 (Core), kernel: 3.10.0-1160.el7.x86_64}\n  - {name: u}\n",
        {
            "do": "pod",
            "daemonset": "nvidia-driver-daemonset",
            "node": "c7",
            "containers": [{"name": "nvidia-driver-ctr", **_start_error(message)}],
        },
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("toolkit.hook-failed", "toolkit", "c7")
    assert _cites(root, "glibc.toolkit-version-not-found")
    # The operator's toolkit v1.17.5-ubuntu20.04 (the scenario's policy) in its variant built for centos7's glibc.
    assert '"toolkit":{"version":"v1.17.5-ubi8"}' in root.fix
    assert not [f for f in report.findings if f.link == "driver" and f.severity is Severity.ERROR]


def test_the_toolkit_image_for_an_old_glibc_is_the_ubi8_variant_from_1_15_and_centos7_before() -> None:
    assert toolkit_tag_for_old_glibc("v1.17.5-ubuntu20.04") == "v1.17.5-ubi8"
    assert toolkit_tag_for_old_glibc("v1.14.6-ubuntu20.04") == "v1.14.6-centos7"
    assert toolkit_tag_for_old_glibc("1.11.0-ubuntu18.04") == "1.11.0-centos7"


def test_a_read_only_etc_nvidia_under_the_application_profile_hook_names_the_toolkit_release() -> None:
    message = RUNC.format(hook="createContainer ", n=6, stderr=PROFILES)
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: ip-10-0-0-1.ec2.internal, hostDriver: 570.172.08}\n",
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "node": "ip-10-0-0-1.ec2.internal",
            "containers": [{"name": "nvidia-device-plugin-ctr", **_start_error(message)}],
        },
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("toolkit.hook-failed", "toolkit")
    assert _cites(root, "nvidia-container-toolkit.application-profiles-read-only")
    assert "1.20.0" in root.fix and "update-application-profile" in root.fix


def test_a_pod_the_runtime_refused_with_words_gpuchain_does_not_know_is_said_to_be_refused_not_silent() -> None:
    """runc's mount error (opencontainers/runc libcontainer/rootfs_linux.go@v1.2.5 "error mounting %q to rootfs
    at %q: %w") is no catalog entry: the finding quotes it as the runtime's refusal, never "left no log line"."""
    refusal = RUNC.format(hook="", n=0, stderr="").split("error during container init: ")[0] + (
        'error during container init: error mounting "/var/lib/kubelet/device-plugins" to rootfs at '
        '"/var/lib/kubelet/device-plugins": no such device: unknown'
    )
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n, hostDriver: 550.54.15}\n",
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "node": "n",
            "containers": [
                {
                    "name": "nvidia-device-plugin-ctr",
                    "restarts": 3,
                    "state": {"waiting": "RunContainerError", "message": refusal},
                }
            ],
        },
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("device-plugin.not-ready", "device-plugin")
    assert "left no log line" not in root.fix and "no line of it" not in root.fix + root.cause
    assert "container runtime refused" in root.cause and refusal in root.fix


def test_gpu_pods_the_hook_refuses_get_the_repair_of_the_hooks_own_message_read_from_their_events() -> None:
    """A GPU workload refused at start, its message only in the kubelet's Failed Event: the repair is the one for
    the hook's own words (libnvidia-container's cgroup v1 lookup), not the generic "write the runtime config"."""

    def refuse(sim: SimCluster) -> None:
        pod = next(p for p in sim.cluster.list(POD) if name_of(p).startswith("job"))
        status = copy.deepcopy(pod["status"])
        status["containerStatuses"][0].update(
            ready=False,
            restartCount=3,
            state={"waiting": {"reason": "CrashLoopBackOff"}},
            lastState={"terminated": {"reason": "StartError", "exitCode": 128}},
        )
        sim.cluster.patch_status(POD, name=name_of(pod), status=status, namespace=namespace_of(pod))
        harness._event(
            sim.cluster, pod, {"reason": "Failed", "message": "Error: " + RUNC.format(hook="", n=0, stderr=CGROUP)}
        )

    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: a}\nworkloads:\n  - {name: job, gpus: 1, node: a}\n",
        refuse,
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("workload.runtime-hook-failed", "toolkit")
    assert _cites(root, "libnvidia-container.cgroup-subsystem-missing") and "1.8" in root.fix


def test_a_validation_the_runtime_refused_with_words_gpuchain_does_not_know_quotes_the_refusal() -> None:
    """The validator's plugin-validation init container refused by the runtime with a message no catalog entry
    knows (runc's cgroup v2 device filter, opencontainers/runc libcontainer/cgroups/devices/ebpf_linux.go): the fix
    quotes the runtime's refusal, never "left no log line"."""
    refusal = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
        "failed: unable to start container process: error during container init: error setting cgroup config for "
        "procHooks process: bpf_prog_query(BPF_CGROUP_DEVICE) failed: invalid argument: unknown"
    )
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n}\n",
        {
            "do": "pod",
            "daemonset": "nvidia-operator-validator",
            "node": "n",
            "init": [
                {
                    "name": "plugin-validation",
                    "restarts": 4,
                    "state": {"waiting": "CrashLoopBackOff"},
                    "last": {"terminated": "StartError", "exitCode": 128, "message": refusal},
                }
            ],
        },
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("device-plugin.validation-failed", "device-plugin")
    assert "left no log line" not in root.fix and "container runtime refused to start it" in root.fix
    assert refusal in root.fix


def test_the_hooks_load_library_failed_is_the_toolkit_with_its_driver_root_not_the_plugin_it_hit() -> None:
    """NVIDIA/libnvidia-container src/cli/configure.c "initialization error: %s" with src/xfuncs.h "load library
    failed": the hook finds no libnvidia-ml.so.1 under the driver root it was given."""
    load = (
        "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open shared "
        "object file: no such file or directory"
    )
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n, hostDriver: 550.54.15}\n",
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "node": "n",
            "containers": [
                {"name": "nvidia-device-plugin-ctr", **_start_error(RUNC.format(hook="", n=0, stderr=load))}
            ],
        },
    )
    (root,) = _roots(report)
    assert (root.id, root.link) == ("toolkit.hook-failed", "toolkit")
    assert _cites(root, "libnvidia-container.load-library-failed") and "NVIDIA_DRIVER_ROOT" in root.fix
    assert "device-plugin.not-ready" not in report.ids


def _plugin_refused(message: str) -> Report:
    """The standalone device plugin on a k3s node, its only container refused by the runtime with ``message``."""
    return diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: nas, hostDriver: 535.183.01, distribution: k3s}\n",
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "node": "nas",
            "containers": [{"name": "nvidia-device-plugin-ctr", **_start_error(message)}],
        },
    )


def test_a_nvidia_runtime_binary_that_is_gone_is_the_toolkit_not_the_plugin_it_was_asked_to_start() -> None:
    """golang/go src/os/exec_posix.go@go1.22.0 names the path it could not start ("fork/exec"); the containerd shim
    quotes it after "unable to retrieve OCI runtime error": the RuntimeClass's runtime is no binary on the node."""
    message = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: unable to retrieve "
        "OCI runtime error (open /run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/0a1b/log.json: no such file "
        "or directory): fork/exec /usr/local/nvidia/toolkit/nvidia-container-runtime: no such file or directory: unknown"
    )
    report = _plugin_refused(message)
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("toolkit.hook-failed", "toolkit", "nas")
    assert _cites(root, "nvidia-container-runtime.binary-missing")
    assert "install the NVIDIA container toolkit" in root.fix
    assert "device-plugin.not-ready" not in report.ids


def test_a_refusal_no_entry_knows_that_names_the_nvidia_runtime_is_still_the_toolkit() -> None:
    """containerd/go-runc's "%s did not terminate successfully: %w" with the nvidia runtime as the binary: no entry
    knows the words, but the binary that failed is the toolkit's, so the plugin is its victim."""
    message = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
        "/usr/bin/nvidia-container-runtime did not terminate successfully: exit status 2: unknown"
    )
    report = _plugin_refused(message)
    (root,) = _roots(report)
    assert (root.id, root.link) == ("toolkit.hook-failed", "toolkit")
    assert "device-plugin.not-ready" not in report.ids
    assert any("nvidia-container-runtime did not terminate" in e for e in root.evidence)
    assert "restart containerd" in root.fix


def test_a_refusal_that_names_no_toolkit_binary_stays_the_plugins() -> None:
    """runc's mount error names no binary of the toolkit: the plugin link keeps it (the test above it, by contrast)."""
    report = _plugin_refused(RUNC.format(hook="", n=0, stderr="").split(" hook #")[0].replace("error running", "x"))
    assert "toolkit.hook-failed" not in report.ids
