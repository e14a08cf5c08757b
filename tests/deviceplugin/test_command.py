"""`gpuchain device-plugin` as a process: registers, reloads on SIGHUP, stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.kubelet.peer import KubeletPeer

GPU = "nvidia.com/gpu"


def test_bad_config_fails_start_with_field_and_reason(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\nflags:\n  migStrategy: sometimes\n")
    result = CliRunner().invoke(app, ["device-plugin", "--config", str(cfg), "--socket-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert f"{cfg}:3: flags.migStrategy" in result.output


async def test_process_registers_reloads_and_stops(tmp_path: Path) -> None:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="gc-"))
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\n")
    kubelet = KubeletPeer(root)
    await kubelet.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DP_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpuchain",
        "device-plugin",
        "--config",
        str(cfg),
        "--socket-dir",
        str(root),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    try:
        await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 8}, timeout=20)
        cfg.write_text("sharing: {timeSlicing: {renameByDefault: true, resources: [{name: gpu, replicas: 2}]}}\n")
        proc.send_signal(signal.SIGHUP)
        await kubelet.wait_for(lambda: kubelet.allocatable().get("nvidia.com/gpu.shared") == 16, timeout=10)
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 10)
        assert proc.returncode == 0, out.decode()
        assert b"SIGHUP: config reloaded" in out
        assert not (root / "nvidia-gpu.shared.sock").exists()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_no_gpus_fails_start_when_fail_on_init_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["device-plugin", "--backend", "nvml", "--socket-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "failOnInitError" in result.output


def test_config_dir_with_a_missing_cluster_default_fails(tmp_path: Path) -> None:
    (tmp_path / "default").write_text("version: v1")
    result = CliRunner().invoke(
        app, ["device-plugin", "--config-dir", str(tmp_path), "--config-key", "nope", "--socket-dir", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "--config-key/NODE_CONFIG_KEY: names config 'nope', which does not exist; available: default" in (
        result.output
    )


def test_list_prints_the_resources_for_the_config(tmp_path: Path) -> None:
    cfg = tmp_path / "ts.yaml"
    cfg.write_text("sharing: {timeSlicing: {renameByDefault: true, resources: [{name: gpu, replicas: 2}]}}")
    result = CliRunner().invoke(app, ["device-plugin", "--list", "--config", str(cfg), "-o", "json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert (row["resource"], row["devices"], row["units"], row["sharing"]) == (
        "nvidia.com/gpu.shared",
        16,
        8,
        "time-slicing",
    )


def test_list_reports_an_invalid_single_strategy() -> None:
    result = CliRunner().invoke(
        app, ["device-plugin", "--list", "--preset", "h100-80gb-x8-mig-mixed"], env={"MIG_STRATEGY": "single"}
    )
    assert result.exit_code == 2
    assert "migStrategy single does not fit" in result.output
