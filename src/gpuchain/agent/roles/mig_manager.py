"""The MIG manager role: the layout the Node's ``nvidia.com/mig.config`` label names, applied.

Walks ``nvidia.com/mig.config.state`` pending -> success | failed | rebooting; pauses the GPU
operands (deploy labels ``paused-for-mig-change``) and always restores them (``mig.manager``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gpuchain.agent.node import Node, RoleError
from gpuchain.agent.settings import MigManagerSettings
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.mig.agent import OPERANDS, Policy
from gpuchain.mig.config import MigPartedConfig, config_or_default
from gpuchain.mig.manager import RESYNC_SECONDS, MigManager

log = logging.getLogger("gpuchain.mig")


def manager_of(settings: MigManagerSettings, *, node: Node, config: MigPartedConfig | None = None) -> MigManager:
    """The manager for this Node (``config``: the layouts already read). Raises RoleError."""
    name = node.need_name("mig-manager")
    if config is None:
        try:
            config = config_or_default(settings.config_file)
        except ConfigFileError as exc:
            raise RoleError(str(exc)) from None
    default = settings.default_config
    if default and default not in config.mig_configs:
        known = ", ".join(sorted(config.mig_configs))
        raise RoleError(f"default layout (DEFAULT_MIG_CONFIG): no layout {default!r} in the config; known: {known}")
    policy = Policy(
        timeout_s=settings.timeout,
        evict=settings.evict,
        operands=OPERANDS if settings.operands is None else settings.operands,
        default_config=default or None,
    )
    return MigManager(node.cluster(), backend=node.backend, node=name, config=config, policy=policy)


async def serve(settings: MigManagerSettings, *, manager: MigManager, stop: asyncio.Event) -> None:
    """Until ``stop``, which waits for the round in progress (see ``MigManager.run``)."""
    resync = RESYNC_SECONDS if settings.resync is None else settings.resync
    await manager.run(settings.interval, stop=stop, resync=resync)


async def run(settings: MigManagerSettings, node: Node, stop: asyncio.Event, started: Callable[[], None]) -> None:
    """The role: build the manager, then reconcile until ``stop``."""
    manager = await asyncio.to_thread(manager_of, settings, node=node)
    if node.simulated:
        log.warning("MIG manager on SIMULATED GPUs: layouts change no real GPU")
    started()
    await serve(settings, manager=manager, stop=stop)
