"""A toolkit release that does not support the node's driver branch (releases.yaml container-toolkit.device-nodes-r550).

From 550.40 the driver registers its character device in /proc/devices as "nvidia", not "nvidia-frontend"
(NVIDIA/nvidia-container-toolkit internal/info/proc/devices/devices.go@v1.14.6); the toolkit container before
v1.14.6 takes nvidiactl's major from nvidia-frontend alone (internal/info/proc/devices/devices.go@v1.14.3), so it
exits creating the control device nodes (NVIDIA/nvidia-container-toolkit CHANGELOG.md@v1.14.6;
NVIDIA/gpu-operator#1015). Under an older driver, or with v1.14.6 or later, the same line means what the catalog
says (the driver's module is not loaded) and no toolkit release is named.

The fatal line as the toolkit container writes it: tools/container/nvidia-toolkit/run.go@v1.14.3 ("error running
nvidia-toolkit: %v", "unable to install toolkit: %v"), tools/container/toolkit/toolkit.go@v1.14.3 ("failed to
create control device nodes: %v") and internal/system/nvdevices/devices.go@v1.14.3 ("failed to create device node
%s: %w", "failed to determine major: %w"); the node, versions and counts are stand-ins."""

from __future__ import annotations

import pytest
from doctor.small_cluster import diagnosed

from gpuchain.doctor.model import Finding, Report, Severity
from gpuchain.doctor.releases import defects

DEFECT = "container-toolkit.device-nodes-r550"
FATAL = (
    'time="2024-05-02T09:12:40Z" level=error msg="error running nvidia-toolkit: unable to install toolkit: failed to '
    "create control device nodes: failed to create device node nvidiactl: failed to determine major: invalid device "
    'node"'
)


def _report(*, driver: str, toolkit: str, node: str = "a10-worker-2") -> Report:
    """A GPU Operator node whose driver container installs ``driver`` and whose toolkit container, ``toolkit``,
    exits creating the control device nodes."""
    scenario = f"""
name: toolkit-driver-branch
stack: gpu-operator
policy: {{driver: {{version: "{driver}"}}, toolkit: {{version: {toolkit}}}}}
nodes:
  - {{name: {node}, preset: l4-x2}}
"""
    return diagnosed(
        scenario,
        {"do": "node", "node": node, "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
        {
            "do": "pod",
            "daemonset": "nvidia-container-toolkit-daemonset",
            "node": node,
            "containers": [
                {
                    "name": "nvidia-container-toolkit-ctr",
                    "restarts": 6,
                    "state": {"waiting": "CrashLoopBackOff"},
                    "last": {"terminated": "Error", "exitCode": 1},
                }
            ],
            "logs": {"nvidia-container-toolkit-ctr": f"Creating control device nodes at /run/nvidia/driver\n{FATAL}\n"},
        },
    )


def _toolkit(report: Report, node: str = "a10-worker-2") -> Finding:
    found = [f for f in report.findings if f.link == "toolkit" and f.node == node and f.severity is Severity.ERROR]
    assert found, [f.id for f in report.findings]
    return next(f for f in found if f.id == "toolkit.not-ready")


def test_an_old_toolkit_under_a_newer_branch_driver_is_moved_to_the_fixed_release() -> None:
    """Another driver (555) and toolkit release (v1.13.5-ubi8) than the held-out case: the toolkit release is the
    repair, set where the operator takes it from, its image suffix kept."""
    finding = _toolkit(_report(driver="555.42.06", toolkit="v1.13.5-ubi8"))
    assert f"release: {DEFECT}" in " ".join(finding.evidence)
    assert '"toolkit":{"version":"v1.14.6-ubi8"}' in finding.fix
    assert "nvidia-frontend" in finding.cause


@pytest.mark.parametrize(
    ("driver", "toolkit"),
    [("535.183.01", "v1.14.3-ubuntu20.04"), ("550.90.07", "v1.14.6-ubuntu20.04"), ("550.90.07", "v1.17.4-ubuntu20.04")],
)
def test_the_line_under_an_older_driver_or_a_fixed_toolkit_names_no_toolkit_release(driver: str, toolkit: str) -> None:
    """Before 550.40 the driver still says nvidia-frontend, and v1.14.6 reads both names: the line is the module not
    loaded that the catalog names, and no toolkit release is the repair."""
    finding = _toolkit(_report(driver=driver, toolkit=toolkit))
    assert DEFECT not in " ".join(finding.evidence)
    assert "modprobe" in finding.fix and '"toolkit":{"version"' not in finding.fix


def test_the_driver_range_reads_the_branch_boundary() -> None:
    """550.40 is the first release that registers "nvidia"; an unknown driver names no branch."""
    found = next(d for d in defects() if d.id == DEFECT)
    assert found.under((550, 40, 7)) and found.under((580, 95, 5))
    assert not found.under((545, 29, 6)) and not found.under(None)
    assert next(d for d in defects() if d.id == "k8s-device-plugin.nvml-event-wait").under(None)
