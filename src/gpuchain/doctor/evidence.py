"""What failing containers say, read the same way on every link: the shared part of the walk.

Two sources, both independent of which stack runs the cluster:

- the evidence catalog (`catalog`, scope "anywhere"): an error line a component or the runtime writes,
  with the link it proves broken, whatever pod shows it. "driver/library version mismatch" is the driver's fault even
  when the container that prints it is the toolkit's validation or the device plugin (its runtime
  hook calls NVML first);
- the validations: NVIDIA's validator runs one init container per link (`Stack.validations`); one
  that fails (StartError, CreateContainerError, RunContainerError, a crash loop, a hook exiting 1)
  breaks that link, and the operands that wait behind it are consequences, never the root.

`failure_at(ctx, view, link, failures(ctx, view))` answers, for one link of one node, the first such failure, or None.
The walk asks it before the link's own check, bottom-up, so the lowest link a failure proves broken
is named first.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuchain.doctor import catalog
from gpuchain.doctor.catalog import Entry
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.pods import FAILED_TERMINATION, FAILING
from gpuchain.kube.objects import Obj, name_of
from gpuchain.operator.operands import TOOLKIT

#: The finding a message raises where it proves a link broken in any pod (scope "anywhere" in
#: catalog.yaml, or a missing driver on a stack whose node image should carry it).
FINDING_OF = {"nvml.version-mismatch": "driver.version-mismatch"}
NOT_ON_NODE_IMAGE = "driver.not-on-node-image"


@dataclass(frozen=True)
class Failure:
    """A failing container on a node: the pod, the container, its state and every line it left."""

    pod: Obj
    container: str
    reason: str
    text: str  #: waiting message, last terminated message and the log the gather step read
    init: bool
    restarts: int

    def describe(self) -> str:
        kind = "init container" if self.init else "container"
        more = f", {self.restarts} restarts" if self.restarts else ""
        return f"pod {name_of(self.pod)}: {kind} {self.container} {self.reason}{more}"


def _failing(status: Obj) -> str | None:
    state = status.get("state") or {}
    waiting = (state.get("waiting") or {}).get("reason")
    if waiting in FAILING:
        return str(waiting)
    term = state.get("terminated") or {}
    if term.get("reason") in FAILED_TERMINATION and term.get("exitCode") not in (0, None):
        return str(term["reason"])
    return None


def failures(ctx: Context, view: NodeView) -> list[Failure]:
    """Every failing container of the chain's pods on this node, init containers first."""
    out = []
    for pod in view.operand_pods.values():
        status = pod.get("status") or {}
        for key, init in (("initContainerStatuses", True), ("containerStatuses", False)):
            for cs in status.get(key) or []:
                reason = _failing(cs)
                if reason is None:
                    continue
                last = (cs.get("lastState") or {}).get("terminated") or {}
                lines = [
                    str(((cs.get("state") or {}).get("waiting") or {}).get("message") or ""),
                    str(((cs.get("state") or {}).get("terminated") or {}).get("message") or ""),
                    str(last.get("message") or ""),
                    ctx.log(pod, str(cs.get("name"))),
                ]
                if last.get("reason") in FAILED_TERMINATION and reason == "CrashLoopBackOff":
                    reason = f"CrashLoopBackOff (last: {last['reason']})"
                out.append(
                    Failure(
                        pod,
                        str(cs.get("name")),
                        reason,
                        "\n".join(x for x in lines if x),
                        init,
                        int(cs.get("restartCount") or 0),
                    )
                )
    return sorted(out, key=lambda f: not f.init)


def classify(ctx: Context, text: str) -> tuple[Entry, str, str] | None:
    """The catalog entry that proves a link broken whatever pod shows it, the link, and the line;
    None when no line of ``text`` is such a message."""
    for e in catalog.entries():
        link = e.link if e.scope == "anywhere" else e.on_node_image if ctx.stack.node_image else None
        if link is None:
            continue
        found = catalog.find(text, e.id)
        if found is not None:
            return e, link, found.line
    return None


