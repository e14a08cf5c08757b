"""Stand-in NVIDIA device nodes on the real node (peers/node.py), for CDI injection without a GPU.

A CDI spec names device nodes (``/dev/nvidia3``, ``/dev/nvidiactl``, ...); containerd stats each
one on the node to learn its type and numbers, and refuses the container when one is missing
("failed to inject CDI devices"). This machine has no NVIDIA driver, so the tests make the nodes.

Where: under ``DEV_ROOT`` in the node's private ``/run`` (a tmpfs of its own, gone with the node),
and the plugins are told the driver's ``/dev`` lives there (``nvidiaDevRoot``, ``--dev-root``), so
their specs give each node as ``path`` in the container and ``hostPath`` under that root, as
``nvidia-ctk cdi generate`` does for a driver container. Not in the node's ``/dev``: the node's
mount namespace has a mount table of its own, but its ``/dev`` is the machine's devtmpfs, so a
node made there would appear on the machine.

What: character devices with NVIDIA's major 195 (``/dev/nvidiaN`` is 195:N, ``/dev/nvidiactl``
195:255, as the driver numbers them); the nodes whose major the driver takes dynamically
(``nvidia-uvm``, ``nvidia-caps``) get 195 and minors of their own here. With no NVIDIA driver
loaded no driver owns major 195, so the nodes are inert: opening one fails (ENXIO). What the
tests check is that the container has exactly the nodes the spec named, with their numbers.
"""

from __future__ import annotations

from collections.abc import Iterable

from peers.node import RealNode

DEV_ROOT = "/run/gpuchain-stand-ins"
NVIDIA_MAJOR = 195
_FIXED = {"/dev/nvidiactl": 255, "/dev/nvidia-modeset": 254, "/dev/nvidia-uvm": 250, "/dev/nvidia-uvm-tools": 251}
_CAPS = "/dev/nvidia-caps/nvidia-cap"
_CAPS_MINOR_BASE = 1000


def minor_of(path: str) -> int:
    """The stand-in's minor number for a container path (``/dev/nvidia3`` -> 3)."""
    if path in _FIXED:
        return _FIXED[path]
    if path.startswith(_CAPS):
        return _CAPS_MINOR_BASE + int(path.removeprefix(_CAPS))
    return int(path.removeprefix("/dev/nvidia"))


def make_stand_ins(node: RealNode, paths: Iterable[str]) -> None:
    """Create the stand-in for each container path under ``DEV_ROOT`` on the node (existing ones are kept)."""
    script = ["set -e"]
    for path in sorted(set(paths)):
        host = f"{DEV_ROOT}{path}"
        script.append(
            f"[ -e {host} ] || {{ mkdir -p $(dirname {host}); mknod {host} c {NVIDIA_MAJOR} {minor_of(path)}; }}"
        )
    node.run(["/bin/sh", "-c", "\n".join(script)])


def gpu_stand_ins(node: RealNode, gpus: int = 8) -> None:
    """``/dev/nvidia0..N-1`` and the control devices every GPU container gets."""
    make_stand_ins(node, [*(f"/dev/nvidia{i}" for i in range(gpus)), "/dev/nvidiactl", "/dev/nvidia-uvm",
                          "/dev/nvidia-uvm-tools"])  # fmt: skip


LIST_DEVICES = (
    "for d in /dev/nvidia* /dev/nvidia-caps/*; do [ -c $d ] && echo DEVICE $d $(stat -c %t:%T $d); done; true"
)
"""A container's shell line: each NVIDIA character device it has, ``DEVICE <path> <major hex>:<minor hex>``."""


def devices_seen(output: str) -> dict[str, tuple[int, int]]:
    """What ``LIST_DEVICES`` printed: container path -> (major, minor)."""
    seen = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "DEVICE":
            major, minor = parts[2].split(":")
            seen[parts[1]] = (int(major, 16), int(minor, 16))
    return seen
