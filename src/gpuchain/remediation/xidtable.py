"""The shared XID policy table as Markdown, generated from ``gpuchain.gpu.xid.XID_TABLE``.

docs/remediation.md carries this table and a test compares it with ``xid_markdown()``, so the
documentation cannot drift from the table the device plugin and the remediator actually use.
"""

from __future__ import annotations

from gpuchain.gpu.xid import DEFAULT_IGNORED, XID_TABLE, XidAction

_ACTION_TEXT = {
    XidAction.RESTART_APP: "restart the application",
    XidAction.RESET_GPU: "reset the GPU",
    XidAction.REBOOT_NODE: "reboot the node",
}


def xid_markdown() -> str:
    """One row per known XID: code, meaning, whose fault, what marks it, and the recommended action."""
    lines = [
        "| XID | Meaning | Kind | Marks the device unhealthy by default | Recommended action |",
        "|---:|---|---|---|---|",
    ]
    for code, info in sorted(XID_TABLE.items()):
        unhealthy = "no" if code in DEFAULT_IGNORED else "yes"
        lines.append(f"| {code} | {info.meaning} | {info.kind.value} | {unhealthy} | {_ACTION_TEXT[info.action]} |")
    return "\n".join(lines) + "\n"
