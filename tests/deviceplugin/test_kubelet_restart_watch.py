"""The kubelet's socket directory is watched, not polled: a kubelet restart wakes the plugin at once."""

from __future__ import annotations

from fakes.sim_node import registered_again

from gpuchain.kubelet.node import start_sim_node

GPU = "nvidia.com/gpu"


async def test_plugin_reregisters_after_a_kubelet_restart_without_polling() -> None:
    node = await start_sim_node(watch_interval=3600)  # a poll would come in an hour
    try:
        before = len(node.plugin.registrations)
        await node.kubelet.restart()
        await registered_again(node, before)
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 8}, timeout=5.0)
        assert len(node.plugin.registrations) == before + 1
    finally:
        await node.stop()
