"""`gpuchain dra-demo` and `gpuchain dra-plugin` as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from fakes.sigterm import sigterm_during
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.dra.kinds import DRIVER
from gpuchain.kubelet.dra_peer import DraPeer

runner = CliRunner()


def test_dra_demo_json_transcript() -> None:
    result = runner.invoke(app, ["dra-demo", "-o", "json"])
    assert result.exit_code == 0, result.output
    t = json.loads(result.output)
    assert t["registration"]["registered"] and t["registration"]["service"] == "v1.DRAPlugin"
    assert t["publish"]["generation"] == 1 and len(t["publish"]["devices"]) == 8
    assert t["resourceSlice"]["spec"]["driver"] == DRIVER
    assert t["prepare"]["error"] == "" and t["prepare"]["idempotent"]
    assert [d["device"] for d in t["prepare"]["devices"]] == t["claim"]["allocated"]
    assert t["xid"]["withdrawn"] and t["xid"]["generation"] == 2 and t["xid"]["devices"] == 7
    assert t["unprepare"] == {"errors": ["", ""], "cdiSpecRemoved": True}


def test_dra_demo_on_a_mig_node_prints_the_slice() -> None:
    result = runner.invoke(app, ["dra-demo", "--preset", "h100-80gb-x8-mig-mixed"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "gpu-0-mig-1g10gb" in result.output and "1g.10gb" in result.output
    assert "NodeUnprepareResources twice: ok" in result.output


def test_dra_demo_unknown_preset_is_a_user_error() -> None:
    result = runner.invoke(app, ["dra-demo", "--preset", "nope"])
    assert result.exit_code == 2
    assert "unknown preset" in result.output


async def test_dra_plugin_registers_and_stops_cleanly(short_dir: Path) -> None:
    registry, plugins = short_dir / "reg", short_dir / "plugins"
    args = ["--backend", "sim", "--cluster", "memory", "--registry-dir", str(registry), "--plugin-dir", str(plugins)]
    args += ["--unlabelled-nodes", "dra"]  # the memory cluster has no Node to label
    with socket.socket() as probe:  # a free port for the metrics
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args += ["--metrics-port", str(port), "--metrics-address", "127.0.0.1"]
    args += ["--cdi-dir", str(short_dir / "cdi"), "--state-dir", str(short_dir / "state")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuchain", "dra-plugin", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "200"},
    )
    peer = DraPeer(registry)
    try:
        plugin = await peer.wait_for(DRIVER, timeout=30)
        assert plugin.endpoint == str(plugins / "dra.sock") and plugin.version == "v1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            scraped = resp.read().decode()
        assert 'gpuchain_dra_devices{state="available",node="h100-node"} 8' in scraped.splitlines()
        assert 'gpuchain_dra_prepare_seconds_count{result="ok",node="h100-node"} 0.0' in scraped.splitlines()
    finally:
        await peer.close()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode()
    log = out.decode()
    assert "ResourceSlice for pool h100-node: 8 devices, generation 1" in log
    assert "registered with the kubelet" in log
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline and list(registry.iterdir()):
        time.sleep(0.05)
    assert list(registry.iterdir()) == [] and not (plugins / "dra.sock").exists()


def test_dra_plugin_without_cluster_config_says_how_to_fix_it(short_dir: Path) -> None:
    env = {"KUBECONFIG": str(short_dir / "missing"), "HOME": str(short_dir), "KUBERNETES_SERVICE_HOST": None}
    args = ["dra-plugin", "--registry-dir", str(short_dir / "reg"), "--plugin-dir", str(short_dir / "p")]
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 2
    assert "no Kubernetes API configuration" in result.output and "--cluster memory" in result.output
    assert not (short_dir / "reg").exists()


def test_sigterm_during_start_up_still_removes_the_sockets(short_dir: Path) -> None:
    """SIGTERM right after the sockets exist, before start-up is over: the plugin stops cleanly
    once up (exit 0, both sockets gone) instead of dying on the default action and leaving them."""
    registry, plugins = short_dir / "reg", short_dir / "plugins"
    args = ["--backend", "sim", "--cluster", "memory", "--registry-dir", str(registry), "--plugin-dir", str(plugins)]
    args += ["--unlabelled-nodes", "dra"]  # the memory cluster has no Node to label
    with socket.socket() as probe:  # a free port for the metrics
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args += ["--metrics-port", str(port), "--metrics-address", "127.0.0.1"]
    args += ["--cdi-dir", str(short_dir / "cdi"), "--state-dir", str(short_dir / "state")]
    program = sigterm_during("gpuchain.dra.server:DraPluginServer.start", "after")
    proc = subprocess.run(
        [sys.executable, "-c", program, "dra-plugin", *args], capture_output=True, timeout=60, check=False
    )
    log = (proc.stdout + proc.stderr).decode()
    assert proc.returncode == 0, log
    assert "stopped; sockets removed" in log and "Traceback" not in log
    assert list(registry.iterdir()) == [] and list(plugins.iterdir()) == []
