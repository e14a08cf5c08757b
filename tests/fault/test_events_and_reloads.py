"""Fault suite: XID storms, GPU loss and recovery, reloads (good, bad and no-longer-fitting
configs) and kubelet restarts in a seeded random order, as the campaign's 4,500-event run did.

After each step settles, the kubelet peer must hold exactly what the plugin announces, with the
plugin's health (nothing Healthy that the plugin reports Unhealthy), and the plugin must be
registered. Bounded: 150 steps, each settled within 15 s, on unix sockets.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from gpuchain.api.config.v1.config import parse_config
from gpuchain.deviceplugin.nodeconfig import ConfigFollower, ConfigSource
from gpuchain.kubelet.node import SimNode, all_registered, start_sim_node

STEPS = 150
CONFIGS = [
    "health: {recoveryQuietSeconds: 0.05}",
    "health: {recoveryQuietSeconds: 0.05}\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 3}]}}",
    "health: {recoveryQuietSeconds: 0.05}\n"
    "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: nvidia.com/gpu, devices: 8, replicas: 2}]}}",
]
BAD_FILES = [  # an empty or null file is not bad: it is every default, as NVIDIA's plugin reads it
    b"flags: [\n",
    b"\xff\xfef\x00l\x00",
    b"version: v1\nflags: {\x00}\n",
    b"caf\xe9: 1\n",
    b"a: 1\na: 2\n",
    b"flags: {migStrategy: x}\n",
]


def _consistent(node: SimNode) -> bool:
    """The kubelet sees every announced id, with the plugin's own health, and nothing else."""
    if not all_registered(node)():
        return False
    for res in node.plugin.resources:
        ep = node.kubelet.endpoints.get(res.name)
        if ep is None or not ep.connected:
            return False
        want = {d.id: node.plugin.health.healthy(d.gpu_uuid, d.mig_uuid) for d in res.devices}
        if {i: dev.healthy for i, dev in ep.devices.items()} != want:
            return False
    return True


async def test_random_events_reloads_and_restarts_keep_kubelet_and_plugin_agreeing(tmp_path: Path) -> None:
    node = await start_sim_node(config=parse_config(CONFIGS[0]), watch_interval=0.02)
    config_file = tmp_path / "config.yaml"
    follower = ConfigFollower(node.plugin, source=ConfigSource(file=config_file), env={})
    rng = random.Random(4500)
    lost: set[int] = set()
    counts = dict.fromkeys(["xid", "lose", "recover", "reload", "bad-reload", "restart"], 0)
    try:
        for step in range(STEPS):
            kind = rng.choice(list(counts))
            present = sorted(set(range(8)) - lost)
            if kind == "xid" and present:
                node.backend.inject_xid(
                    rng.choice(present), xid=rng.choice([13, 31, 43, 48, 63, 64, 74, 79, 92, 94, 95])
                )
            elif kind == "lose" and len(lost) < 3:
                index = rng.choice(present)
                node.backend.lose_gpu(index)
                lost.add(index)
            elif kind == "recover" and lost:
                index = rng.choice(sorted(lost))
                node.backend.recover_gpu(index)
                lost.discard(index)
            elif kind == "reload":  # SIGHUP with a good file (may not fit with GPUs lost: refused whole)
                config_file.write_text(rng.choice(CONFIGS))
                await follower.reload("SIGHUP")
            elif kind == "bad-reload":  # SIGHUP with a bad file: refused, running config kept
                running = node.plugin.config
                config_file.write_bytes(rng.choice(BAD_FILES))
                assert not await follower.reload("SIGHUP")
                assert node.plugin.config is running
            elif kind == "restart":
                await node.kubelet.restart()
            counts[kind] += 1
            # The plugin may still be re-registering after a restart it noticed late (a loaded
            # machine): the step settles when both sides agree and the plugin is registered. A
            # poll, not kubelet.wait_for: the plugin counts itself registered after the kubelet's
            # last device update, and its own state changes never wake the kubelet's condition.
            try:
                async with asyncio.timeout(15.0):
                    while not (_consistent(node) and node.plugin.registered):
                        await asyncio.sleep(0.02)
            except TimeoutError:
                raise AssertionError(f"step {step} ({kind}): kubelet and plugin did not settle") from None
        assert min(counts.values()) >= 10, counts
    finally:
        await node.stop()
