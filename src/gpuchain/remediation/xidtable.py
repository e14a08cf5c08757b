"""The shared XID policy table as Markdown, generated from ``gpuchain.gpu.xid.XID_TABLE``.

docs/remediation.md carries this table and a test compares it with ``xid_markdown()``, so the
documentation cannot drift from the table the device plugin and the remediator actually use.
The last column is computed by the remediator's own rules (``Fault``), not written by hand.
"""

from __future__ import annotations

from gpuchain.gpu.xid import DEFAULT_IGNORED, XID_TABLE, XidAction
from gpuchain.remediation.model import Fault

_ACTION_TEXT = {
    XidAction.RESTART_APP: "restart the application",
    XidAction.RESET_GPU: "reset the GPU",
    XidAction.REBOOT_NODE: "reboot the node",
}


def remediation_text(code: int) -> str:
    """What ``gpuchain remediator`` does about this XID with the default policy."""
    if code in DEFAULT_IGNORED:
        return "nothing (the device stays healthy)"
    fault = Fault("GPU", "GPU", (code,))
    if fault.application_only:
        return "nothing (application error)"
    if fault.action is XidAction.RESTART_APP:
        return "evict the pods on the device"
    return "evict the pods on the device, taint the node"


def xid_markdown() -> str:
    """One row per known XID: code, meaning, whose fault, what marks it, the recommended action."""
    lines = [
        "| XID | Meaning | Kind | Device unhealthy by default | Recommended action | Remediator |",
        "|---:|---|---|---|---|---|",
    ]
    for code, info in sorted(XID_TABLE.items()):
        unhealthy = "no" if code in DEFAULT_IGNORED else "yes"
        lines.append(
            f"| {code} | {info.meaning} | {info.kind.value} | {unhealthy} | {_ACTION_TEXT[info.action]} "
            f"| {remediation_text(code)} |"
        )
    return "\n".join(lines) + "\n"
