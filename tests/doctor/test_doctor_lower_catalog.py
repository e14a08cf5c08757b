"""The lower links' messages read from their source (scripts/upstream-messages: the driver container's scripts,
the driver manager, the NVIDIA runtime and its hooks) reach the doctor's findings by each way a pod shows them: a
driver pod's main container, its driver-manager init container and its peermem sidecar crashing on a line; an
operand, a validation and a GPU workload the runtime refused with the toolkit's own words. Each names the link
and gives the catalog entry's repair, with its key, not a generic restart."""

from __future__ import annotations

from typing import Any

import test_doctor_fixes
from doctor.small_cluster import crash_looping, crashing_pod, diagnosed, refused_at_start

from gpuchain.doctor import Severity, run_doctor
from gpuchain.doctor.links import cuda_branches
from gpuchain.doctor.model import Finding, Report

OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n"
#: runc's wrapping of a failed prestart hook, as containerd's CRI returns it (opencontainers/runc
#: libcontainer/configs/config.go@v1.2.5 "error running %s hook #%d: %w").
RUNC = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: "
    "unable to start container process: error during container init: error running prestart hook #0: "
    "exit status 1, stdout: , stderr: {stderr}: unknown"
)
#: The shim's words when the runtime binary itself exits non-zero before runc runs (the NVIDIA runtime wrapper).
WRAPPER = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
    "/usr/local/nvidia/toolkit/nvidia-container-runtime did not terminate successfully: exit status 1: {stderr}: "
    "unknown"
)
#: NVIDIA/libnvidia-container src/cli/configure.c "ldcache error: %s" with src/xfuncs.h "open failed: %s".
LDCONFIG = "nvidia-container-cli: ldcache error: open failed: /sbin/ldconfig.real: no such file or directory"


def _root(report: Report) -> Finding:
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    return root


def _cites(finding: Finding, entry: str) -> bool:
    return any(e.startswith(f"catalog: {entry} (") for e in finding.evidence)


def _driver_manager(log: str) -> dict[str, Any]:
    """The driver pod of n1 held in its k8s-driver-manager init container, which exits with ``log``."""
    return {
        "do": "pod",
        "daemonset": "nvidia-driver-daemonset",
        "node": "n1",
        "init": [crash_looping("k8s-driver-manager")],
        "logs": {"k8s-driver-manager": log},
    }


def _refused(daemonset: str, message: str, *, init: str = "", container: str = "") -> dict[str, Any]:
    """``daemonset``'s pod on n1 whose container (or init container ``init``) the runtime refused with ``message``."""
    state = {
        "restarts": 4,
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "StartError", "exitCode": 128, "message": message},
    }
    key, name = ("init", init) if init else ("containers", container)
    return {"do": "pod", "daemonset": daemonset, "node": "n1", key: [{"name": name, **state}]}


# -- the driver pod ---------------------------------------------------------------------------------------------


def test_a_precompiled_driver_without_modules_for_the_kernel_turns_precompiled_off() -> None:
    """gpu-driver-container ubuntu22.04/precompiled/nvidia-driver installs linux-modules-nvidia-<branch>-server-
    <kernel>; apt says "Unable to locate package" when Ubuntu publishes none for the node's kernel."""
    log = (
        "Installing Closed NVIDIA driver kernel modules...\n"
        "E: Unable to locate package linux-objects-nvidia-550-server-6.8.0-1021-aws\n"
        "E: Unable to locate package linux-modules-nvidia-550-server-6.8.0-1021-aws\n"
    )
    root = _root(diagnosed(OPERATOR, crashing_pod("nvidia-driver-daemonset", "nvidia-driver-ctr", "n1", log)))
    assert (root.id, root.link, root.node) == ("driver.not-ready", "driver", "n1")
    assert _cites(root, "apt.precompiled-modules-missing") and "usePrecompiled=false" in root.fix


def test_no_kernel_headers_in_the_archive_is_the_kernel_mismatch_with_its_reimage() -> None:
    log = "Installing Linux kernel headers...\nE: Unable to locate package linux-headers-6.8.0-1021-aws\n"
    root = _root(diagnosed(OPERATOR, crashing_pod("nvidia-driver-daemonset", "nvidia-driver-ctr", "n1", log)))
    assert (root.id, root.link) == ("driver.kernel-mismatch", "driver")
    assert _cites(root, "apt.kernel-headers-missing") and "reimage" in root.fix


