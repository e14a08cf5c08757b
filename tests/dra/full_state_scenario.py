"""The kubelet and the DRA plugin over gRPC with the plugin's state directory on a tiny tmpfs that
fills up (issue 25, item 2). Run by tests/dra/test_dra_full_state.py in a mount namespace of its own
(``unshare -m``): the mount is this process's alone and goes with it.

Usage: ``full_state_scenario.py ROOT``; prints one JSON object: what the kubelet was answered at
each step, and what the plugin then held in memory, in its checkpoint on disk and as CDI specs.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpuchain.dra.cdi import spec_path
from gpuchain.dra.checkpoint import FILE_NAME
from gpuchain.dra.claims import allocation_status, resource_claim
from gpuchain.dra.driver import DraDriver, DriverConfig
from gpuchain.dra.kinds import DRIVER, RESOURCE_CLAIM
from gpuchain.dra.server import DraPluginServer
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.allocator import DRA
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kubelet.dra_peer import DraClaim, DraPeer

STATE_FS_SIZE = "16k"
"""Four pages: room for the checkpoint of a few claims, and quickly filled."""


class Rig:
    """One node: the claim, the kubelet peer, and the plugin (started again to model a restart)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / "state"
        self.cdi = root / "cdi"
        self.filler = self.state / "filler"
        self.sim = SimBackend.from_preset("h100-80gb-x8")
        self.cluster = MemoryCluster()
        created = self.cluster.create(resource_claim("train", namespace="default"))
        status = allocation_status(self.sim.topology.node, [("gpu", "gpu-2")])
        self.cluster.patch_status(RESOURCE_CLAIM, name="train", status=status, namespace="default")
        self.claim = DraClaim("default", created["metadata"]["uid"], "train")
        self.peer = DraPeer(root / "registry")
        self.driver: DraDriver | None = None
        self.server: DraPluginServer | None = None

    async def start(self) -> DraDriver:
        """A fresh plugin process over the same directories, registered with the kubelet."""
        config = DriverConfig(
            node=self.sim.topology.node,
            cdi_dir=self.cdi,
            state_dir=self.state,
            dev_root=self.root / "driver-root",
            unlabelled=DRA,
        )
        self.driver = DraDriver(self.sim, cluster=self.cluster, config=config)
        self.server = DraPluginServer(
            self.driver, registry_dir=self.root / "registry", plugin_dir=self.root / "plugins" / DRIVER
        )
        await self.server.start()
        await self.peer.scan()
        await self.peer.wait_for(DRIVER)
        return self.driver

    async def stop(self) -> None:
        assert self.server is not None
        await self.server.stop()
        self.server = None
        await self.peer.scan()

    def fill(self) -> None:
        """Fill the state file system to the last byte."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # unbuffered: nothing left to flush
        try:
            while True:
                os.write(fd, b"\0" * 512)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def held(self) -> dict[str, Any]:
        """Where the claim is now: the plugin's memory, the checkpoint file, the CDI directory."""
        assert self.driver is not None
        uid = self.claim.uid
        try:
            on_disk = uid in json.loads((self.state / FILE_NAME).read_text())["claims"]
        except FileNotFoundError:
            on_disk = False
        return {
            "memory": self.driver.checkpoint.get(uid) is not None,
            "disk": on_disk,
            "spec": spec_path(self.cdi, uid).exists(),
        }

    async def prepare(self) -> dict[str, Any]:
        result = (await self.peer.prepare(DRIVER, [self.claim]))[self.claim.uid]
        devices = [[d.pool, d.device, list(d.cdi_ids)] for d in result.devices]
        return {"error": result.error, "devices": devices, **self.held()}

    async def unprepare(self) -> dict[str, Any]:
        error = (await self.peer.unprepare(DRIVER, [self.claim]))[self.claim.uid]
        return {"error": error, **self.held()}


async def scenario(root: Path) -> dict[str, Any]:
    rig = Rig(root)
    rig.state.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={STATE_FS_SIZE}", "dra-state", str(rig.state)], check=True)
    seen: dict[str, Any] = {}
    try:
        await rig.start()
        rig.fill()
        seen["prepare_full"] = await rig.prepare()
        seen["prepare_full_retry"] = await rig.prepare()  # the kubelet retries a failed prepare
        await rig.stop()
        await rig.start()
        seen["restart_after_failed_prepare"] = rig.held()
        rig.free()
        seen["prepare"] = await rig.prepare()
        rig.fill()
        seen["unprepare_full"] = await rig.unprepare()
        await rig.stop()
        await rig.start()
        seen["restart_after_failed_unprepare"] = await rig.prepare()
        rig.free()
        seen["unprepare"] = await rig.unprepare()
        await rig.stop()
        await rig.start()
        seen["restart_after_unprepare"] = rig.held()
    finally:
        if rig.server is not None:
            await rig.server.stop()
        await rig.peer.close()
        subprocess.run(["umount", str(rig.state)], check=False)
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(scenario(Path(sys.argv[1])))))
