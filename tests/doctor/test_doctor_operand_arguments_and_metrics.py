"""Operands that exit on what they are told to do, not on the GPU stack beneath them (issue 26, the twelfth held-out
set's classes): an image started with arguments of another release (Go's flag package refusing one), and
dcgm-exporter asked for DCGM fields the GPU does not serve. Each on a small simulated cluster, with the upstream
facts it stands on named in the test."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import crash_looping, diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp, Report
from gpuchain.sim.build import SimCluster

#: An old device plugin given an argument of a newer operator's DaemonSet: Go's flag package's refusal
#: (golang/go src/flag/flag.go "flag provided but not defined: -%s") and urfave/cli's wrapper and usage text
#: (command.go@v2.27.1 "Incorrect Usage:").
REFUSED = (
    "flag provided but not defined: -nvidia-driver-root\n"
    "Incorrect Usage: flag provided but not defined: -nvidia-driver-root\n"
    "\n"
    "NAME:\n"
    "   NVIDIA Device Plugin - NVIDIA device plugin for Kubernetes\n"
    "\n"
    "USAGE:\n"
    "   nvidia-device-plugin [global options] command [command options] [arguments...]\n"
)


def _roots(report: Report) -> list[Any]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def _plugin(log: str, container: str = "nvidia-device-plugin") -> dict[str, Any]:
    """An edit: the device plugin's pod on n1 crash-looping with ``log`` (its container named as the stack names it:
    the operator's ``nvidia-device-plugin``, the standalone chart's ``nvidia-device-plugin-ctr``)."""
    return {
        "do": "pod",
        "daemonset": "nvidia-device-plugin-daemonset",
        "node": "n1",
        "containers": [crash_looping(container)],
        "logs": {container: log},
    }


def test_a_plugin_pinned_older_than_the_operator_that_refuses_its_arguments_gets_the_pin_dropped() -> None:
    """The operator writes the plugin's arguments for its own release; spec.devicePlugin.version pins an image that
    does not define one of them. The line is read (never "left no log line") and the pin is what the fix drops."""
    report = diagnosed(
        "name: t\nstack: gpu-operator\npolicy: {devicePlugin: {version: v0.7.3-ubi8}}\nnodes:\n  - {name: n1}\n",
        _plugin(REFUSED),
        {"do": "node", "node": "n1", "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("device-plugin", "n1")
    assert "catalog: go.flag-not-defined (golang/go " in " ".join(root.evidence)
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert root.action.changes == {"spec": {"devicePlugin": {"version": None}}}
    assert "v0.7.3-ubi8" in root.cause and "left no log line" not in root.fix
    assert not [f for f in report.findings if f.id == "log.unrecognised"]


def test_arguments_refused_without_a_pin_name_the_daemonset_to_set_from_one_release() -> None:
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1}\n", _plugin(REFUSED, "nvidia-device-plugin-ctr")
    )
    (root,) = _roots(report)
    assert root.link == "device-plugin" and "from one release" in root.fix
    assert "left no log line" not in root.fix


#: dcgm-exporter's fatal line when DCGM refuses its field group with DCGM_ST_NOT_SUPPORTED (NVIDIA/go-dcgm
#: pkg/dcgm/dcgm_structs.h "Feature not supported", wrapped by go-dcgm's "Error watching fields: %s").
UNSUPPORTED = (
    'time="2026-01-01T00:00:00Z" level=info msg="DCGM successfully initialized!"\n'
    'time="2026-01-01T00:00:01Z" level=fatal msg="Error watching fields: Feature not supported"\n'
)
#: A metrics CSV in dcgm-exporter's format (etc/default-counters.csv: field, Prometheus type, help).
CSV = (
    "# Format\n# DCGM FIELD, Prometheus metric type, help message\n"
    "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Ratio of time the graphics engine is active.\n"
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE, gauge, Ratio of cycles the fp64 pipes are active.\n"
)


def _crashing(name: str, log: str) -> dict[str, Any]:
    """An edit: the pod on n1 of DaemonSet ``name`` (its one container named alike) crash-looping with ``log``."""
    return {"do": "pod", "daemonset": name, "node": "n1", "containers": [crash_looping(name)], "logs": {name: log}}


def _metrics(sim: SimCluster) -> None:
    sim.cluster.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "custom-metrics", "namespace": "gpu-operator"},
            "data": {"dcgm-metrics.csv": CSV},
        }
    )


def test_an_exporter_dcgm_refuses_fields_for_gets_its_csv_without_the_profiling_fields() -> None:
    """The exporter's ConfigMap (spec.dcgmExporter.config.name, key dcgm-metrics.csv) is rewritten without the
    DCGM_FI_PROF_* lines it holds, and the pod started again: not a release change."""
    report = diagnosed(
        "name: t\nstack: gpu-operator\npolicy: {dcgmExporter: {config: {name: custom-metrics}}}\n"
        "nodes:\n  - {name: n1}\n",
        _metrics,
        _crashing("nvidia-dcgm-exporter", UNSUPPORTED),
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("exporter", "n1")
    assert "catalog: dcgm.feature-not-supported" in " ".join(root.evidence)
    assert "configmap custom-metrics" in root.fix and "jsonpath='{.data.dcgm-metrics\\.csv}'" in root.fix
    assert "grep -v -E '^ *(DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_PROF_PIPE_FP64_ACTIVE) *,'" in root.fix
    assert "--from-file=dcgm-metrics.csv=metrics.csv" in root.fix and "release" not in root.fix
    assert not [f for f in report.findings if f.id == "log.unrecognised"]


def test_a_crash_whose_log_has_lines_but_none_at_error_level_is_never_said_to_have_left_none() -> None:
    """A log of usage text or progress lines with no line the catalog knows: the fix quotes how it ends."""
    usage = "NAME:\n   some-plugin - does things\n\nUSAGE:\n   some-plugin [global options]\n"
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1}\n", _plugin(usage, "nvidia-device-plugin-ctr")
    )
    (root,) = _roots(report)
    assert "left no log line" not in root.fix and "its log ends 'some-plugin [global options]'" in root.fix


#: CRI-O's refusal with crun's words for a hook that exits non-zero (containers/crun src/libcrun/container.c
#: "error executing hook `%s` (exit code: %d)"), as the kubelet keeps it in the container's waiting message.
CRUN = (
    "container create failed: error executing hook `/usr/local/nvidia/toolkit/nvidia-container-runtime-hook` "
    "(exit code: 1)"
)


def test_a_hook_crun_reports_failed_is_the_toolkit_with_runc_as_crios_default_runtime() -> None:
    """crun names itself in the refusal; the repair is the runtime the hook runs under (CRI-O's default_runtime,
    OpenShift's ContainerRuntimeConfig defaultRuntime), not a line gpuchain cannot place."""
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1, containerRuntime: 'cri-o://1.31.10'}\n",
        {
            "do": "pod",
            "daemonset": "nvidia-operator-validator",
            "node": "n1",
            "init": [
                {"name": "driver-validation", "state": {"terminated": "Completed", "exitCode": 0}},
                {"name": "toolkit-validation", "state": {"waiting": "CreateContainerError", "message": CRUN}},
            ],
        },
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("toolkit", "n1")
    assert "catalog: crun.hook-failed (containers/crun " in " ".join(root.evidence)
    assert "defaultRuntime: runc" in root.fix and 'default_runtime = "runc"' in root.fix
    # the lasting repair beside the workaround: the crun the hook works under, through the cluster's upgrade
    assert "on OpenShift upgrade the cluster" in root.fix and "update the node's crun package" in root.fix
    assert not [f for f in report.findings if f.id == "log.unrecognised"]


