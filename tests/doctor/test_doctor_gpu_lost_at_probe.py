"""A GPU that fell off the bus when the driver probed it (NVIDIA/NVSentinel#155): no Xid, one GPU fewer, and only the
kernel's lines, quoted by NVSentinel's syslog health monitor, say so. The node is the link, with a power-cycle and a
hardware check. The monitor's log is read only on a node short of its peers' GPUs; a short node whose monitor quotes
no such line, and a full node whose monitor does, get no finding. Names, counts and the monitor's wrapper are
stand-ins."""

from __future__ import annotations

from pathlib import Path

from doctor.small_cluster import diagnosed_case

from gpuchain.doctor.model import FixOp, Report, Severity

LINES = (
    "NVRM: The NVIDIA GPU 0000:41:00.0",
    "NVRM: (PCI ID: 10de:2330) installed in this system has",
    "NVRM: fallen off the bus and is not responding to commands.",
    "NVRM: The NVIDIA probe routine failed for 1 device(s).",
)


def _report(tmp_path: Path, *, short: bool = True, said: bool = True) -> Report:
    log = "".join(
        f'        {{"level":"INFO","msg":"Journal entry matched no rule","line":"{line}"}}\n'
        for line in (LINES if said else ("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.172.08",))
    )
    # Three of the eight GPUs offered where the node is short: its peer offers all eight.
    offered = ", capacity: {nvidia.com/gpu: 3}, allocatable: {nvidia.com/gpu: 3}" if short else ""
    doc = f"""name: t
source: gpuchain#0
kind: fault
base:
  stack: gpu-operator
  nodes:
    - {{name: h100-x, preset: h100-80gb-x8}}
    - {{name: h100-y, preset: h100-80gb-x8}}
edits:
  - {{do: node, node: h100-x{offered}}}
  - do: add-daemonset
    namespace: health
    name: syslog-health-monitor
    image: ghcr.io/nvidia/nvsentinel/syslog-health-monitor:v0.9.0
    labels: {{app.kubernetes.io/name: syslog-health-monitor}}
    containers: [syslog-health-monitor]
    nodes: [h100-x, h100-y]
  - do: pod
    daemonset: syslog-health-monitor
    namespace: health
    node: h100-x
    containers: [{{name: syslog-health-monitor, ready: true, state: {{running: true}}}}]
    logs:
      syslog-health-monitor: |
{log}expect: {{root: none, nodes: [], fix: {{does: x, match: [x]}}}}
"""
    return diagnosed_case(tmp_path, doc)


def test_a_gpu_lost_at_probe_on_a_short_node_is_the_node_power_cycled(tmp_path: Path) -> None:
    (found,) = [f for f in _report(tmp_path).findings if f.id == "node.gpu-lost-at-probe"]
    assert (found.link, found.node, found.severity, found.root) == ("node", "h100-x", Severity.ERROR, True)
    assert found.action is not None and found.action.op is FixOp.NODE
    assert "0000:41:00.0" in found.action.changes["action"] and "power-cycle" in found.action.changes["action"]
    assert any("probe routine failed for 1 device" in e for e in found.evidence)


def test_a_short_node_whose_monitor_quotes_no_such_line_is_not_this(tmp_path: Path) -> None:
    assert not [f for f in _report(tmp_path, said=False).findings if f.id == "node.gpu-lost-at-probe"]


def test_a_full_node_is_not_read(tmp_path: Path) -> None:
    """The monitor's log is read only where the node offers fewer GPUs than its peers."""
    report = _report(tmp_path, short=False)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]
