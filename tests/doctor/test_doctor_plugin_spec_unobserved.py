"""A device plugin DaemonSet whose latest spec its controller has not yet observed (metadata.generation above
status.observedGeneration, what `kubectl rollout status` waits on): its missing pod and the node's empty capacity are
of the spec before the last change, so the doctor says the rollout is pending (a warning with the wait), not that the
plugin failed to register. With the spec observed, the same empty node is the error it always was. Names are
stand-ins."""

from __future__ import annotations

from pathlib import Path

from doctor.small_cluster import diagnosed_case

from gpuchain.doctor.model import Report, Severity


def _report(tmp_path: Path, observed: int) -> Report:
    doc = f"""name: t
source: gpuchain#0
kind: fault
base:
  stack: nvidia-device-plugin
  nodes:
    - {{name: rtx-7, preset: l4-x2, hostDriver: "550.127.05", taints: [{{key: pool, value: render, effect: NoSchedule}}]}}
edits:
  - do: daemonset
    namespace: kube-system
    name: nvidia-device-plugin-daemonset
    spec:
      template:
        spec:
          tolerations: [{{key: pool, operator: Exists, effect: NoSchedule}}, {{key: nvidia.com/gpu, operator: Exists}}]
    status: {{observedGeneration: {observed}}}
expect: {{root: none, nodes: [], fix: {{does: x, match: [x]}}}}
"""
    return diagnosed_case(tmp_path, doc)


def test_a_plugin_spec_not_yet_observed_is_a_pending_rollout_not_a_failed_registration(tmp_path: Path) -> None:
    report = _report(tmp_path, observed=1)
    (found,) = [f for f in report.findings if f.id == "device-plugin.not-registered"]
    assert (found.severity, found.node) == (Severity.WARNING, "rtx-7")
    assert "rollout status daemonset/nvidia-device-plugin-daemonset" in found.fix
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_the_same_node_once_the_spec_is_observed_is_an_error(tmp_path: Path) -> None:
    report = _report(tmp_path, observed=2)
    assert [f for f in report.findings if f.severity is Severity.ERROR and f.node == "rtx-7"]