def test_a_daemon_the_driver_container_cannot_stop_is_killed_by_its_pidfile() -> None:
    log = "Stopping NVIDIA persistence daemon...\nCould not stop NVIDIA persistence daemon\n"
    root = _root(diagnosed(OPERATOR, crashing_pod("nvidia-driver-daemonset", "nvidia-driver-ctr", "n1", log)))
    assert (root.link, root.node) == ("driver", "n1")
    assert _cites(root, "driver-container.daemon-stop-failed")
    assert "/var/run/nvidia-persistenced/nvidia-persistenced.pid" in root.fix and "reboot" in root.fix


def test_the_peermem_sidecar_without_mofed_names_the_rdma_keys() -> None:
    log = "waiting for mellanox ofed and nvidia drivers to be installed\nfailed to load nvidia-peermem module\n"
    root = _root(diagnosed(OPERATOR, crashing_pod("nvidia-driver-daemonset", "nvidia-peermem-ctr", "n1", log)))
    assert root.link == "driver" and _cites(root, "driver-container.peermem-load-failed")
    assert "useHostMofed=true" in root.fix and "rdma.enabled=false" in root.fix


def test_the_driver_manager_not_allowed_to_drain_is_given_the_drain_setting() -> None:
    """NVIDIA/k8s-driver-manager cmd/driver-manager/main.go@v0.9.0: eviction failed and ENABLE_AUTO_DRAIN is off."""
    log = (
        'time="2025-10-01T00:00:00Z" level=info msg="Failed to drain node of GPU pods"\n'
        'time="2025-10-01T00:00:00Z" level=fatal msg="cannot proceed until all GPU pods are drained from the node"\n'
    )
    root = _root(diagnosed(OPERATOR, _driver_manager(log)))
    assert (root.link, root.node) == ("driver", "n1")
    assert _cites(root, "k8s-driver-manager.gpu-pods-not-drained") and "ENABLE_AUTO_DRAIN=true" in root.fix
    assert "kubectl drain n1" in root.fix


def test_a_drain_held_by_a_disruption_budget_names_the_budget_not_the_generic_drain() -> None:
    """The API server's eviction refusal (kubernetes pkg/registry/core/pod/storage/eviction.go@v1.34.4) on one line,
    the driver manager's "failed to drain node" after it: the specific line's repair wins."""
    log = (
        'time="2025-10-01T00:00:00Z" level=info msg="error when evicting pods/\\"job-0\\" -n \\"ml\\" (will retry '
        "after 5s): Cannot evict pod as it would violate the pod's disruption budget.\"\n"
        'time="2025-10-01T00:05:00Z" level=fatal msg="failed to drain node: global timeout reached: 5m0s"\n'
    )
    root = _root(diagnosed(OPERATOR, _driver_manager(log)))
    assert root.link == "driver" and _cites(root, "kube-apiserver.eviction-pdb")
    assert "PodDisruptionBudget" in root.fix and "maxUnavailable" in root.fix


def test_the_driver_manager_that_found_a_host_driver_leaves_the_node_to_it() -> None:
    log = 'time="2025-10-01T00:01:00Z" level=fatal msg="driver is pre-installed on host"\n'
    root = _root(diagnosed(OPERATOR, _driver_manager(log)))
    assert root.link == "driver" and _cites(root, "k8s-driver-manager.host-driver")
    assert "nvidia.com/gpu.deploy.driver=false" in root.fix


# -- the runtime's refusals, with the toolkit's own words --------------------------------------------------------


def test_an_operand_refused_for_a_missing_ldconfig_is_the_toolkit_with_the_config_key() -> None:
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, hostDriver: 550.54.15}\n",
        _refused("nvidia-device-plugin-daemonset", RUNC.format(stderr=LDCONFIG), container="nvidia-device-plugin-ctr"),
    )
    root = _root(report)
    assert (root.id, root.link, root.node) == ("toolkit.hook-failed", "toolkit", "n1")
    assert _cites(root, "libnvidia-container.ldconfig-missing")
    assert "[nvidia-container-cli]" in root.fix and "replace the node" not in root.fix
    assert "device-plugin.not-ready" not in report.ids