def test_an_exporter_dcgm_refuses_fields_for_without_a_csv_in_the_snapshot_is_told_to_remove_them() -> None:
    """No ConfigMap names the exporter's CSV (it reads the image's own file): the fix still removes the unsupported
    profiling fields, in a CSV of its own the pod is given, never a look at the log."""
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n",
        _crashing("nvidia-dcgm-exporter", UNSUPPORTED),
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("exporter", "n1")
    assert "remove the unsupported fields" in root.fix and "DCGM_FI_PROF_*" in root.fix
    assert "kubectl -n gpu-operator delete pod" in root.fix and " logs " not in root.fix


def test_gfd_refused_the_gpu_on_a_mig_node_is_given_the_mig_monitor_capability() -> None:
    """GPU feature discovery's NVML open of GPU 0 refused (NVIDIA/gpu-feature-discovery main.go@v0.4.1 "Error getting
    device: %v" wrapping NVML's Insufficient Permissions): NVIDIA_MIG_MONITOR_DEVICES=all is the repair, not a newer
    release."""
    log = (
        "gpu-feature-discovery: 2026/01/01 00:00:00 Unexpected error: Error generating NVML labels: Error generating "
        "common labels: Error getting device: nvml: Insufficient Permissions\n"
    )
    report = diagnosed(
        "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n",
        _crashing("gpu-feature-discovery", log),
    )
    (root,) = _roots(report)
    assert (root.link, root.node) == ("gfd", "n1")
    assert "catalog: gpu-feature-discovery.device-no-permission" in " ".join(root.evidence)
    assert "NVIDIA_MIG_MONITOR_DEVICES=all" in root.fix


def test_a_plugin_the_loader_stops_on_an_nvml_function_the_driver_lacks_gets_driver_or_release_upgrade() -> None:
    """The loader's "undefined symbol: nvml..." (glibc elf/dl-lookup.c "undefined symbol: %s%s%s"): a binary built
    for a newer driver branch than the host's; the fix upgrades the driver or the component, never reads a log."""
    log = "nvidia-device-plugin: symbol lookup error: nvidia-device-plugin: undefined symbol: nvmlDeviceGetFooBar\n"
    report = diagnosed("name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n", _plugin(log))
    (root,) = _roots(report)
    assert (root.link, root.node) == ("device-plugin", "n1")
    assert "catalog: glibc.undefined-nvml-symbol" in " ".join(root.evidence)
    assert "upgrade the host's NVIDIA driver" in root.fix
