"""`gpuchain node-agent` as a pod runs it: the device plugin registers with the kubelet while another
role cannot start, the metrics endpoint says which, and SIGTERM stops every role cleanly."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.kubelet.peer import ContainerRequest, KubeletPeer

GPU = "nvidia.com/gpu"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return str(r.read().decode())
    except OSError:
        return ""


async def test_the_device_plugin_serves_while_another_role_cannot_start(short_dir: Path) -> None:
    root = short_dir
    kubelet = KubeletPeer(root / "dp")
    await kubelet.start()
    port = _free_port()
    args = [sys.executable, "-m", "gpuchain", "node-agent", "--backend", "sim", "--memory-cluster"]
    args += ["--roles", "device-plugin,mig-manager,exporter", "--default-mig-config", "no-such-layout"]
    args += ["--socket-dir", str(root / "dp"), "--metrics-address", "127.0.0.1", "--metrics-port", str(port)]
    args += ["--nvml-release-dir", ""]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 8}, timeout=60)
        pod = await kubelet.admit("default", name="train", containers=[ContainerRequest("main", {GPU: 2})])
        assert len(pod.containers[0].devices[GPU]) == 2

        # Each role reaches its state in its own time (the plugin counts as up once the kubelet
        # has its first list, the exporter shows GPUs after its first sample): wait for all three.
        wanted = (
            'gpuchain_node_agent_role_failing{role="mig-manager"} 1.0',
            'gpuchain_node_agent_role_up{role="device-plugin"} 1.0',
            "DCGM_FI_DEV_GPU_TEMP",  # the exporter's metrics on the same endpoint
        )
        deadline = time.monotonic() + 60
        text = await asyncio.to_thread(_metrics, port)
        while not all(line in text for line in wanted):
            assert time.monotonic() < deadline and proc.poll() is None, text
            await asyncio.sleep(0.5)
            text = await asyncio.to_thread(_metrics, port)
        assert proc.poll() is None

        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "role mig-manager cannot start: default layout (DEFAULT_MIG_CONFIG): no layout" in err
        assert "Traceback" not in err
        assert not list((root / "dp").glob("nvidia-*.sock"))  # the plugin removed its socket
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await kubelet.stop()


def test_an_unknown_role_is_one_line() -> None:
    result = CliRunner().invoke(app, ["node-agent", "--backend", "sim", "--roles", "device-plugin,dcgm"])
    assert result.exit_code == 2
    assert "--roles: unknown role(s) dcgm; choose from device-plugin, gpu-health" in result.stderr


def test_the_default_backend_writes_nothing_to_the_node() -> None:
    result = CliRunner().invoke(app, ["node-agent"])
    assert result.exit_code == 2
    assert "refusing to write simulated GPU results to this node" in result.stderr


def test_the_dra_roles_gpu_shares_and_mps_root_reach_its_settings(tmp_path: Path) -> None:
    """``--gpu-shares --mps-root`` give the DRA role the settings ``gpuchain dra-plugin`` takes, and an
    MPS root without shares is refused as there (a daemon for shares that are never published)."""
    from gpuchain.agent.settings import DraPluginSettings
    from gpuchain.commands.node_agent import parser, settings_of

    shared = settings_of(parser().parse_args(["--gpu-shares", "--mps-root", str(tmp_path)]))["dra-plugin"]
    assert isinstance(shared, DraPluginSettings)
    assert (shared.gpu_shares, shared.mps_root) == (True, tmp_path)
    plain = settings_of(parser().parse_args([]))["dra-plugin"]
    assert isinstance(plain, DraPluginSettings)
    assert (plain.gpu_shares, plain.mps_root) == (False, None)
    result = CliRunner().invoke(
        app, ["node-agent", "--backend", "sim", "--memory-cluster", "--mps-root", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "--mps-root runs MPS daemons for GPU shares: it needs --gpu-shares" in result.stderr
