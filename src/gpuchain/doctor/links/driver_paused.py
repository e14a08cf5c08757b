"""Operands kept off a node by a driver-upgrade pause that outlived the upgrade.

Before it installs, the driver manager (the driver pod's k8s-driver-manager init container) sets each GPU operand's
nvidia.com/gpu.deploy.<operand> label to paused-for-driver-upgrade (or appends "_paused-for-driver-upgrade" to a value
that is not "true"), so their DaemonSets leave the node, and when the driver is in it sets them back; a label update
that fails (the API server unreachable for a moment) is only a warning to releases before v0.11.0, so the driver pod
runs ready while the operands stay off the node (NVIDIA/k8s-driver-manager cmd/driver-manager/main.go@v0.10.0,
pausedStr, maybeSetTrue, "Failed to reschedule GPU operator components: %v"; the GPU Operator's release notes
v26.3.2). The labels are the evidence; the repair is to set them back as the manager would, and the manager release
that no longer drops the update (releases.yaml, symptom labels) so it does not come back.
"""

from __future__ import annotations

import re

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, labels_showing, node_finding
from gpuchain.doctor.links.releases import release_repair
from gpuchain.doctor.model import Fix, FixOp, LinkState, Severity
from gpuchain.doctor.pods import pod_state
from gpuchain.operator.operands import DRIVER, Operand, deploy_label
from gpuchain.operator.upgrade import DONE, STATE_LABEL

#: The driver manager's pause value (k8s-driver-manager cmd/driver-manager/main.go@v0.10.0 pausedStr).
PAUSED_FOR_DRIVER_UPGRADE = "paused-for-driver-upgrade"
#: The pause as maybeSetTrue removes it from a value: alone, or with the "_" that joined it to the value before.
PAUSE = re.compile(rf"_?{PAUSED_FOR_DRIVER_UPGRADE}_?")
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."


def restored(value: str) -> str:
    """The deploy label's value with the driver manager's pause removed, as its maybeSetTrue restores it: "true"
    where the pause was all of it, else what the value was before the pause."""
    return "true" if value == PAUSED_FOR_DRIVER_UPGRADE else PAUSE.sub("", value)


def paused_for_driver(ctx: Context, *, view: NodeView, operand: Operand, link: str) -> Result | None:
    """``operand`` kept off this node by a driver-upgrade pause while the driver pod runs ready and no driver
    upgrade is in progress: the labels set back (every paused operand of the node at once), and the driver manager
    release that fixed the lost update where the table names the one that runs; None where the operand's label
    holds no pause, or the driver is still being installed or upgraded (the pause is then the manager's work)."""
    if PAUSED_FOR_DRIVER_UPGRADE not in view.labels.get(deploy_label(operand), ""):
        return None
    driver = view.pod(DRIVER)
    if driver is None or not pod_state(driver).ready or view.labels.get(STATE_LABEL, DONE) != DONE:
        return None
    paused = {
        k: restored(v)
        for k, v in sorted(view.labels.items())
        if k.startswith(DEPLOY_PREFIX) and PAUSED_FOR_DRIVER_UPGRADE in v
    }
    action = Fix(FixOp.LABEL_NODE, view.name, dict(paused))
    shown = labels_showing(ctx, view)
    release = release_repair(ctx, view=view, pod=driver, operand=DRIVER, shown=shown) if shown else None
    cause = (
        f"the driver pod runs ready and no driver upgrade is in progress, yet {deploy_label(operand)} still says "
        f"{PAUSED_FOR_DRIVER_UPGRADE}: the driver manager paused the GPU operands for the driver's install and its "
        f"update that sets them back did not happen, so the {link} link (and every paused operand) stays off the node."
    )
    return Result(
        LinkState.BROKEN,
        f"{link} paused for a driver upgrade that is over",
        (
            node_finding(
                view,
                fid="operand.paused-for-driver-upgrade",
                sev=Severity.ERROR,
                link=link,
                cause=f"{cause} {release.cause}" if release else cause,
                evidence=[
                    *(f"{k}={view.labels[k]}" for k in paused),
                    f"driver pod {driver['metadata'].get('name')} ready",
                    *(release.evidence if release else ()),
                ],
                fix=ctx.stack.render(action) + (f"; then {release.fix.removeprefix('# ')}" if release else ""),
                action=action,
            ),
        ),
    )
