"""Fault suite: 100 kubelet restarts with GPUs lost and recovered in between (issue 15 done-when).

The node runs time-slicing with ``devices: 8`` (the campaign's config that stopped fitting when a
GPU was lost). Between restarts a seeded random walk loses or recovers a GPU (or does neither),
sometimes racing the restart. After every restart the kubelet peer must see each resource
registered again, and the announced ids must be exactly what fits: both replicas of every GPU
still present, nothing of a lost one. Bounded: 100 restarts, each waited for at most 5 s, on unix
sockets in a private scratch directory.
"""

from __future__ import annotations

import random

from fakes.sim_node import registered_again

from gpuchain.api.config.v1.config import parse_config
from gpuchain.kubelet.node import start_sim_node

SHARED = "nvidia.com/gpu.shared"
REPLICAS = 2
CONFIG = (
    "health: {recoveryQuietSeconds: 0.05}\n"
    "sharing: {timeSlicing: {renameByDefault: true, "
    f"resources: [{{name: nvidia.com/gpu, devices: 8, replicas: {REPLICAS}}}]}}}}"
)
RESTARTS = 100


async def test_100_kubelet_restarts_with_gpus_lost_and_recovered() -> None:
    node = await start_sim_node(config=parse_config(CONFIG), watch_interval=0.02)
    rng = random.Random(15)
    uuids = {g.index: g.uuid for g in node.backend.inventory().gpus}
    lost: set[int] = set()
    degraded_seen = 0
    try:
        for round_ in range(RESTARTS):
            step = rng.random()
            if step < 0.35 and len(lost) < 4:
                index = rng.choice(sorted(set(uuids) - lost))
                node.backend.lose_gpu(index)
                lost.add(index)
            elif step < 0.7 and lost:
                index = rng.choice(sorted(lost))
                node.backend.recover_gpu(index)
                lost.discard(index)
            expected = {f"{uuids[i]}::{r}" for i in uuids if i not in lost for r in range(REPLICAS)}
            before = len(node.plugin.registrations)
            await node.kubelet.restart()
            await registered_again(node, before)

            def announced_what_fits(expected: set[str] = expected) -> bool:
                ep = node.kubelet.endpoints.get(SHARED)
                return ep is not None and set(ep.devices) == expected

            await node.kubelet.wait_for(announced_what_fits, timeout=5.0)
            assert node.kubelet.capacity() == {SHARED: len(expected)}, f"round {round_}, lost {sorted(lost)}"
            assert (node.plugin.degraded is not None) == bool(lost), f"round {round_}"
            degraded_seen += bool(lost)
        assert degraded_seen >= 20, "the walk must spend real time with GPUs lost"
        assert len(node.plugin.registrations) >= RESTARTS
    finally:
        await node.stop()
