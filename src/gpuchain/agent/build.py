"""The one place a role is built from its settings, and the runner of a role served alone.

``build(settings, node)`` imports the role's module (only now: an agent loads only what its roles
use, and the node agent's device plugin registers before the other roles' modules are imported)
and returns the role ready to run: ``await role(stop, started)``. Every command that serves a
role, separate (``gpuchain device-plugin``) or together (``gpuchain node-agent``), builds it here.

``serve_alone`` is how a separate agent runs its one role: SIGTERM/SIGINT stop it (installed
before any start-up work), SIGHUP reloads, the node's NVML release board is followed, and what
start-up allocated is frozen once the role serves (``runtime.settled``).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import signal
import threading
from collections.abc import Awaitable, Callable

from gpuchain.agent.node import Node
from gpuchain.agent.runtime import release_follower, settled, stop_on_signals
from gpuchain.agent.settings import (
    DevicePluginSettings,
    DraPluginSettings,
    ExporterSettings,
    GfdSettings,
    GpuHealthSettings,
    MigManagerSettings,
    RoleSettings,
    ValidatorSettings,
)
from gpuchain.common.supervise import cancel_and_wait, spawn

Role = Callable[[asyncio.Event, Callable[[], None]], Awaitable[None]]
"""A built role: serves until the event is set, calls the callable once it serves."""

ROLES: dict[str, tuple[type[RoleSettings], str]] = {
    "device-plugin": (DevicePluginSettings, "device_plugin"),
    "gpu-health": (GpuHealthSettings, "gpu_health"),
    "exporter": (ExporterSettings, "exporter"),
    "gfd": (GfdSettings, "gfd"),
    "mig-manager": (MigManagerSettings, "mig_manager"),
    "dra-plugin": (DraPluginSettings, "dra_plugin"),
    "validator": (ValidatorSettings, "validator"),
}
"""Every role by its name (the separate command's), with its settings and its module under
``agent.roles``, in the order the node agent starts them: the device plugin first."""


def role_name(settings: RoleSettings) -> str:
    return next(name for name, (kind, _module) in ROLES.items() if isinstance(settings, kind))


def build(settings: RoleSettings, node: Node) -> Role:
    """The role ``settings`` describe, on ``node``'s shared resources."""
    module = importlib.import_module(f"gpuchain.agent.roles.{ROLES[role_name(settings)][1]}")
    role: Role = functools.partial(module.run, settings, node)
    return role


def follow_release(node: Node, component: str) -> asyncio.Task[None] | None:
    """Let go of NVML while gpu-health in another process resets a GPU on this node (the release
    board), unless gpu-health runs in this process: its reset releases the one shared backend."""
    if node.in_process_reset:
        return None
    release = release_follower(node.settings.release_dir, backend=node.backend, component=component)
    return spawn(f"{component}: NVML release board", run=release.run) if release is not None else None


async def serve_alone(role: Role, *, node: Node, component: str, early: threading.Event | None = None) -> None:
    """Serve one role until SIGTERM/SIGINT (see the module docstring); raises what the role raised.
    ``early`` (``runtime.stop_early``) holds a signal that came while the command was starting: the
    role then stops as soon as it is up. The release board is followed once the role serves: its
    first concern is to serve."""
    stop = asyncio.Event()
    stop_on_signals(stop.set)
    if early is not None and early.is_set():
        stop.set()
    if threading.current_thread() is threading.main_thread():
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, node.reload, "SIGHUP")
    releasing: list[asyncio.Task[None]] = []

    def started() -> None:
        settled()
        task = follow_release(node, component)
        if task is not None:
            releasing.append(task)

    try:
        await role(stop, started)
    finally:
        await cancel_and_wait(*releasing)
