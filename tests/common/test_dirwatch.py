"""A watched directory: changes of its entries wake the waiter at once, nothing else does."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from gpuchain.common.dirwatch import DirectoryChanges


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
