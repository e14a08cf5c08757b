"""Why a DaemonSet places no pod on a node: an untolerated taint or a selector the node misses.

The DaemonSet controller schedules a pod on every node that its template's nodeSelector and
required node affinity match and whose NoSchedule/NoExecute taints it tolerates; these are the
same rules, as pure functions, so the doctor can name the taint or the label instead of saying
"not scheduled".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuchain.kube.objects import Obj, labels_of


@dataclass(frozen=True, kw_only=True)
class Blocker:
    """What keeps the DaemonSet off the node."""

    kind: str  #: "taint" or "selector"
    detail: dict[str, Any]  #: the taint, or {"key", "values", "operator"} of the unmet term
    owner: str = "DaemonSet"  #: what is kept off, for the evidence line ("DaemonSet", "operator's pod")
    #: Every NoSchedule/NoExecute taint of the node the pod does not tolerate (``detail`` is the first):
    #: a fix that tolerates one of several still leaves the pod off the node.
    taints: tuple[dict[str, Any], ...] = ()

    def describe(self) -> str:
        """One line for evidence."""
        d = self.detail
        if self.kind == "taint":
            names = ", ".join(taint_text(t) for t in self.taints or (d,))
            many = "s" if len(self.taints) > 1 else ""
            return f"node taint{many} {names} {'are' if many else 'is'} not tolerated by the {self.owner}"
        return f"the {self.owner} needs node label {d['key']} {d['operator']} {d.get('values') or ''}".rstrip()


def taint_text(taint: dict[str, Any]) -> str:
    """``key[=value]:effect``, as kubectl writes a taint."""
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint['key']}{value}:{taint['effect']}"


def tolerations_for(block: Blocker) -> list[dict[str, Any]]:
    """The tolerations that let the pod past every taint of ``block`` (Exists on key and effect, so a
    value change of the taint does not keep it off again)."""
    return [{"key": t["key"], "operator": "Exists", "effect": t["effect"]} for t in block.taints or (block.detail,)]


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """Does one of ``tolerations`` tolerate ``taint`` (Kubernetes' matching rules)?"""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and str(t.get("value", "")) == str(taint.get("value", "")):
            return True
    return False


def _term_ok(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return labels.get(str(key)) in values
    if op == "NotIn":
        return labels.get(str(key)) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return True


def blocker(ds: Obj, node: Obj) -> Blocker | None:
    """The first thing that keeps ``ds`` off ``node``, None when the DaemonSet should place a pod."""
    return pod_blocker(((ds.get("spec") or {}).get("template") or {}).get("spec") or {}, node)


def pod_blocker(spec: Obj, node: Obj) -> Blocker | None:
    """The first taint or node selector that keeps a pod of ``spec`` off ``node`` (the scheduler's
    node filters, as the DaemonSet controller also applies them), None when none does."""
    untolerated = tuple(
        dict(t)
        for t in (node.get("spec") or {}).get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(spec.get("tolerations") or [], t)
    )
    if untolerated:
        return Blocker(kind="taint", detail=untolerated[0], taints=untolerated)
    labels = labels_of(node)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return Blocker(kind="selector", detail={"key": key, "operator": "=", "values": [value]})
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(all(_term_ok(e, labels) for e in t.get("matchExpressions") or []) for t in terms):
        first = next(e for e in terms[0].get("matchExpressions") or [] if not _term_ok(e, labels))
        return Blocker(kind="selector", detail={k: first.get(k) for k in ("key", "operator", "values")})
    return None
