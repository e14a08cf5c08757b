"""A simulated GPU node in one process: SimBackend + device plugin + kubelet peer over real unix sockets.

``start_sim_node()`` is the building block of ``gpuchain demo``, the simulator and the doctor:
it returns handles to every part and ``SimNode.stop()`` takes it all down and removes the
temporary socket directory.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuchain.api.config.v1.config import Config
from gpuchain.common.scratch import scratch_dir
from gpuchain.deviceplugin.plugin import DevicePlugin
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.sim import SimBackend
from gpuchain.kubelet.peer import KubeletPeer

DEFAULT_PRESET = "h100-80gb-x8"


@dataclass(kw_only=True)
class SimNode:
    """Handles to a running simulated node."""

    backend: SimBackend
    plugin: DevicePlugin
    kubelet: KubeletPeer
    root: Path
    socket_dir: Path
    pod_resources_socket: Path
    owns_root: bool = True

    async def stop(self) -> None:
        """Stop the plugin, then the kubelet, and remove the socket directory if we made it."""
        await self.plugin.stop()
        await self.kubelet.stop()
        self.backend.close()
        if self.owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    async def restart_plugin(self) -> None:
        """Stop the plugin process and start a fresh one with the same config (health state is lost)."""
        await self.plugin.stop()
        self.plugin = DevicePlugin(
            self.plugin.backend,
            config=self.plugin.config,
            socket_dir=self.socket_dir,
            env=self.plugin.env,
            watch_interval=self.plugin.watch_interval,
            pre_start_required=self.plugin.pre_start_required,
        )
        await self.plugin.start()


async def start_sim_node(
    preset: str = DEFAULT_PRESET,
    *,
    config: Config | None = None,
    backend: SimBackend | None = None,
    root: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    watch_interval: float = 0.05,
    pre_start_required: bool = False,
    wait: bool = True,
    timeout: float = 5.0,
    plugin_backend: GpuBackend | None = None,
) -> SimNode:
    """Start kubelet peer and device plugin for a simulated node.

    ``root`` holds ``dp/`` (the device plugin socket directory) and ``pr/kubelet.sock`` (the
    pod-resources API); by default a new directory under $TMPDIR, or /tmp when $TMPDIR is too
    long for unix socket paths (``gpuchain.common.scratch``). ``env`` defaults to empty so the caller's
    DP_*_HEALTHCHECKS variables do not leak into simulations. With ``wait``, returns once every
    resource is registered and its first device list has arrived, and, when the plugin reads the
    ``SimBackend`` itself, once it follows the GPUs' health events (a fault injected before it
    subscribed would never reach it). ``plugin_backend`` is the plugin process's own handle on the
    node's GPUs (one that can let go of NVML, as on a real node), default the node's
    ``SimBackend`` itself; its caller knows when that one has subscribed.
    """
    owns = root is None
    base = scratch_dir("gc-") if root is None else Path(root)
    socket_dir = base / "dp"
    pod_resources = base / "pr" / "kubelet.sock"
    sim = backend or SimBackend.from_preset(preset)
    kubelet = KubeletPeer(socket_dir, pod_resources_socket=pod_resources)
    plugin = DevicePlugin(
        plugin_backend or sim,
        config=config,
        socket_dir=socket_dir,
        env=env or {},
        watch_interval=watch_interval,
        pre_start_required=pre_start_required,
    )
    node = SimNode(
        backend=sim,
        plugin=plugin,
        kubelet=kubelet,
        root=base,
        socket_dir=socket_dir,
        pod_resources_socket=pod_resources,
        owns_root=owns,
    )
    subscribers = sim.subscribers
    try:
        await kubelet.start()
        await plugin.start()
        if wait:
            await kubelet.wait_for(all_registered(node), timeout)
            if plugin_backend is None:
                await poll_until(lambda: sim.subscribers > subscribers, timeout)
    except BaseException:
        await node.stop()
        raise
    return node


def all_registered(node: SimNode) -> Callable[[], bool]:
    """A predicate: the kubelet has a connected endpoint with devices for each of the plugin's resources."""

    def check() -> bool:
        eps = node.kubelet.endpoints
        return all(r.name in eps and eps[r.name].connected and eps[r.name].updates > 0 for r in node.plugin.resources)

    return check


async def poll_until(check: Callable[[], bool], timeout: float) -> None:
    """Poll ``check`` until it holds; TimeoutError after ``timeout`` seconds (the simulated node and
    the tests wait on conditions that no event wakes)."""
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)
