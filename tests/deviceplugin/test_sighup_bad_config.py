"""SIGHUP with a bad config file: the running config stays, one line is logged, and SIGTERM still
cleans up (exit 0, sockets removed). Issue 15 defect 3: a NUL byte or non-UTF-8 text made the
reload task raise; the next SIGTERM then skipped cleanup (exit 1, socket left behind)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from gpuchain.kubelet.peer import KubeletPeer

GPU = "nvidia.com/gpu"
BAD = [
    (b"version: v1\nflags: {\x00}\n", "config.yaml:2: contains a NUL byte"),
    (b"version: v1\n# caf\xe9\n", "config.yaml:2: is not UTF-8 (byte 0xe9)"),
    (b"version: v1\nversion: v1\n", "config.yaml:2: version: duplicate key (first at line 1)"),
]


@contextlib.asynccontextmanager
async def _plugin(
    root: Path, cfg: Path, *python_args: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, KubeletPeer, Path]]:
    """``python *python_args device-plugin`` on simulated GPUs with config ``cfg``, beside a kubelet
    peer, their sockets in ``root`` (a ``short_dir``)."""
    kubelet = KubeletPeer(root)
    await kubelet.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DP_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *python_args, "device-plugin", "--backend", "sim", "--config", str(cfg),
        "--socket-dir", str(root), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
    )  # fmt: skip
    try:
        yield proc, kubelet, root
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await kubelet.stop()


async def test_sighup_with_bad_files_keeps_serving_and_sigterm_still_cleans_up(tmp_path: Path, short_dir: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\n")
    async with _plugin(short_dir, cfg, "-m", "gpuchain") as (proc, kubelet, root):
        assert proc.stdout is not None
        await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 8}, timeout=20)
        lines: list[str] = []
        for data, expected in BAD:
            cfg.write_bytes(data)
            proc.send_signal(signal.SIGHUP)
            while True:
                line = (await asyncio.wait_for(proc.stdout.readline(), 10)).decode()
                assert line, "the plugin exited"
                lines.append(line)
                if "SIGHUP" in line:
                    break
            assert "config not reloaded, keeping the running one" in line and expected in line, line
            assert kubelet.allocatable() == {GPU: 8}
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 10)
        text = "".join(lines) + out.decode()
        assert proc.returncode == 0, text
        assert "Traceback" not in text
        assert not (root / "nvidia-gpu.sock").exists()


HUP_WHILE_REGISTERING = """
import os, signal, sys
from gpuchain.cli import main
from gpuchain.deviceplugin.plugin import DevicePlugin

start = DevicePlugin.start


async def hup_then_start(self):
    os.kill(os.getpid(), signal.SIGHUP)
    await start(self)


DevicePlugin.start = hup_then_start
sys.argv = ["gpuchain", *sys.argv[1:]]
main()
"""


async def test_a_sighup_while_registering_is_served_once_running_not_fatal(tmp_path: Path, short_dir: Path) -> None:
    # SIGHUP's default action ends the process: a config reload sent while the plugin was still
    # registering (a ConfigMap updated as the pod starts) killed it before its handler existed.
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\n")
    async with _plugin(short_dir, cfg, "-c", HUP_WHILE_REGISTERING) as (proc, kubelet, _root):
        assert proc.stdout is not None
        lines: list[str] = []
        while not any("SIGHUP: config reloaded" in line for line in lines):
            line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
            assert line, f"the plugin exited ({proc.returncode}): {''.join(lines)}"
            lines.append(line)
        await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 8}, timeout=20)
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 10)
        assert proc.returncode == 0, "".join(lines) + out.decode()
