"""A driver's root as a node agent sees it, for tests: its control device nodes as plain files.

A device node needs only to exist for the agents to name it (gpu/devnodes.py stats them); tests
that hand the node to a real container runtime use peers/stand_ins.py's real device nodes instead.
"""

from __future__ import annotations

from pathlib import Path


def driver_dev(root: Path, *nodes: str) -> Path:
    """``root`` made to look like a driver's root as a node agent sees it: the control device nodes
    ``nodes`` (default: nvidiactl, nvidia-uvm, nvidia-uvm-tools, as a driver without the modeset
    module makes them) as plain files under ``root/dev``. Returns ``root``."""
    (root / "dev").mkdir(parents=True, exist_ok=True)
    for node in nodes or ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"):
        (root / node.lstrip("/")).touch()
    return root
