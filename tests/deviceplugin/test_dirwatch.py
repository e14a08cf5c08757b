"""The socket directory is watched, not polled: changes wake the plugin at once, nothing else does."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from gpuchain.deviceplugin.dirwatch import DirectoryChanges
from gpuchain.kubelet.node import all_registered, start_sim_node

GPU = "nvidia.com/gpu"


async def _woken(changes: DirectoryChanges, timeout: float = 5.0) -> float:
    started = time.monotonic()
    await changes.wait(timeout)
    return time.monotonic() - started


async def test_entries_created_and_deleted_wake_it_and_quiet_does_not(tmp_path: Path) -> None:
    with DirectoryChanges(tmp_path) as changes:
        assert changes.watching
        assert await _woken(changes, 0.2) >= 0.2  # nothing happened: the timeout
        (tmp_path / "kubelet.sock").touch()
        assert await _woken(changes) < 2.0
        (tmp_path / "kubelet.sock").unlink()
        assert await _woken(changes) < 2.0


async def test_a_directory_removed_and_made_again_is_watched_again(tmp_path: Path) -> None:
    sockets = tmp_path / "device-plugins"
    sockets.mkdir()
    with DirectoryChanges(sockets) as changes:
        assert changes.watching
        shutil.rmtree(sockets)
        await changes.wait(5.0)
        assert not changes.watching  # the caller polls while it is missing
        sockets.mkdir()
        assert changes.watching
        (sockets / "kubelet.sock").touch()
        assert await _woken(changes) < 2.0


async def test_plugin_reregisters_after_a_kubelet_restart_without_polling() -> None:
    node = await start_sim_node(watch_interval=3600)  # a poll would come in an hour
    try:
        before = len(node.plugin.registrations)
        await node.kubelet.restart()
        await node.kubelet.wait_for(all_registered(node), timeout=5.0)
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 8}, timeout=5.0)
        assert len(node.plugin.registrations) == before + 1
    finally:
        await node.stop()