def test_a_toolkit_validation_refused_by_the_runtimes_config_is_the_toolkit_with_the_mode_key() -> None:
    """NVIDIA/nvidia-container-toolkit internal/runtime/runtime_factory.go@v1.18.0 "invalid runtime mode: %v"."""
    message = WRAPPER.format(stderr="invalid runtime mode: cdl")
    root = _root(diagnosed(OPERATOR, _refused("nvidia-operator-validator", message, init="toolkit-validation")))
    assert (root.id, root.link) == ("toolkit.validation-failed", "toolkit")
    assert _cites(root, "nvidia-container-runtime.invalid-mode") and 'mode = "auto"' in root.fix


def test_gpu_pods_refused_for_a_missing_runc_are_the_toolkit_with_its_runtimes_key() -> None:
    """NVIDIA/nvidia-container-toolkit internal/oci/runtime_low_level.go@v1.18.0: the wrapper finds no runc."""
    message = WRAPPER.format(
        stderr="error constructing low-level runtime: no runtime binary found from candidate list: [runc crun]"
    )

    root = _root(
        diagnosed(
            "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1}\nworkloads:\n  - {name: job, gpus: 1, node: n1}\n",
            refused_at_start("job", message),
        )
    )
    assert (root.id, root.link, root.node) == ("workload.runtime-hook-failed", "toolkit", "n1")
    assert _cites(root, "nvidia-container-runtime.low-level-runtime-missing") and "runtimes = [" in root.fix


def test_a_driver_container_locked_out_by_another_instance_keeps_one_driver_per_node_not_turned_off() -> None:
    """gpu-driver-container ubuntu22.04/nvidia-driver: flock on /run/nvidia/nvidia-driver.pid, else "An instance of
    the NVIDIA driver is already running, aborting": another driver container on the node, not a host driver."""
    log = "========== NVIDIA Software Installer ==========\nAn instance of the NVIDIA driver is already running, aborting\n"
    root = _root(diagnosed(OPERATOR, crashing_pod("nvidia-driver-daemonset", "nvidia-driver-ctr", "n1", log)))
    assert root.link == "driver" and root.id != "driver.host-driver-conflict"
    assert _cites(root, "driver-container.already-running") and "/run/nvidia/nvidia-driver.pid" in root.fix
    assert "deploy.driver=false" not in root.fix


def test_a_refusal_with_a_toolkit_message_of_scope_anywhere_is_the_hook_not_a_node_image() -> None:
    """A toolkit entry that proves its link wherever it shows (the runtime hook's config check, NVIDIA/nvidia-container-
    toolkit cmd/nvidia-container-runtime-hook/hook_config.go@v1.17.4) is the hook's failure with the entry's repair,
    not the driver's "not on the node image" on a cluster that has no node image."""
    said = (
        "Invalid value for config option 'nvidia-container-runtime.mode'; invalid mode (supported: auto, legacy, cdi)"
    )
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, hostDriver: 550.54.15}\n",
        _refused("nvidia-device-plugin-daemonset", RUNC.format(stderr=said), container="nvidia-device-plugin-ctr"),
    )
    root = _root(report)
    assert (root.id, root.link) == ("toolkit.hook-failed", "toolkit")
    assert _cites(root, "nvidia-container-toolkit.invalid-config-option") and "config.toml" in root.fix
    assert "driver.not-on-node-image" not in report.ids and "replace the node" not in root.fix


def test_gpu_pods_refused_for_a_driver_that_does_not_answer_in_time_get_persistence_mode() -> None:
    """NVIDIA/libnvidia-container src/rpc.c: the hook's NVML helper answers within 10 s or "driver rpc error: timed
    out"; the repair is the persistence daemon, not the generic rewrite of the runtime config."""
    said = "nvidia-container-cli: initialization error: driver rpc error: timed out"
    root = _root(
        diagnosed(
            "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1}\nworkloads:\n  - {name: job, gpus: 1, node: n1}\n",
            refused_at_start("job", RUNC.format(stderr=said)),
        )
    )
    assert (root.id, root.link) == ("workload.runtime-hook-failed", "toolkit")
    assert _cites(root, "libnvidia-container.driver-rpc-timeout") and "nvidia-persistenced" in root.fix


