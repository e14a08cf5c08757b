"""CDI specs: the one shape and the one writer for every spec gpuchain hands a container runtime.

A CDI spec (the Container Device Interface, read by containerd >= 1.7 and CRI-O) names devices
``<vendor>/<class>=<name>``; for each the runtime applies the device's container edits and the
spec-wide ones (device nodes, environment). gpuchain writes two kinds of spec: the device
plugin's, for the names its Allocate answers under the ``cdi-annotations`` / ``cdi-cri``
strategies (``deviceplugin.cdi``), and the DRA plugin's, one per prepared claim (``dra.cdi``).
Both are built by ``spec`` and written by ``write``, in the layout ``nvidia-ctk cdi generate``
writes: a device node is ``{path}`` where the driver's ``/dev`` is the node's own, and
``{path, hostPath}`` with ``hostPath`` under the dev root where it lives elsewhere (a driver
container's root), so the runtime finds the node on the host and creates it at ``path`` in the
container.

Files go through ``common.files.atomic_write``: the runtime rescans the directory when a file
changes, and must never read a half-written spec (its temporary name, ``.<name>.<random>.tmp``,
has no ``.json`` suffix, so the runtime skips it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from gpuchain.common.files import atomic_write

CDI_VERSION = "0.6.0"
DEFAULT_CDI_DIR = Path("/var/run/cdi")
"""Where runtimes look for generated specs (``/etc/cdi`` is for specs an administrator writes)."""


def qualified_name(kind: str, name: str) -> str:
    """The fully qualified CDI device name a container is given: ``vendor/class=name``."""
    return f"{kind}={name}"


def device_node(path: str, dev_root: str | Path = "/") -> dict[str, str]:
    """One device node edit: ``path`` in the container, found under ``dev_root`` on the node."""
    root = PurePosixPath(dev_root)
    if root == PurePosixPath("/"):
        return {"path": path}
    return {"path": path, "hostPath": str(root / path.lstrip("/"))}


def spec(
    kind: str,
    *,
    devices: Mapping[str, Sequence[str]],
    control_nodes: Sequence[str],
    env: Sequence[str] = (),
    dev_root: str | Path = "/",
    mounts: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A spec of ``kind`` (pure): ``devices`` maps each device name to its own device nodes;
    ``control_nodes``, ``env`` and ``mounts`` (CDI mount edits: ``hostPath``, ``containerPath``,
    ``options``) are what every device of the spec brings along."""
    edits: dict[str, Any] = {}
    if env:
        edits["env"] = list(env)
    edits["deviceNodes"] = [device_node(p, dev_root) for p in control_nodes]
    if mounts:
        edits["mounts"] = [dict(m) for m in mounts]
    return {
        "cdiVersion": CDI_VERSION,
        "kind": kind,
        "devices": [
            {"name": name, "containerEdits": {"deviceNodes": [device_node(p, dev_root) for p in nodes]}}
            for name, nodes in devices.items()
        ],
        "containerEdits": edits,
    }


def write(path: Path, content: Mapping[str, Any]) -> Path:
    """Replace the spec file at ``path`` atomically (rewriting the same spec is harmless)."""
    return atomic_write(path, data=json.dumps(content, indent=2) + "\n")
