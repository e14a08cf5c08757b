"""Operands that wait behind a lower link's validation: a consequence, whose root is the link validated.

NVIDIA's GPU Operator gates its operands on ready files its validator writes: the device plugin, GFD,
the exporter and the MIG manager each start with a ``toolkit-validation`` init container that loops
until ``/run/nvidia/validations/toolkit-ready`` exists, the toolkit's with a ``driver-validation``
(gpu-operator ``assets/state-*/0500_daemonset.yaml``); the validator's own init containers
(``driver-validation``, ``toolkit-validation``, ``cuda-validation``, ``plugin-validation``, in that order)
write those files as each link is proven. A pod Running in such an init container is not failing, and
not at fault: nothing writes its file. Who should is the validator pod on the node, so the root is read
from it: no validator pod (opted out, or kept off by a taint or selector), a validator the scheduler
cannot place (Pending, the scheduler's words), or a validator still at an earlier validation, whose
link is then the root."""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding, opted_out
from gpuchain.doctor.links.deployed import unscheduled
from gpuchain.doctor.links.driver_validation import hung_driver_validation
from gpuchain.doctor.links.failures import known_failure
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.pods import pod_state
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import TOOLKIT, VALIDATOR

#: The finding of a link whose validation no validator pod completes on the node, by link.
NOT_VALIDATED = {"driver": "driver.not-validated", "toolkit": "toolkit.not-validated"}


def _running_init(ctx: Context, pod: Obj) -> str:
    """The validation init container ``pod`` runs now: its first init container that has not completed, when
    that one runs ("" when the pod has not started it: a sandbox or a mount not set up is read elsewhere)."""
    for cs in (pod.get("status") or {}).get("initContainerStatuses") or []:
        state = cs.get("state") or {}
        if (state.get("terminated") or {}).get("exitCode") == 0:
            continue
        name = str(cs.get("name"))
        return name if state.get("running") and name in ctx.stack.validations else ""
    return ""


def waiting_on(ctx: Context, *, view: NodeView, link: str) -> Finding | None:
    """The root finding for ``link`` when operand pods on this node wait (not failing) in a validation init
    container of ``link`` or above and the validator does not get to write its file; None otherwise.

    Called for a link whose own check reads it OK: a link broken on its own names itself first."""
    if link not in NOT_VALIDATED:
        return None
    # Held in an init container (pod_state names the one), not failing: the pods that may wait in a validation.
    # None on most nodes, where nothing below is worked out.
    held = [(pod, state) for pod, state in view.states if state.waiting_init and not state.failing]
    if not held:
        return None
    order = list(NOT_VALIDATED)
    validator = view.pod(VALIDATOR)
    toolkit = view.pod(TOOLKIT)
    waiting, gates = [], set()
    for pod, state in held:
        gate = ctx.stack.validations.get(_running_init(ctx, pod), "")
        if pod is not validator and gate in order and order.index(gate) >= order.index(link):
            waiting.append(f"pod {state.name}: {state.status}, waiting in {state.waiting_init}")
            if not (pod is toolkit and gate == "driver"):
                gates.add(order.index(gate))
    if not waiting:
        return None
    fid = NOT_VALIDATED[link]
    # Without a validator running here, only pods that wait for its file wait on it (the toolkit's own
    # driver-validation runs the validation itself: nvidia-validator, COMPONENT=driver, WITH_WAIT=true in
    # gpu-operator assets/state-container-toolkit/0500_daemonset.yaml, and waits on the driver); the lowest
    # validation waited on is the root, found when the walk asks for that link.
    absent = validator is None or pod_state(validator).unschedulable
    if absent and (not gates or order.index(link) != min(gates)):
        return None
    if validator is None:
        placed = unscheduled(ctx, view=view, operand=VALIDATOR, link=link)
        if placed is not None and placed.findings:
            first = placed.findings[0]
            return node_finding(
                view,
                fid=first.id,
                sev=first.severity,
                link=link,
                cause=f"{first.cause} No validator pod writes the ready file the operands wait for, so they wait "
                "behind it; they are not the root.",
                evidence=[*first.evidence, *sorted(waiting)],
                fix=first.fix,
                action=first.action,
            )
        label = opted_out(view, VALIDATOR)
        action = Fix(FixOp.LABEL_NODE, view.name, {label.split("=")[0]: None}) if label else None
        return node_finding(
            view,
            fid=fid,
            sev=Severity.ERROR,
            link=link,
            cause=f"no {ctx.ds(VALIDATOR)} pod runs on this node"
            + (f" (it is labelled {label})" if label else "")
            + f", so nothing proves the {link} link and writes the ready file the operands' validation init "
            "containers wait for: they wait forever, and are not the root.",
            evidence=[f"no {ctx.ds(VALIDATOR)} pod on {view.name}", *sorted(waiting)],
            fix=ctx.stack.render(action)
            if action is not None
            else f"# no change gpuchain can name lets {ctx.ds(VALIDATOR)} place its pod here",
            action=action,
        )
    vstate = pod_state(validator)
    if vstate.unschedulable:
        # The scheduler cannot place the validator on its node: its words, and what makes room.
        known = known_failure(ctx, view=view, operand=VALIDATOR, state=vstate, log="")
        if known is None:
            return None
        return node_finding(
            view,
            fid=fid,
            sev=Severity.ERROR,
            link=link,
            cause=f"{known.cause} It writes the ready file the operands' validation init containers wait for, so they "
            "wait behind it; they are not the root.",
            evidence=[*known.evidence, *sorted(waiting)],
            fix=known.fix,
            action=known.action,
        )
    at = _running_init(ctx, validator)
    if vstate.failing or ctx.stack.validations.get(at) != link:
        return None  # failing: failure_at reads it; at another link: that link's turn
    known = hung_driver_validation(ctx, view=view, validator=validator, at=at) if link == "driver" else None
    if known is not None:
        return node_finding(
            view,
            fid=fid,
            sev=Severity.ERROR,
            link=link,
            cause=known.cause,
            evidence=[f"pod {vstate.name}: {vstate.status}, at {at}", *known.evidence, *sorted(waiting)],
            fix=known.fix,
            action=known.action,
        )
    ns = namespace_of(validator) or ctx.namespace
    action = Fix.delete_pod(ns, name_of(validator), **{NOT_SIMULATED: "a validation that hangs is no scenario fact"})
    return node_finding(
        view,
        fid=fid,
        sev=Severity.ERROR,
        link=link,
        cause=f"the validator on this node has not completed its {at} init container, which proves the {link} link "
        "and writes the ready file the operands wait for; the operands wait behind it and are not the root.",
        evidence=[f"pod {vstate.name}: {vstate.status}, at {at}", *sorted(waiting)],
        fix=ctx.stack.render(action) + f"   # the validator runs {at} again from the start",
        action=action,
    )
