"""ClusterPolicy status as a pure function of what the operator observed.

Per operand: ready / notReady / disabled with a reason and a message a person can act on.
The chain is ordered, so an operand whose prerequisite is not ready says "waiting for X"
rather than repeating X's failure; the Ready condition names the lowest broken link.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuchain.operator.operands import OPERANDS, Operand
from gpuchain.operator.policy import Problem

StatusAndConditions = tuple[dict[str, Any], list[dict[str, str]]]

#: Container waiting reasons that mean "broken", not "still starting".
FAILURE_REASONS = frozenset(
    {"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError", "RunContainerError", "Error"}
)


@dataclass(frozen=True, kw_only=True)
class OperandStatus:
    """One operand's line in ``status.operands``."""

    state: str  # ready | notReady | disabled
    reason: str
    message: str
    ready: str = ""  # "ready/desired" pods

    def to_dict(self) -> dict[str, str]:
        """The JSON stored in the ClusterPolicy status."""
        out = {"state": self.state, "reason": self.reason, "message": self.message}
        if self.ready:
            out["ready"] = self.ready
        return out


def _pod_problem(pods: Iterable[dict[str, Any]]) -> tuple[str, str] | None:
    """(reason, "node: reason (container)") of the first pod that is failing or stuck."""
    stuck: tuple[str, str] | None = None
    for pod in sorted(pods, key=lambda p: str(p.get("spec", {}).get("nodeName", ""))):
        status = pod.get("status") or {}
        node = pod.get("spec", {}).get("nodeName", "?")
        for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason", "")
            if reason in FAILURE_REASONS:
                return reason, f"{node}: {reason} ({cs.get('name')})"
            if stuck is None and (waiting or (cs.get("state") or {}).get("running")) and not cs.get("ready"):
                stuck = ("PodInitializing", f"{node}: {cs.get('name')} not ready")
    return stuck


def own_status(ds: dict[str, Any] | None, pods: list[dict[str, Any]]) -> OperandStatus:
    """Readiness of one DaemonSet from its status and its pods, ignoring the rest of the chain."""
    if ds is None:
        return OperandStatus(state="notReady", reason="Deploying", message="DaemonSet not created yet")
    st = ds.get("status") or {}
    generation = int(ds.get("metadata", {}).get("generation") or 0)
    if not st or int(st.get("observedGeneration") or 0) < generation:
        return OperandStatus(
            state="notReady", reason="Deploying", message="DaemonSet not yet observed by its controller"
        )
    desired = int(st.get("desiredNumberScheduled") or 0)
    ready = int(st.get("numberReady") or 0)
    updated = int(st.get("updatedNumberScheduled") or desired)
    counts = f"{ready}/{desired}"
    if desired == 0:
        return OperandStatus(
            state="ready", reason="NoNodesSelected", message="no node selects this operand", ready=counts
        )
    if ready >= desired and updated >= desired:
        return OperandStatus(state="ready", reason="Ready", message=f"{counts} pods ready", ready=counts)
    problem = _pod_problem(pods)
    if problem is None:
        return OperandStatus(state="notReady", reason="PodsNotReady", message=f"{counts} pods ready", ready=counts)
    return OperandStatus(
        state="notReady", reason=problem[0], message=f"{counts} pods ready; {problem[1]}", ready=counts
    )


def chain_status(
    enabled: dict[str, bool],
    *,
    daemonsets: dict[str, dict[str, Any]],
    pods: list[dict[str, Any]],
    served_by: Mapping[str, str] | None = None,
) -> dict[str, OperandStatus]:
    """Status of every operand in chain order; a not-ready operand behind a broken link waits for it.
    ``served_by``: state -> the DaemonSet that runs it (the node agent's for its roles); default each
    operand's own."""
    out: dict[str, OperandStatus] = {}
    for op in dependency_order(OPERANDS):
        if not enabled.get(op.state, False):
            out[op.state] = OperandStatus(
                state="disabled", reason="Disabled", message=f"{op.spec_key}.enabled is false"
            )
            continue
        name = (served_by or {}).get(op.state, op.name)
        mine = [p for p in pods if p.get("metadata", {}).get("labels", {}).get("app") == name]
        own = own_status(daemonsets.get(name), mine)
        blocker = _first_blocker(op, out)
        if own.state == "notReady" and blocker is not None:
            own = OperandStatus(
                state="notReady",
                reason=f"WaitingFor{_camel(blocker)}",
                message=f"waiting for {blocker} ({out[blocker].reason}); {own.message}",
                ready=own.ready,
            )
        out[op.state] = own
    return {op.state: out[op.state] for op in OPERANDS}


def dependency_order(operands: Iterable[Operand]) -> list[Operand]:
    """Operands with every operand after the ones it ``needs`` (stable: ties keep their order).

    Status is computed in this order so "waiting for X" is decided with X's status known,
    whatever order the operands are listed (rolled out) in.
    """
    pending = list(operands)
    names = {op.state for op in pending}
    placed: list[Operand] = []
    done: set[str] = set()
    while pending:
        ready = next((op for op in pending if all(n in done or n not in names for n in op.needs)), None)
        if ready is None:
            raise ValueError(f"operand needs form a cycle: {[op.state for op in pending]}")
        placed.append(ready)
        done.add(ready.state)
        pending.remove(ready)
    return placed


