"""The XID table as Markdown, generated from the one data file (``gpu/xids.yaml``) and the rules.

docs/remediation.md carries ``xid_markdown()`` and, for a first look, ``xid_markdown(brief=True)``;
tests compare them, so the pages cannot drift from what the code does. The last column is computed by
the remediator's and the repair loop's own functions (``Fault``, ``gpuloop.needs_repair``), not
written by hand. Only that test calls it, so it lives with the tests.
"""

from __future__ import annotations

from gpuchain.gpu.xid import HealthPolicy, Resolution, XidInfo, format_window, xid_table
from gpuchain.remediation.gpuloop import needs_repair
from gpuchain.remediation.model import Fault


def _does(code: int, repeated: bool) -> str:
    """What gpuchain does about one device unhealthy with this XID (repeated: past its threshold):
    withhold it from new pods, evict its pods, reset the GPU or ask for a node reboot."""
    fault = Fault(uuid="GPU", gpu="GPU", xids=(code,), covers=("GPU",), repeated=(code,) if repeated else ())
    if fault.harmless:
        return "withhold"
    if not needs_repair(fault):
        return "withhold, evict"
    return "withhold, evict, reboot" if fault.action is Resolution.REBOOT_NODE else "withhold, evict, reset"


def _notable(info: XidInfo) -> bool:
    """Rows the README shows: those that differ from "withhold, evict" on the first occurrence."""
    return not info.unhealthy or info.threshold is not None or info.resolution.repairs


def xid_markdown(brief: bool = False) -> str:
    """One row per XID in the table (``brief``: the notable ones, for a first look), with what
    gpuchain does under the default policy on its first occurrence and once it repeats."""
    policy = HealthPolicy()
    lines = [
        "| XID | Name | NVIDIA's immediate action | Resolution | Once | Repeated |",
        "|---:|---|---|---|---|---|",
    ]
    for code, info in sorted(xid_table().rows.items()):
        if brief and not _notable(info):
            continue
        once = _does(code, False) if policy.marks_unhealthy(code) else "nothing"
        limit = info.threshold
        repeated = ""
        if limit is not None and limit.then is not Resolution.NONE:
            repeated = f"{limit.count} within {format_window(limit.window_s)}: {_does(code, True)}"
        lines.append(f"| {code} | {info.meaning} | {info.bucket} | {info.resolution.value} | {once} | {repeated} |")
    return "\n".join(lines) + "\n"
