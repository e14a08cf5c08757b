"""The device plugin while it has let go of NVML for a GPU reset on its node (``gpu.nvmlrelease``).

Nothing is marked unhealthy, nothing is lost: ListAndWatch keeps the devices it announced, a
kubelet restart or a config reload re-serves them from the inventory seen before, and Allocate
and GetPreferredAllocation keep working, since none of them needs NVML.
"""

from __future__ import annotations

from fakes.releasable import ReleasableView
from fakes.sim_node import registered_again

from gpuchain.api.config.v1.config import Config
from gpuchain.gpu.sim import SimBackend
from gpuchain.kubelet.node import DEFAULT_PRESET, start_sim_node
from gpuchain.kubelet.peer import ContainerRequest

GPU = "nvidia.com/gpu"


async def test_released_plugin_keeps_serving_across_a_kubelet_restart_and_a_reload() -> None:
    sim = SimBackend.from_preset(DEFAULT_PRESET)
    view = ReleasableView(sim)
    node = await start_sim_node(backend=sim, plugin_backend=view)
    try:
        assert node.kubelet.allocatable() == {GPU: 8}
        view.release()

        before = len(node.plugin.registrations)
        await node.kubelet.restart()  # the socket directory is wiped: the plugin re-serves and registers
        await registered_again(node, before)
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 8}, timeout=5.0)
        assert len(node.plugin.registrations) == before + 1
        assert view.reads_while_released >= 1  # it asked, was refused, and served what it had seen

        await node.plugin.reload(Config())
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 8}, timeout=5.0)

        # Allocate (with GetPreferredAllocation: two GPUs) for a new pod while released
        pod = await node.kubelet.admit("ml", name="two", containers=[ContainerRequest("main", {GPU: 2})])
        assert len(pod.containers[0].devices[GPU]) == 2
        assert not node.plugin.health.unhealthy()
    finally:
        view.reacquire()
        await node.stop()