#: A need that is not in the status at all (not deployed by this operator) blocks nothing.
_ABSENT = OperandStatus(state="disabled", reason="Absent", message="")


def root_cause(operands: dict[str, OperandStatus]) -> str | None:
    """The lowest broken link: the first not-ready operand whose own needs are all satisfied."""
    for op in dependency_order(o for o in OPERANDS if o.state in operands):
        if operands[op.state].state == "notReady" and all(
            operands.get(need, _ABSENT).state != "notReady" for need in op.needs
        ):
            return op.state
    return None


def _first_blocker(op: Operand, done: dict[str, OperandStatus]) -> str | None:
    for need in op.needs:
        st = done.get(need)
        if st is not None and st.state == "notReady":
            return need
    return None


def _camel(state: str) -> str:
    return "".join(part.capitalize() for part in state.split("-"))


def condition(type_: str, *, ok: bool, reason: str, message: str) -> dict[str, str]:
    """A metav1.Condition without its transition time (added by `with_transition_times`)."""
    return {"type": type_, "status": "True" if ok else "False", "reason": reason, "message": message}


def with_transition_times(new: list[dict[str, str]], *, old: list[dict[str, Any]], now: str) -> list[dict[str, str]]:
    """Keep lastTransitionTime when a condition's status did not change, so status stays stable."""
    previous = {c.get("type"): c for c in old}
    out = []
    for cond in new:
        prev = previous.get(cond["type"])
        same = prev is not None and prev.get("status") == cond["status"]
        stamp = str(prev.get("lastTransitionTime")) if same and prev is not None else now
        out.append({**cond, "lastTransitionTime": stamp})
    return out


def policy_status(
    operands: dict[str, OperandStatus],
    *,
    gpu_nodes: int,
    nfd_seen: bool,
    namespace: str,
    generation: int,
) -> StatusAndConditions:
    """Overall status (without conditions) and its conditions, from the operand statuses."""
    broken = [s for s in operands if operands[s].state == "notReady"]
    if gpu_nodes == 0:
        reason = "NoGPUNodes" if nfd_seen else "NFDLabelsMissing"
        message = (
            "no node has an NVIDIA PCI label (feature.node.kubernetes.io/pci-10de.present=true) "
            "or nvidia.com/gpu.present=true"
            if nfd_seen
            else "no node carries NFD labels (feature.node.kubernetes.io/*): install node-feature-discovery "
            "or label GPU nodes nvidia.com/gpu.present=true"
        )
        ready = condition("Ready", ok=False, reason=reason, message=message)
    elif broken:
        root = root_cause(operands) or broken[0]
        st = operands[root]
        waiting = [s for s in broken if s != root and operands[s].reason.startswith("WaitingFor")]
        tail = f"; waiting behind it: {', '.join(waiting)}" if waiting else ""
        ready = condition(
            "Ready", ok=False, reason="OperandNotReady", message=f"{root} not ready: {st.reason}: {st.message}{tail}"
        )
    else:
        ready = condition(
            "Ready", ok=True, reason="Reconciled", message=f"all operands ready on {gpu_nodes} GPU node(s)"
        )
    error = condition("Error", ok=False, reason="NoError", message="")
    status = {
        "state": "ready" if ready["status"] == "True" else "notReady",
        "namespace": namespace,
        "gpuNodes": gpu_nodes,
        "observedGeneration": generation,
        "operands": {s: operands[s].to_dict() for s in operands},
    }
    return status, [ready, error]


def invalid_status(problems: Sequence[Problem | str], *, namespace: str, generation: int) -> StatusAndConditions:
    """Status of a policy the operator refuses to act on: nothing is deployed or changed."""
    message = "; ".join(str(p) for p in problems)
    status = {"state": "notReady", "namespace": namespace, "observedGeneration": generation}
    return status, [
        condition("Ready", ok=False, reason="InvalidSpec", message="ClusterPolicy not applied: fix the spec"),
        condition("Error", ok=True, reason="InvalidSpec", message=message),
    ]


def ignored_status(active: str, generation: int) -> StatusAndConditions:
    """Status of an extra ClusterPolicy: only the oldest one is honoured, as in gpu-operator."""
    return {"state": "ignored", "observedGeneration": generation}, [
        condition(
            "Ready",
            ok=False,
            reason="Ignored",
            message=f"ClusterPolicy {active!r} is the active one; only one is honoured",
        ),
    ]


def aside_status(message: str, *, namespace: str, generation: int) -> StatusAndConditions:
    """Status while NVIDIA's GPU Operator deploys the same operands: gpuchain stands aside."""
    status = {"state": "notReady", "namespace": namespace, "observedGeneration": generation}
    return status, [
        condition("Ready", ok=False, reason="NVIDIAGPUOperatorPresent", message=message),
        condition("Error", ok=False, reason="NoError", message=""),
    ]
