"""The not-ready finding of a failing operand pod, for every link: the known failure its output names with that
failure's fix (`failures.known_failure`), else the catalog's entry for its line, else what its state alone shows
(no line left), else its unknown line quoted with the link's next step, the repair of its shape first."""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.evidence import refused_message
from gpuchain.doctor.links.common import Known, Result, container_image, node_finding
from gpuchain.doctor.links.driver_sidecars import sidecar_repair
from gpuchain.doctor.links.failures import known_failure
from gpuchain.doctor.links.releases import newest_release, release_repair, with_release
from gpuchain.doctor.model import Fix, LinkState, Severity
from gpuchain.doctor.next_steps import last_line, next_step, shape_of, silent_fix
from gpuchain.doctor.node_image import os_tag
from gpuchain.doctor.owners import owner_ds, repair_target, silent
from gpuchain.doctor.pods import PodState
from gpuchain.doctor.releases import moved_image, newer_image, showing
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import DRIVER, Operand

#: The links whose error no catalog entry knows is answered first with their component's newest release (the
#: device plugin, GFD, the exporter: a line of their own code that the later releases may have fixed).
UPGRADED = ("device-plugin", "gfd", "exporter")


def known_not_ready(view: NodeView, *, link: str, what: str, state: PodState, known: Known) -> Result:
    """The link broken by a failure the pod's log names: its cause, evidence and fix."""
    finding = node_finding(
        view,
        fid=f"{link}.not-ready",
        sev=Severity.ERROR,
        link=link,
        cause=known.cause,
        evidence=[state.describe(), *known.evidence],
        fix=known.fix,
        action=known.action,
    )
    return Result(LinkState.BROKEN, f"{what} {state.status}", (finding,))


