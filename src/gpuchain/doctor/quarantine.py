"""A GPU node a health remediator took out of service (cordoned, tainted) for a fault whose own record says it needs no
action, so nothing ever brings it back.

NVIDIA's NVSentinel (NVIDIA/NVSentinel) watches GPUs and quarantines a node on a health event: its platform connector
writes a node condition for a fatal check (``GpuMemWatch``, ``GpuNvlinkWatch``, ``SysLogsXIDError``, ...; an Event on
the node for a non-fatal one), each message ending in the event's recommended action ("RecommendedAction: NONE"),
docs/INTEGRATIONS.md; its fault-quarantine cordons the node (and taints it where a ruleset says so) and records what
it did in node annotations (``quarantineHealthEvent``, ``quarantineHealthEventIsCordoned``,
``quarantineHealthEventAppliedTaints``, fault-quarantine/pkg/common/common.go); its node drainer evicts the pods; its
fault remediation then acts on the recommended action (data-models/protobufs/health_event.proto: NONE,
COMPONENT_RESET, CONTACT_SUPPORT, RUN_FIELDDIAG, RESTART_VM, RESTART_BM, REPLACE_VM, RUN_DCGMEUD, UNKNOWN) and, for
NONE, does nothing. A node quarantined for an event whose every recommended action is NONE therefore stays cordoned:
its repair is to put it back in service by hand, which NVSentinel reads as the end of that quarantine (an uncordon
"cleans up quarantine state (annotations, taints, labels)", docs/cancelling-breakfix.md).

A cordoned or tainted node with no remediator's record on it is someone's maintenance, not a fault: nothing is said.
A recorded action other than NONE is remediation under way: said as a warning, with the action it waits for.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.kube.objects import Obj, annotations_of

#: NVSentinel fault-quarantine's node annotations (fault-quarantine/pkg/common/common.go), read by their last path
#: segment: releases wrote them with and without a domain prefix.
QUARANTINE_EVENT = "quarantineHealthEvent"
QUARANTINE_CORDONED = "quarantineHealthEventIsCordoned"
QUARANTINE_TAINTS = "quarantineHealthEventAppliedTaints"
#: The node condition types NVSentinel's platform connectors write, one per health check (docs/INTEGRATIONS.md,
#: "Standard Condition Types"): GPU checks of DCGM (Gpu<Check>Watch), syslog checks, NVSwitch and system checks.
CONDITION = re.compile(r"^(?:Gpu\w+Watch|SysLogs\w+|NVSwitch\w+|DCGMError|CSPMaintenance)$")
#: An Event NVSentinel posts for a check: its reason names the check (``GpuMemWatchIsNotHealthy``) or its source
#: is one of NVSentinel's components.
EVENT_REASON = re.compile(r"^(?:Gpu\w+Watch|SysLogs\w+|NVSwitch\w+)IsNotHealthy$")
COMPONENTS = ("nvsentinel", "gpu-health-monitor", "syslog-health-monitor", "platform-connector")
#: The recommended action in a health event's message ("RecommendedAction: NONE", "Recommended Action=NONE;").
ACTION = re.compile(r"Recommended\s?Action\s*[=:]\s*([A-Z_]+)", re.IGNORECASE)
#: The recommended action that asks for no remediation (health_event.proto RecommendedAction NONE = 0).
NO_ACTION = "NONE"
#: Taints of a node's own condition or of its cordon (k8s.io/api core/v1 well_known_taints.go): not the remediator's.
SYSTEM_TAINTS = "node.kubernetes.io/"


@dataclass(frozen=True)
class Record:
    """One health event a remediator left on the node: where it was read, its words, its recommended action."""

    where: str
    text: str
    action: str  #: "" where the record names none


def _action(text: str) -> str:
    found = ACTION.search(text)
    return found.group(1).upper() if found else ""


def _annotation(node: Obj, name: str) -> tuple[str, str] | None:
    """(key, value) of the annotation whose last path segment is ``name``."""
    return next(((k, v) for k, v in annotations_of(node).items() if k.rpartition("/")[2] == name), None)


def _annotated_event(node: Obj) -> list[Record]:
    """The quarantining health event fault-quarantine recorded in its annotation (JSON, one event or a list)."""
    found = _annotation(node, QUARANTINE_EVENT)
    if found is None:
        return []
    key, raw = found
    try:
        data = json.loads(raw)
    except ValueError:
        return [Record(f"annotation {key}", raw[:200], _action(raw))]
    events = data if isinstance(data, list) else [data]
    out = []
    for event in events:
        if not isinstance(event, dict):
            continue
        action = str(event.get("recommendedAction", "")).upper()
        action = NO_ACTION if action == "0" else action if not action.isdigit() else ""
        said = f"{event.get('checkName', '?')}: {event.get('message', '')}".strip()
        out.append(Record(f"annotation {key}", said[:200], action or _action(said)))
    return out


def records(view: NodeView) -> list[Record]:
    """The health events a remediator (NVSentinel) left on the node: its annotation, its failing conditions, its
    Warning Events."""
    out = _annotated_event(view.node)
    for c in (view.node.get("status") or {}).get("conditions") or []:
        if CONDITION.match(str(c.get("type", ""))) and c.get("status") == "True":
            text = str(c.get("message") or c.get("reason") or "")
            out.append(Record(f"condition {c.get('type')}=True", text, _action(text)))
    for e in view.events:
        source = str((e.get("source") or {}).get("component", "")).lower()
        if EVENT_REASON.match(str(e.get("reason", ""))) or any(c in source for c in COMPONENTS):
            text = str(e.get("message", ""))
            out.append(Record(f"event {e.get('reason')} ({source or '?'})", text, _action(text)))
    return out


def _applied_taints(view: NodeView) -> list[dict[str, str]]:
    """The taints the remediator put on the node: those its annotation lists, else the node's NoSchedule/NoExecute
    taints that are neither Kubernetes' own nor keyed by a resource the node offers (a GPU pool's own taint)."""
    taints = [dict(t) for t in (view.node.get("spec") or {}).get("taints") or []]
    found = _annotation(view.node, QUARANTINE_TAINTS)
    if found is not None:
        try:
            listed = json.loads(found[1]) or []
        except ValueError:
            listed = []
        keys = {str(t.get("key")) for t in listed if isinstance(t, dict)}
        return [t for t in taints if str(t.get("key")) in keys]
    offered = set((view.node.get("status") or {}).get("capacity") or {})
    return [
        t
        for t in taints
        if t.get("effect") in ("NoSchedule", "NoExecute")
        and not str(t.get("key", "")).startswith(SYSTEM_TAINTS)
        and str(t.get("key")) not in offered
    ]


def _taint_text(t: dict[str, str]) -> str:
    value = f"={t['value']}" if t.get("value") else ""
    return f"{t.get('key')}{value}:{t.get('effect')}"


def quarantined(ctx: Context, view: NodeView) -> list[Finding]:
    """The node cordoned or tainted by a health remediator: an error where every event it recorded asks for no action
    (nothing will bring the node back), a warning where a remediation is named (it waits for that)."""
    cordoned = bool((view.node.get("spec") or {}).get("unschedulable"))
    taints = _applied_taints(view)
    if not cordoned and not taints:
        return []
    said = records(view)
    if not said:
        return []  # cordoned or tainted by a person or a controller that left no health event: maintenance
    actions = sorted({r.action for r in said if r.action})
    held = [
        *(["cordoned (spec.unschedulable: true)"] if cordoned else []),
        *(f"taint {_taint_text(t)}" for t in taints),
    ]
    evidence = [*held, *(f"{r.where}: {r.text}" for r in said[:4])]
    if actions != [NO_ACTION]:
        waits = ", ".join(actions) or "none named"
        return [
            node_finding(
                view,
                fid="node.quarantined",
                sev=Severity.WARNING,
                link="node",
                cause=f"a GPU health remediator (NVSentinel) took the node out of service for a health event and its "
                f"remediation ({waits}) has not brought it back yet; GPU pods are kept off it meanwhile.",
                evidence=evidence,
                fix=f"# follow the remediation the event names ({waits}); once the GPU is repaired the remediator "
                f"uncordons {view.name}, or: kubectl uncordon {view.name}",
            )
        ]
    commands = [f"kubectl uncordon {view.name}"] if cordoned else []
    commands += [f"kubectl taint node {view.name} {t.get('key')}:{t.get('effect')}-" for t in taints]
    work = " && ".join(commands)
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": work,
            "drain": False,
            NOT_SIMULATED: "a remediator's quarantine of a node is not simulated",
        },
    )
    return [
        node_finding(
            view,
            fid="node.quarantine-no-action",
            sev=Severity.ERROR,
            link="node",
            cause="a GPU health remediator (NVSentinel) quarantined the node for a health event whose recommended "
            "action is NONE: no remediation follows such an event, so nothing uncordons the node and its GPUs stay out "
            "of service although the event asks for no repair.",
            evidence=evidence,
            fix=f"{work}   # return the node to service (NVSentinel reads the uncordon as the end of this quarantine "
            "and clears its annotations and taints); so it does not recur, keep the fault-quarantine ruleset that "
            "matched from quarantining events whose recommended action is NONE",
            action=action,
        )
    ]
