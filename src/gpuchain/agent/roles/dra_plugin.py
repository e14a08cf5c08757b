"""The DRA plugin role: GPUs and MIG devices served to Kubernetes DRA as driver gpu.gpuchain.io.

Publishes this node's ResourceSlice, registers with the kubelet's plugin watcher, prepares claims
as CDI specs and withdraws devices on XIDs (``DP_DISABLE_HEALTHCHECKS`` / ``DP_ENABLE_HEALTHCHECKS``
as for the device plugin) and on the Node's repair loop quarantine. Its loops (health, resync,
quarantine watch) cannot be restarted in place: the first to fail fails the role.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

from gpuchain.agent.node import Node, RoleError
from gpuchain.agent.settings import DraPluginSettings
from gpuchain.common.supervise import Critical
from gpuchain.deviceplugin.quarantine import QuarantineFollower
from gpuchain.dra.driver import DEFAULT_STATE_DIR, DraDriver, DriverConfig
from gpuchain.dra.server import DEFAULT_PLUGIN_DIR, DEFAULT_REGISTRY_DIR, DraPluginServer
from gpuchain.gpu.cdi import DEFAULT_CDI_DIR
from gpuchain.gpu.health import DEFAULT_QUIET_SECONDS
from gpuchain.gpu.xid import policy_from_env

log = logging.getLogger("gpuchain.dra")

NAME = "dra-plugin"


class CriticalLoopFailed(RuntimeError):
    """One of the plugin's loops failed (logged with its traceback): the plugin stopped."""


def driver_of(settings: DraPluginSettings, node: Node) -> tuple[DraDriver, DraPluginServer]:
    """The driver and its kubelet-facing server. Raises RoleError for a bad health switch,
    CheckpointError and SliceError as the driver does."""
    try:
        policy = policy_from_env(os.environ)
    except ValueError as exc:
        raise RoleError(str(exc)) from None
    backend = node.backend
    name = node.name_or_own()
    quiet = DEFAULT_QUIET_SECONDS if settings.recovery_quiet_seconds is None else settings.recovery_quiet_seconds
    config = DriverConfig(
        node=name,
        cdi_dir=settings.cdi_dir or DEFAULT_CDI_DIR,
        state_dir=settings.state_dir or DEFAULT_STATE_DIR,
        policy=policy,
        recovery_quiet_seconds=quiet,
        dev_root=settings.dev_root,
        unlabelled=settings.unlabelled,
        device_taints=settings.device_taints,
        partitionable_mig=settings.partitionable_mig,
        gpu_shares=settings.gpu_shares,
        mps_root=settings.mps_root,
    )
    driver = DraDriver(backend, cluster=node.cluster(), config=config)
    server = DraPluginServer(
        driver,
        registry_dir=settings.registry_dir or DEFAULT_REGISTRY_DIR,
        plugin_dir=settings.plugin_dir or DEFAULT_PLUGIN_DIR,
    )
    return driver, server


async def serve(
    driver: DraDriver, *, server: DraPluginServer, resync: float, stop: asyncio.Event, started: Callable[[], None]
) -> None:
    """Publish, serve both sockets, follow health and resync until ``stop``; raises
    CriticalLoopFailed when a loop failed (the sockets are removed first)."""
    published = await asyncio.to_thread(driver.publish)
    simulated = " (simulated GPUs)" if driver.backend.name == "sim" else ""
    log.info(
        "ResourceSlice for pool %s: %d devices, generation %d%s",
        driver.node,
        len(published.devices),
        published.generation,
        simulated,
    )
    await server.start()
    log.info("serving %s; registration socket %s", server.endpoint, server.registration_socket)
    # The repair loop's list, and whether the node's GPUs are this driver's (kube.allocator), on one watch.
    quarantine = QuarantineFollower(
        driver.cluster, node_name=driver.node, apply=driver.set_quarantined, on_node=driver.node_changed
    )
    failed = asyncio.Event()
    critical = Critical(failed)
    tasks = [
        critical.add(asyncio.create_task(driver.follow_health(), name="dra-plugin: health")),
        critical.add(asyncio.create_task(driver.resync(resync), name="dra-plugin: resync")),
        critical.add(asyncio.create_task(quarantine.follow(), name="dra-plugin: quarantine watch")),
    ]
    if driver.mps is not None:
        tasks.append(critical.add(asyncio.create_task(driver.keep_mps(), name="dra-plugin: MPS daemons")))
    started()
    stopped = asyncio.ensure_future(stop.wait())
    ending = asyncio.ensure_future(failed.wait())
    try:
        await asyncio.wait({stopped, ending}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        ending.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.stop()
        log.info("stopped; sockets removed (prepared claims stay in %s)", driver.checkpoint.path)
    if critical.failed:
        raise CriticalLoopFailed(f"{critical.failed} failed")


async def run(settings: DraPluginSettings, node: Node, stop: asyncio.Event, started: Callable[[], None]) -> None:
    """The role: build the driver, then serve until ``stop``, its metrics (prepare and unprepare
    latencies, devices by state) on the node's one metrics endpoint."""
    driver, server = await asyncio.to_thread(driver_of, settings, node)
    node.metrics.add(NAME, driver.metrics)
    try:
        await serve(driver, server=server, resync=settings.resync, stop=stop, started=started)
    finally:
        node.metrics.remove(NAME)
