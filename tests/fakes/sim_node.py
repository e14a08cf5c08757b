"""Waiting on a simulated node (`gpuchain.kubelet.node.SimNode`) in the tests: only they restart its
kubelet and wait for the device plugin to register again."""

from __future__ import annotations

from gpuchain.kubelet.node import SimNode, all_registered, poll_until


async def registered_again(node: SimNode, before: int, timeout: float = 30.0) -> None:
    """Wait until the plugin has recorded a registration beyond its first ``before`` and the kubelet
    serves each of its resources (``all_registered``).

    Not ``kubelet.wait_for`` on the kubelet alone: the kubelet takes the new endpoint and reads its
    first device list while the plugin's Register call is still returning, so the plugin records
    the registration a moment after the kubelet shows it (or shows the old one again); and the
    kubelet's condition is not woken by the plugin's record. Hence a poll of both.
    """
    done = all_registered(node)
    await poll_until(lambda: len(node.plugin.registrations) > before and done(), timeout)