def test_an_nvidiadriver_stopped_on_a_message_the_catalog_knows_gets_that_messages_repair() -> None:
    """NVIDIA/gpu-operator controllers/nvidiadriver_controller.go@v25.10.0 records "GPUDirect Storage driver ... is
    only supported with NVIDIA OpenRM drivers" as the NVIDIADriver's Error condition: the fix names kernelModuleType."""
    sim = test_doctor_fixes._without_driver_daemonset()
    message = (
        "GPUDirect Storage driver '2.20.5' is only supported with NVIDIA OpenRM drivers. Please set "
        "'useOpenKernelModules=true' to enable OpenRM mode"
    )
    sim.cluster.create(test_doctor_fixes._driver("default", "2026-01-01T00:00:00Z", None, ("ReconcileFailed", message)))
    report = run_doctor(sim.cluster, reader=sim.read_log)
    finding = next(f for f in report.findings if f.id == "driver.nvidiadriver-error")
    assert _cites(finding, "gpu-operator.nvidiadriver-gds-needs-open") and "kernelModuleType=open" in finding.fix


def test_a_driver_validation_without_a_loaded_module_loads_the_modules() -> None:
    """NVIDIA/nvidia-container-toolkit internal/system/nvdevices/devices.go@v1.17.4: the validator's device nodes
    need each module's major number in /proc/devices; the fix loads the modules, not the toolkit."""
    log = (
        'time="2025-10-01T00:00:00Z" level=info msg="Error: error validating driver installation: error creating '
        "symlink creator: failed to create NVIDIA device nodes: failed to create device node nvidia-uvm: failed to "
        'determine major: invalid device node"\n'
    )
    report = diagnosed(
        OPERATOR,
        {
            "do": "pod",
            "daemonset": "nvidia-operator-validator",
            "node": "n1",
            "init": [crash_looping("driver-validation")],
            "logs": {"driver-validation": log},
        },
    )
    root = _root(report)
    assert (root.link, root.node) == ("driver", "n1")
    assert _cites(root, "nvidia-container-toolkit.device-major-missing") and "modprobe -a nvidia" in root.fix


def test_the_cuda_a_refused_image_requires_names_the_driver_branch_to_install() -> None:
    """The hook's "unsatisfied condition: cuda>=12.4" (NVIDIA/nvidia-container-toolkit internal/requirements/
    constraints/binary.go@v1.18.0): the fix names branch 550, CUDA 12.4's first (CUDA release notes, Table 3)."""
    said = "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update your driver"
    root = _root(
        diagnosed(
            "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, hostDriver: 535.183.01}\n"
            "workloads:\n  - {name: job, gpus: 1, node: n1}\n",
            refused_at_start("job", RUNC.format(stderr=said)),
        )
    )
    assert (root.id, root.link) == ("driver.too-old", "driver")
    assert "branch 550 or later" in root.fix and "CUDA 12.4" in root.fix


def test_each_cuda_release_maps_to_the_first_branch_that_supports_it() -> None:
    assert cuda_branches.branch_for("unsatisfied condition: cuda>=12.8") == ("12.8", 570)
    assert cuda_branches.branch_for("cuda >= 11.8") == ("11.8", 520)
    assert cuda_branches.branch_for("unsatisfied condition: cuda>=99.0") is None
    assert cuda_branches.branch_for("no requirement here") is None
    # Every later CUDA release needs the same branch or a later one.
    branches = [b for _, b in sorted(cuda_branches.BRANCHES.items())]
    assert branches == sorted(branches)


def test_a_peermem_sidecar_failing_its_probe_is_read_from_the_kubelets_unhealthy_event() -> None:
    """The sidecar runs but is not ready; its probe's output ("nvidia-peermem module is not loaded",
    gpu-driver-container ubuntu22.04/nvidia-driver probe_nvidia_peermem) is only in the kubelet's Unhealthy Event."""
    report = diagnosed(
        OPERATOR,
        {
            "do": "pod",
            "daemonset": "nvidia-driver-daemonset",
            "node": "n1",
            "containers": [
                {"name": "nvidia-driver-ctr", "state": {"running": True}, "ready": True},
                {"name": "nvidia-peermem-ctr", "state": {"running": True}, "ready": False},
            ],
            "events": [
                {
                    "reason": "Unhealthy",
                    "type": "Warning",
                    "message": "Readiness probe failed: nvidia-peermem module is not loaded",
                }
            ],
        },
    )
    root = _root(report)
    assert root.link == "driver" and _cites(root, "driver-container.peermem-load-failed")
    assert "useHostMofed" in root.fix
