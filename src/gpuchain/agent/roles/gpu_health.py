"""The gpu-health role: this node's GPU health published for the remediator, and with the settings'
``repair`` the per-GPU repair loop, with ``gate_startup`` the new node's readiness gate.

Health follows the device plugin's XID policy (the config file's health section, the
``DP_*_HEALTHCHECKS`` variables, the settings' per-XID overrides). The repair loop resets GPUs:
where the roles share a process (the node agent) the reset releases the one shared backend, so the
process holds no NVML during it; the node's release board (``gpu.nvmlrelease``) asks agents in
other processes to let go too.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gpuchain.agent.node import Node, RoleError
from gpuchain.agent.settings import GpuHealthSettings
from gpuchain.api.config.v1.load import load_config
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.gpu.xid import HealthPolicy
from gpuchain.remediation.decide import DEFAULT_NAMESPACE
from gpuchain.remediation.publisher import GpuHealthPublisher

log = logging.getLogger("gpuchain.gpu-health")

NAME = "gpu-health"


@dataclass
class Prepared:
    """The publisher, on its cluster, for this Node."""

    node_name: str
    publisher: GpuHealthPublisher


def policy_of(settings: GpuHealthSettings) -> tuple[HealthPolicy, float]:
    """The XID policy (the config's health section, the environment's switches, the settings'
    overrides) and the recovery quiet period. Raises RoleError for a bad config."""
    try:
        config = load_config(str(settings.config_file) if settings.config_file else None, env=os.environ)
        policy = config.health.policy(os.environ).with_overrides(settings.xid_overrides)
    except (ConfigFileError, ValueError) as exc:
        raise RoleError(str(exc)) from None
    return policy, config.health.recovery_quiet_seconds


def prepare(settings: GpuHealthSettings, node: Node) -> Prepared:
    """The publisher for this Node. Raises RoleError for a bad config or no Node name."""
    policy, quiet = policy_of(settings)
    if node.backend.name == "nvml" and settings.burn_in is not None:
        from gpuchain.gpu.nvml import NvmlBackend

        if isinstance(node.backend, NvmlBackend):
            node.backend.burn_in_config = settings.burn_in  # the repair loop's and the readiness gate's burn-in
    node_name = node.need_name(NAME)
    pods = node.pods()
    publisher = GpuHealthPublisher(
        node.backend,
        cluster=node.cluster(),
        node_name=node_name,
        pods=pods.list if pods else None,
        policy=policy,
        quiet_seconds=quiet,
    )
    return Prepared(node_name, publisher)


def loops(
    settings: GpuHealthSettings, *, node: Node, prepared: Prepared
) -> list[Callable[[asyncio.Event], Awaitable[None]]]:
    """What runs until stopped: the publisher, and the repair loop and readiness gate as asked."""
    cluster, name = node.cluster(), prepared.node_name
    every: list[Callable[[asyncio.Event], Awaitable[None]]] = [
        lambda stop: prepared.publisher.run(stop, settings.resync)
    ]
    if settings.repair:
        from gpuchain.gpu.nvmlrelease import open_board
        from gpuchain.remediation.gpuloop import LoopPolicy
        from gpuchain.remediation.loopagent import GpuLoopAgent

        real = node.backend.name == "nvml"
        if real:
            from gpuchain.gpu.nvml import NvmlBackend

            if isinstance(node.backend, NvmlBackend):
                node.backend.allow_reset = True  # the loop resets drained GPUs; nothing else on this node does
        # Only a loop over the node's real GPUs asks the node's other agents to let go: a simulated
        # reset on a node that has the board would make the real agents let go for nothing.
        board = open_board(node.settings.release_dir) if real else None
        policy = LoopPolicy(xid_resolutions=settings.xid_overrides)
        agent = GpuLoopAgent(
            node.backend,
            cluster=cluster,
            node_name=name,
            policy=policy,
            namespace=settings.namespace or DEFAULT_NAMESPACE,
            board=board,
        )
        node.metrics.add(NAME, agent.metrics)
        if settings.repair_interval is None:
            every.append(agent.run)
        else:
            interval = settings.repair_interval
            every.append(lambda stop: agent.run(stop, interval))
    if settings.gate_startup:
        from gpuchain.remediation.readiness import STARTUP_TAINT, ReadinessGate
        from gpuchain.validator.ready import ReadyFiles

        ready = ReadyFiles(settings.validations_dir) if settings.validations_dir else None
        taint = settings.startup_taint or STARTUP_TAINT
        every.append(
            ReadinessGate(
                node.backend,
                cluster=cluster,
                node_name=name,
                ready_files=ready,
                burn_in=settings.gate_burn_in,
                taint=taint,
            ).run
        )
    return every


async def serve(
    settings: GpuHealthSettings, *, node: Node, prepared: Prepared, stop: asyncio.Event, started: Callable[[], None]
) -> None:
    """Publish (and repair, and gate) until ``stop``."""
    running = loops(settings, node=node, prepared=prepared)
    simulated = " (simulated)" if node.simulated else ""
    log.info("publishing GPU health of node %s; Ctrl-C to stop%s", prepared.node_name, simulated)
    if node.server is not None and settings.repair:
        where = f"http://{node.settings.metrics_address}:{node.server.server_port}"
        log.info("serving the repair loop's metrics on %s/metrics", where)
    started()
    try:
        await asyncio.gather(*(loop(stop) for loop in running))
    finally:
        node.metrics.remove(NAME)


async def run(settings: GpuHealthSettings, node: Node, stop: asyncio.Event, started: Callable[[], None]) -> None:
    """The role: prepare, then publish until ``stop``."""
    prepared = await asyncio.to_thread(prepare, settings, node)
    await serve(settings, node=node, prepared=prepared, stop=stop, started=started)
