"""`gpuchain device-plugin` as a process: registers, reloads on SIGHUP, stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest
from kube.kmock_server import kmock_server, write_kubeconfig
from typer.testing import CliRunner

from gpuchain.api.config.v1.selection import NODE_CONFIG_LABEL
from gpuchain.cli import app
from gpuchain.deviceplugin.nodeconfig import REASON_NOT_FOUND
from gpuchain.kube import NODE, LiveCluster
from gpuchain.kubelet.peer import KubeletPeer

GPU = "nvidia.com/gpu"


def test_bad_config_fails_start_with_field_and_reason(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\nflags:\n  migStrategy: sometimes\n")
    result = CliRunner().invoke(app, ["device-plugin", "--config", str(cfg), "--socket-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert f"{cfg}:3: flags.migStrategy" in result.output


async def test_process_registers_reloads_and_stops(tmp_path: Path, short_dir: Path) -> None:
    root = short_dir
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


def test_no_gpus_fails_start_when_fail_on_init_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["device-plugin", "--backend", "nvml", "--socket-dir", str(tmp_path)])
    assert result.exit_code == 2  # NVML missing is exit 2 in every command
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


def _gpu_node(label: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-0", "labels": {NODE_CONFIG_LABEL: label}}}


def _configs(root: Path) -> Path:
    root.mkdir()
    (root / "default").write_text("version: v1\n")
    (root / "ts").write_text("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}\n")
    return root


async def test_process_follows_its_node_label_over_a_real_http_api(tmp_path: Path, short_dir: Path) -> None:
    """The command end to end: NODE_NAME + --config-dir, the label read and watched through
    LiveCluster over kmock's HTTP API, the kubelet peer over unix sockets."""
    root = short_dir
    kubelet = KubeletPeer(root)
    await kubelet.start()
    with kmock_server() as (url, _emulator):
        cluster = LiveCluster.from_url(url)
        cluster.create(_gpu_node("ts"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("DP_")}
        env |= {"KUBECONFIG": str(write_kubeconfig(tmp_path / "kubeconfig", url)), "NODE_NAME": "gpu-0"}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "gpuchain", "device-plugin", "--config-dir", str(_configs(tmp_path / "cfg"))),
            *("--socket-dir", str(root)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
        )
        try:
            await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 16}, timeout=20)
            relabel = {"metadata": {"labels": {NODE_CONFIG_LABEL: "default"}}}
            await asyncio.to_thread(cluster.patch, NODE, name="gpu-0", patch=relabel)
            await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 8}, timeout=10)
            relabel = {"metadata": {"labels": {NODE_CONFIG_LABEL: "nope"}}}
            await asyncio.to_thread(cluster.patch, NODE, name="gpu-0", patch=relabel)
            async with asyncio.timeout(10):
                while not await asyncio.to_thread(cluster.events_for, _gpu_node("nope")):
                    await asyncio.sleep(0.05)
            assert kubelet.allocatable() == {GPU: 8}
            proc.send_signal(signal.SIGTERM)
            out, _ = await asyncio.wait_for(proc.communicate(), 10)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await kubelet.stop()
        (event,) = cluster.events_for(_gpu_node("nope"))
    text = out.decode()
    assert proc.returncode == 0, text
    assert f"node label {NODE_CONFIG_LABEL}=default: config reloaded from {tmp_path / 'cfg' / 'default'}" in text
    assert f"node label {NODE_CONFIG_LABEL}=nope: config not reloaded, keeping the running one" in text
    assert (event["type"], event["reason"]) == ("Warning", REASON_NOT_FOUND)


def test_start_with_a_label_naming_a_missing_key_fails_and_records_an_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with kmock_server() as (url, _emulator):
        cluster = LiveCluster.from_url(url)
        cluster.create(_gpu_node("h100-mig"))
        monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kubeconfig", url)))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        args = ["device-plugin", "--config-dir", str(_configs(tmp_path / "cfg")), "--node-name", "gpu-0"]
        result = CliRunner().invoke(app, [*args, "--socket-dir", str(tmp_path)])
        (event,) = cluster.events_for(_gpu_node("h100-mig"))
    assert result.exit_code == 2
    assert "names config 'h100-mig', which does not exist; available: default, ts" in result.output
    assert event["reason"] == REASON_NOT_FOUND and "did not start" in event["message"]


def test_list_reads_the_label_once_and_node_name_alone_needs_no_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    alone = CliRunner().invoke(app, ["device-plugin", "--list", "-o", "json", "--node-name", "gpu-0"])
    assert alone.exit_code == 0, alone.output
    assert json.loads(alone.output)[0]["devices"] == 8
    with kmock_server() as (url, _emulator):
        LiveCluster.from_url(url).create(_gpu_node("ts"))
        monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kubeconfig", url)))
        args = ["device-plugin", "--list", "-o", "json", "--config-dir", str(_configs(tmp_path / "cfg"))]
        result = CliRunner().invoke(app, [*args, "--node-name", "gpu-0"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0]["devices"] == 16


def test_config_file_is_nvidias_option_and_naming_is_dropped_like_nvidias(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("sharing: {timeSlicing: {resources: [{name: gpu, rename: gpu.ts, devices: 2, replicas: 2}]}}\n")
    result = CliRunner().invoke(app, ["device-plugin", "--list", "--config-file", str(cfg), "-o", "json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert (row["resource"], row["devices"], row["units"]) == (GPU, 16, 8)
    assert "Setting the 'rename' field in sharing.timeSlicing.resources is not yet supported" in caplog.text
    result = CliRunner().invoke(
        app, ["device-plugin", "--list", "--config-file", str(cfg), "--config-resource-naming", "-o", "json"]
    )
    rows = {r["resource"]: r["devices"] for r in json.loads(result.stdout)}
    assert rows == {GPU: 6, "nvidia.com/gpu.ts": 4}


def test_vfio_discovery_strategy_is_refused_by_the_plugin(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("flags: {deviceDiscoveryStrategy: vfio}\n")
    result = CliRunner().invoke(app, ["device-plugin", "--list", "--config-file", str(cfg)])
    assert result.exit_code == 2
    assert "vfio is for feature discovery only" in result.output