def _fix(ctx: Context, view: NodeView, finding_id: str, link: str, failure: Failure) -> tuple[Fix | None, str]:
    """The repairing change for a failure that proves ``link`` broken, through the stack's renderer."""
    ns = str((failure.pod.get("metadata") or {}).get("namespace") or ctx.namespace)
    rerun = f"kubectl -n {ns} delete pod {name_of(failure.pod)}"
    if finding_id == "driver.version-mismatch":
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "reboot the node, so the kernel loads the module of the installed driver (or, with no GPU "
                "process left, reload it: rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia); "
                "where the host's package manager upgraded the driver, hold its packages so it does not happen again; "
                f"then {rerun}",
                NOT_SIMULATED: "the loaded module's version is a fact of the node no scenario names",
            },
        )
    elif finding_id == NOT_ON_NODE_IMAGE:
        action = Fix(
            FixOp.NODE,
            view.name,
            {"action": f"replace the node with one built from {ctx.stack.node_image}", "fact": "runtime"},
        )
    elif link == "toolkit":
        toolkit = view.pod(TOOLKIT)
        again = (
            f"restart the container toolkit so it writes its runtime config again (kubectl -n {ctx.namespace} "
            f"delete pod {name_of(toolkit)}), "
            if toolkit is not None
            else "write the nvidia runtime into the containerd config this node's containerd reads (nvidia-ctk "
            "runtime configure --runtime=containerd), "
        )
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": f"the NVIDIA runtime hook fails to create containers here: {again}restart containerd, "
                f"then {rerun}",
                "drain": False,
                NOT_SIMULATED: "the hook's failure is a fact of the node no scenario names",
            },
        )
    else:
        # No repair is known for this failure: running the validation again is the one action.
        pod = name_of(failure.pod)
        rerun_it = Fix(FixOp.DELETE, f"{ns}/{pod}", {"kind": "Pod", "namespace": ns, "name": pod})
        return None, ctx.stack.render(rerun_it) + "   # runs the validation again; gpuchain knows no repair for it"
    return action, ctx.stack.render(action)


def failure_at(ctx: Context, view: NodeView, link: str, found: list[Failure]) -> Finding | None:
    """The first failing container on this node that proves ``link`` broken (by its message in the
    catalog, or by being that link's validation), as a root finding; None when none does. ``found``
    is `failures` of this node: the walk reads them once, not once per link."""
    for failure in found:
        known = classify(ctx, failure.text)
        proves = known[1] if known else ctx.stack.validations.get(failure.container) if failure.init else None
        if proves != link:
            continue
        evidence = [failure.describe()]
        if known is not None:
            entry, _, line = known
            finding_id = FINDING_OF.get(entry.id, NOT_ON_NODE_IMAGE)
            cause = entry.cause
            evidence += [f"says: {line}", entry.cite()]
        else:
            finding_id = f"{link}.validation-failed"
            cause = (
                f"the {failure.container} init container, which proves the {link} link on this node, fails to run "
                f"({failure.reason}); every operand that waits for its ready file waits behind it."
            )
            said = catalog.find(failure.text)
            if said is not None:
                evidence += [f"says: {said.line}", said.entry.cite()]
        action, fix = _fix(ctx, view, finding_id, link, failure)
        return Finding(finding_id, Severity.ERROR, link, cause, tuple(evidence), fix, view.name, action=action)
    return None


def unrecognised(ctx: Context, view: NodeView, link_of: dict[str, str], found: list[Failure]) -> list[Finding]:
    """A warning for each failing container whose last error line no catalog entry knows: the line,
    quoted, and the component it came from, so an unknown failure is never taken for a known one.
    ``link_of`` maps an operand state to its link; ``found`` is `failures` of this node."""
    out = []
    for failure in found:
        line = catalog.unknown_error(failure.text)
        state = next((s for s, p in view.operand_pods.items() if p is failure.pod), "")
        link = ctx.stack.validations.get(failure.container) if failure.init else None
        link = link or link_of.get(state)
        if line is None or link is None:
            continue
        component = f"{state or name_of(failure.pod)} ({failure.container})"
        out.append(
            Finding(
                "log.unrecognised",
                Severity.WARNING,
                link,
                f"unrecognised error from {component}: gpuchain's catalog of the chain's messages does not know "
                "this line, so it names no cause and no repair for it.",
                (failure.describe(), f"unrecognised: {line}"),
                "# no repair known to gpuchain for this message",
                view.name,
            )
        )
    return out
