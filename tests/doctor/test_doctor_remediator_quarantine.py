"""A GPU node NVSentinel quarantined for a health event whose recommended action is NONE stays cordoned: the node is
the root, its repair the uncordon (and the taint removed). Words and keys are NVSentinel's own: the condition
GpuMemWatch and its message format "[codes] description - RecommendedAction: ACTION", the ruleset taint
nvidia.com/gpu-xid-error=true:NoSchedule (NVIDIA/NVSentinel docs/INTEGRATIONS.md), the annotations
quarantineHealthEvent and quarantineHealthEventAppliedTaints (fault-quarantine/pkg/common/common.go), the actions of
data-models/protobufs/health_event.proto. A cordoned node nobody's health event explains is maintenance: quiet."""

from __future__ import annotations

import json
from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor.model import Finding, Report, Severity
from gpuchain.kube import NODE
from gpuchain.sim.build import SimCluster

TWO = (
    "name: t\nstack: nvidia-device-plugin\nnodes:\n"
    "  - {name: dgx-07, preset: h100-80gb-x8, hostDriver: 570.133.20}\n"
    "  - {name: dgx-08, preset: h100-80gb-x8, hostDriver: 570.133.20}\n"
)
XID_TAINT = {"key": "nvidia.com/gpu-xid-error", "value": "true", "effect": "NoSchedule"}


def _cordoned(node: str, *taints: dict[str, str]) -> dict[str, Any]:
    return {"do": "node", "node": node, "unschedulable": True, "taints": list(taints)}


def _condition(node: str, kind: str, message: str) -> Any:
    """NVSentinel's platform connector's condition on ``node`` for a fatal check."""

    def edit(sim: SimCluster) -> None:
        status = sim.cluster.get(NODE, name=node)["status"]
        condition = {"type": kind, "status": "True", "reason": f"{kind}IsNotHealthy", "message": message}
        sim.cluster.patch_status(NODE, name=node, status={"conditions": [*status["conditions"], condition]})

    return edit


def _annotated(node: str, event: dict[str, Any], taints: list[dict[str, str]]) -> Any:
    """fault-quarantine's record of the event it quarantined ``node`` for, and of the taints it applied."""

    def edit(sim: SimCluster) -> None:
        notes = {"quarantineHealthEvent": json.dumps(event), "quarantineHealthEventAppliedTaints": json.dumps(taints)}
        sim.cluster.patch(NODE, name=node, patch={"metadata": {"annotations": notes}})

    return edit


def _quarantine(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.id.startswith("node.quarantine")]


def test_a_node_cordoned_and_tainted_for_a_none_action_condition_is_uncordoned_and_untainted() -> None:
    said = "[DCGM_FR_XID_ERROR] Detected XID 13 for GPU 1 - RecommendedAction: NONE"
    report = diagnosed(TWO, _cordoned("dgx-07", XID_TAINT), _condition("dgx-07", "GpuMemWatch", said))
    (found,) = _quarantine(report)
    assert (found.id, found.node, found.link, found.root) == ("node.quarantine-no-action", "dgx-07", "node", True)
    assert found.fix.startswith(
        "kubectl uncordon dgx-07 && kubectl taint node dgx-07 nvidia.com/gpu-xid-error:NoSchedule-"
    )
    assert any("GpuMemWatch=True" in e for e in found.evidence)


def test_the_annotated_event_and_its_applied_taints_are_what_is_removed() -> None:
    pool = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}  # the GPU pool's own taint stays
    event = {"checkName": "SysLogsXIDError", "recommendedAction": "NONE", "message": "XID 43 on GPU 3"}
    report = diagnosed(TWO, _cordoned("dgx-08", pool, XID_TAINT), _annotated("dgx-08", event, [XID_TAINT]))
    (found,) = _quarantine(report)
    assert found.id == "node.quarantine-no-action" and "nvidia.com/gpu-xid-error:NoSchedule-" in found.fix
    assert "nvidia.com/gpu:NoSchedule-" not in found.fix


def test_a_quarantine_waiting_on_a_named_remediation_is_a_warning_not_the_root() -> None:
    said = "[DCGM_FR_FAULTY_MEMORY] GPU memory failure detected on GPU 0 - RecommendedAction: RESTART_VM"
    report = diagnosed(TWO, _cordoned("dgx-07"), _condition("dgx-07", "GpuMemWatch", said))
    (found,) = _quarantine(report)
    assert (found.id, found.severity) == ("node.quarantined", Severity.WARNING) and "RESTART_VM" in found.cause


def test_a_cordoned_node_no_health_event_explains_is_maintenance() -> None:
    report = diagnosed(TWO, _cordoned("dgx-07", {"key": "maintenance", "value": "bios", "effect": "NoSchedule"}))
    assert _quarantine(report) == []
    assert not [f for f in report.findings if f.severity is Severity.ERROR]