def _first_unready(pod: Obj) -> str:
    """The name of the pod's first container that is not ready ("" when all are)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((str(cs.get("name", "")) for cs in statuses if not cs.get("ready")), "")


def state_only(ctx: Context, *, view: NodeView, operand: Operand, link: str, what: str, state: PodState) -> Known:
    """A failing pod that left no line to read (no log was collected, no termination message): what its state
    alone shows (a container that exits at every start, an init container that never finishes, a readiness
    probe that fails, containers never started), and the fix aimed at it: the log that holds the reason (the
    previous run's, for a container that restarts), the object to repair once it is read, and the stack's own
    way out of ``link`` where it has one (`own_way`)."""
    pod = view.pod(operand) or {}
    spec = pod.get("spec") or {}
    inits = {str(c.get("name")) for c in spec.get("initContainers") or []}
    container = state.container or _first_unready(pod)
    kind = "init container" if container in inits else "container"
    ns, name = state.restart_in(ctx.namespace), state.name
    nothing = "no line of it was collected (no log, no termination message)"
    if state.failing and state.restarts:
        cause = (
            f"the {what} is {state.status}: its {kind} {container} exits at every start ({state.restarts} restarts) "
            f"and {nothing}, so the reason is in its previous run's log."
        )
        read = f"kubectl -n {ns} logs {name} -c {container} --previous"
    elif state.waiting_init:
        cause = (
            f"the {what} is {state.status}: it is held in its init container {container}, which has not finished, so "
            f"its main container never starts; {nothing}."
        )
        read = f"kubectl -n {ns} logs {name} -c {container}"
    elif container and not state.failing and state.status.startswith("Running"):
        cause = (
            f"the {what} runs but its {kind} {container} is not ready: its readiness probe fails"
            + (f" and it restarted {state.restarts} times" if state.restarts else "")
            + f"; {nothing}."
        )
        read = f"kubectl -n {ns} logs {name} -c {container}"
    else:
        cause = f"the {what} is {state.status} and no Event or line says why."
        read = f"kubectl -n {ns} describe pod {name}"
    again = ctx.stack.render(Fix.delete_pod(ns, name))
    image = container_image(pod, container)
    if operand is DRIVER and state.failing and state.restarts:
        # A sidecar of the driver pod (nvidia-fs, GDRCopy, nvidia-peermem) is repaired in its own key.
        car = sidecar_repair(
            ctx, pod=pod, state=state, container=container, image=image, dist=os_tag(view.node), read=read, again=again
        )
        if car is not None:
            return car
    fix = silent_fix(
        ctx, link=link, read=read, what=f"the {what}", target=repair_target(ctx, pod=pod, operand=operand), again=again
    )
    if link in UPGRADED and (moved_image(image) is not None or (state.failing and newer_image(image) is not None)):
        # A crash of a release older than its component's newest (or of an image that ended at the one it runs):
        # the later release carries its maintainers' fixes; the line, once read, is the step after it.
        fix = newest_release(ctx, pod=pod, operand=operand, otherwise=fix.lstrip("# "))
    return Known(cause=cause, evidence=(), action=None, fix=fix)


def not_ready(
    ctx: Context, *, view: NodeView, operand: Operand, link: str, what: str, state: PodState, log: str, cause: str
) -> Result:
    """An operand pod failing: the known failure its log names with its fix, else its state and last error, else
    (no line at all) what its state alone shows."""
    # A container the runtime refused never wrote a log: the runtime's message is its only word.
    refused = refused_message(view, view.pod(operand) or {})
    log = "\n".join(x for x in (log, "" if refused in log else refused) if x)
    known = known_failure(ctx, view=view, operand=operand, state=state, log=log)
    if known is not None:
        known = with_release(ctx, view=view, pod=view.pod(operand), operand=operand, known=known, log=log)
        return known_not_ready(view, link=link, what=what, state=state, known=known)
    found = catalog.known_error(log, link)
    if found is not None:
        # A message the catalog knows and no check acts on as data: its cause and repair, as the catalog says;
        # where it is a defect of the release the pod runs, that release's fix first.
        pod = view.pod(operand)
        fix = found.entry.repair(
            view.name, namespace=state.restart_in(ctx.namespace), pod=state.name, daemonset=owner_ds(pod or {})
        )
        release = release_repair(ctx, view=view, pod=pod, operand=operand, shown=showing("log", found.entry.id))
        known = Known(
            cause=" ".join((found.entry.cause, release.cause)) if release else found.entry.cause,
            evidence=(*found.evidence(), *(release.evidence if release else ())),
            action=release.action if release else None,
            fix=f"{release.fix}; otherwise: {fix}" if release else f"# {fix}",
        )
        return known_not_ready(view, link=link, what=what, state=state, known=known)
    if silent("\n".join((log, state.message))):
        return known_not_ready(
            view,
            link=link,
            what=what,
            state=state,
            known=state_only(ctx, view=view, operand=operand, link=link, what=what, state=state),
        )
    # Nothing known: the line itself is quoted (and reported as unrecognised by evidence.unrecognised), with
    # the link's next action; the pod is run again after it.
    again = Fix.delete_pod(state.restart_in(ctx.namespace), state.name)
    line, last = catalog.unknown_error(log) or "", last_line(log)
    image = container_image(view.pod(operand), state.container or ctx.container(operand))
    car = (
        sidecar_repair(
            ctx,
            pod=view.pod(operand) or {},
            state=state,
            container=state.container,
            image=image,
            dist=os_tag(view.node),
            read=f"kubectl -n {state.restart_in(ctx.namespace)} logs {state.name} -c {state.container} --previous",
            again=ctx.stack.render(again),
            said=line or last,
        )
        if operand is DRIVER and state.failing and not refused
        else None
    )
    if car is not None:
        # A sidecar of the driver pod fails with a line gpuchain does not know: its own key, not the driver's build.
        return known_not_ready(view, link=link, what=what, state=state, known=car)
    step = next_step(ctx, link=link, line=line, refused=refused, last=last, image=image, node=view.name)
    # A line of a shape gpuchain knows has that shape's repair first (in `step`); a newer release is not it.
    upgrade = link in UPGRADED and shape_of(ctx, link=link, said=(line, refused, last)) is None
    if refused:
        cause = f"the {what} never started: the container runtime refused its container ({state.status})."
    return Result(
        LinkState.BROKEN,
        f"{what} {state.status}",
        (
            node_finding(
                view,
                fid=f"{link}.not-ready",
                sev=Severity.ERROR,
                link=link,
                cause=cause + " gpuchain does not recognise the failure.",
                evidence=[
                    state.describe(),
                    f"runtime: {refused}" if refused else state.message,
                    *([f"unrecognised: {line}"] if line else []),
                ],
                fix=newest_release(
                    ctx,
                    pod=view.pod(operand) if upgrade else None,
                    operand=operand,
                    otherwise=f"{step}; the pod retries by itself ({ctx.stack.render(again)} starts it at once)",
                ),
            ),
        ),
    )
