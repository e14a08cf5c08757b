"""What failing containers say, read the same way on every link: the shared part of the walk.

Two sources, both independent of which stack runs the cluster:

- the message catalog (`CATALOG`): an error line a component or the runtime writes, with the link it
  proves broken, whatever pod shows it. "driver/library version mismatch" is the driver's fault even
  when the container that prints it is the toolkit's validation or the device plugin (its runtime
  hook calls NVML first);
- the validations: NVIDIA's validator runs one init container per link (`Stack.validations`); one
  that fails (StartError, CreateContainerError, RunContainerError, a crash loop, a hook exiting 1)
  breaks that link, and the operands that wait behind it are consequences, never the root.

`failure_at(ctx, view, link)` answers, for one link of one node, the first such failure, or None.
The walk asks it before the link's own check, bottom-up, so the lowest link a failure proves broken
is named first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.pods import FAILED_TERMINATION, FAILING
from gpuchain.kube.objects import Obj, name_of
from gpuchain.operator.operands import TOOLKIT


@dataclass(frozen=True)
class Message:
    """One error message of the catalog: its pattern, the link it proves broken, and why."""

    id: str  #: the finding it raises
    link: str
    patterns: tuple[str, ...]
    cause: str
    source: str  #: where the message is written (repo path), for the finding's evidence
    node_image_only: bool = False  #: only where the stack's node image should carry the driver


CATALOG: tuple[Message, ...] = (
    Message(
        "driver.version-mismatch",
        "driver",
        (r"driver/library version mismatch",),
        "the NVIDIA kernel module loaded on this node is another version than the driver's user-space "
        "libraries (NVML): the driver was upgraded or reinstalled while the old module stayed loaded, so "
        "every NVML call fails (nvidia-smi, the runtime hook, the device plugin) until the module is reloaded.",
        "NVML's NVML_ERROR_LIB_RM_VERSION_MISMATCH (NVIDIA/go-nvml pkg/nvml/return.go), as "
        "nvidia-container-cli and nvidia-smi print it",
    ),
    Message(
        "driver.not-on-node-image",
        "driver",
        (r"Incompatible platform detected", r"nvml error: driver not loaded"),
        "the device plugin finds no NVIDIA driver library on the node (libnvidia-ml.so.1 cannot be loaded, "
        "'Incompatible platform detected'), and on this stack the node image is what carries the driver and "
        "the nvidia runtime: the node was built from an image without them.",
        "NVIDIA/k8s-device-plugin internal/rm factory.go ('Incompatible platform detected'); "
        "nvidia-container-cli ('nvml error: driver not loaded')",
        node_image_only=True,
    ),
)


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


def classify(ctx: Context, text: str) -> tuple[Message, str] | None:
    """The catalog entry the text matches (with the line), None when the catalog does not know it."""
    for msg in CATALOG:
        if msg.node_image_only and not ctx.stack.node_image:
            continue
        for pattern in msg.patterns:
            for line in text.splitlines():
                if re.search(pattern, line, re.IGNORECASE):
                    return msg, line.strip()
    return None


def _fix(ctx: Context, view: NodeView, msg: Message | None, link: str, failure: Failure) -> tuple[Fix | None, str]:
    ns = str((failure.pod.get("metadata") or {}).get("namespace") or ctx.namespace)
    if msg is not None and msg.id == "driver.version-mismatch":
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": "reboot the node, so the kernel loads the module of the installed driver (or, with no GPU "
                "process left, reload it: rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia); "
                "where the host's package manager upgraded the driver, hold its packages so it does not happen again; "
                f"then kubectl -n {ns} delete pod {name_of(failure.pod)}",
                NOT_SIMULATED: "the loaded module's version is a fact of the node no scenario names",
            },
        )
        return action, ctx.stack.render(action)
    if msg is not None and msg.id == "driver.not-on-node-image":
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": f"replace the node with one built from {ctx.stack.node_image}",
                "fact": "runtime",
            },
        )
        return action, ctx.stack.render(action)
    if link == "toolkit":
        toolkit = view.pod(TOOLKIT)
        again = (
            f"restart the container toolkit so it writes its runtime config again (kubectl -n {ctx.namespace} "
            f"delete pod {name_of(toolkit)}), "
            if toolkit is not None
            else "check the nvidia runtime entry of containerd's config, "
        )
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": f"the NVIDIA runtime hook fails to create containers here: {again}restart containerd, "
                f"then kubectl -n {ns} delete pod {name_of(failure.pod)}",
                "drain": False,
                NOT_SIMULATED: "the hook's failure is a fact of the node no scenario names",
            },
        )
        return action, ctx.stack.render(action)
    return None, (
        f"fix what {failure.container} reports; then kubectl -n {ns} delete pod {name_of(failure.pod)} to run the "
        "validation again"
    )


def failure_at(ctx: Context, view: NodeView, link: str) -> Finding | None:
    """The first failing container on this node that proves ``link`` broken (by its message in the
    catalog, or by being that link's validation), as a root finding; None when none does."""
    for failure in failures(ctx, view):
        known = classify(ctx, failure.text)
        proves = known[0].link if known else ctx.stack.validations.get(failure.container) if failure.init else None
        if proves != link:
            continue
        msg, line = known if known else (None, "")
        if msg is not None:
            finding_id, cause = msg.id, msg.cause
        else:
            finding_id = f"{link}.validation-failed"
            cause = (
                f"the {failure.container} init container, which proves the {link} link on this node, fails to run "
                f"({failure.reason}); every operand that waits for its ready file waits behind it."
            )
        first = next((x for x in failure.text.splitlines() if x.strip()), "")
        evidence = [failure.describe(), f"says: {line or first}" if (line or first) else ""]
        if msg is not None:
            evidence.append(f"catalog: {msg.source}")
        action, fix = _fix(ctx, view, msg, link, failure)
        return Finding(
            finding_id,
            Severity.ERROR,
            link,
            cause,
            tuple(e for e in evidence if e),
            fix,
            view.name,
            action=action,
        )
    return None
