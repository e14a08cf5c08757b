"""The repair loop's XID table as Markdown, generated from NVIDIA's catalog file and the loop's rules.

docs/remediation.md carries it and a test compares it with ``repair_markdown()``, so the page
cannot drift from what ``gpuloop`` does: the last column is computed by ``gpuloop.resolution``.
"""

from __future__ import annotations

from gpuchain.gpu.xidcatalog import Resolution, catalog
from gpuchain.remediation.gpuloop import resolution
from gpuchain.remediation.model import Fault

_TEXT = {
    Resolution.RESET: "drain the GPU, reset it, burn it in, give it back",
    Resolution.REBOOT: "drain the GPU, request a node reboot",
    Resolution.NONE: "nothing (restarting the application is enough)",
}


def repair_markdown() -> str:
    """One row per catalogued XID: code, NVIDIA's mnemonic and immediate action, what the loop does."""
    lines = ["| XID | Mnemonic | NVIDIA's immediate action | Repair loop |", "|---:|---|---|---|"]
    for code, entry in sorted(catalog().items()):
        loop = _TEXT[resolution(Fault("GPU", "GPU", (code,)))]
        lines.append(f"| {code} | {entry.mnemonic} | {entry.bucket} | {loop} |")
    return "\n".join(lines) + "\n"
