"""The discovery loop and `gpuchain gfd`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakes.sigterm import sigterm_during
from typer.testing import CliRunner

from gpuchain.api.config.v1.config import Config, parse_config
from gpuchain.api.config.v1.durations import INFINITE_NS
from gpuchain.api.config.v1.environment import GFD_ENV_FLAGS
from gpuchain.api.config.v1.selection import NODE_CONFIG_LABEL
from gpuchain.cli import app
from gpuchain.deviceplugin.nodeconfig import ConfigSource, NodeLabelWatch
from gpuchain.discovery.labels import Labels
from gpuchain.discovery.service import (
    Discovery,
    follow_config_label,
    parse_interval,
    read_machine_type,
    sleep_seconds,
)
from gpuchain.gpu.errors import GpuLostError
from gpuchain.gpu.model import Inventory
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import NODE, MemoryCluster

runner = CliRunner()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("60s", 60.0), ("1m30s", 90.0), ("500ms", 0.5), ("2h", 7200.0), ("15", 15.0), (5, 5.0)],
)
def test_parse_interval(text: str | int, seconds: float) -> None:
    assert parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "10 parsecs", "0s", "-5"])
def test_parse_interval_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="sleep interval"):
        parse_interval(text)


def test_machine_type(tmp_path: Path) -> None:
    f = tmp_path / "product_name"
    f.write_text("ProLiant XL675d Gen10 Plus\n")
    assert read_machine_type(f) == "ProLiant XL675d Gen10 Plus"
    assert read_machine_type(tmp_path / "missing") == "unknown"


@pytest.mark.parametrize("kind", ["fifo", "100 MB file"])
def test_machine_type_file_that_is_no_sysfs_attribute_is_unknown_at_once(tmp_path: Path, kind: str) -> None:
    # In a subprocess bounded by a timeout: the old read blocked forever on a FIFO and read a
    # 100 MB file whole (7 s, 1 GB).
    f = tmp_path / "product_name"
    if kind == "fifo":
        os.mkfifo(f)
    else:
        with f.open("wb") as fh:
            fh.truncate(100 * 1024 * 1024)
    code = "import sys; from gpuchain.discovery.service import read_machine_type; print(read_machine_type(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", code, str(f)], capture_output=True, text=True, timeout=5, check=False)
    assert (done.returncode, done.stdout) == (0, "unknown\n"), done.stderr


class _Flaky(SimBackend):
    """Fails its first inventory call, as a GPU dropping off the bus mid-pass would."""

    failures = 1

    def inventory(self) -> Inventory:
        if self.failures:
            self.failures -= 1
            raise GpuLostError("GPU 3 is lost")
        return super().inventory()


def test_loop_survives_a_failed_pass_and_stops_on_request() -> None:
    sim = _Flaky(SimBackend.from_preset("l4-x2").topology)
    seen: list[Labels] = []
    stop = threading.Event()

    def sink(labels: Labels) -> None:
        seen.append(labels)
        if len(seen) == 2:
            stop.set()

    discovery = Discovery(backend=sim, config=parse_config(""), sinks=[sink], clock=lambda: 42.0, stop=stop)
    worker = threading.Thread(target=discovery.run, args=(0.01,))
    worker.start()
    worker.join(5)
    assert not worker.is_alive()
    assert len(seen) == 2
    assert seen[0]["nvidia.com/gfd.timestamp"] == "42"


def test_cli_oneshot_writes_feature_file_and_prints_json(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    result = runner.invoke(
        app,
        [
            "gfd",
            "--preset",
            "h100-80gb-x8-mig-mixed",
            "--mig-strategy",
            "mixed",
            "--oneshot",
            "--no-timestamp",
            "--machine-type-file",
            str(tmp_path / "none"),
            "--output-file",
            str(out),
            "-o",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    labels = json.loads(result.stdout)
    assert labels["nvidia.com/mig-1g.10gb.count"] == "22"
    assert "nvidia.com/gfd.timestamp" not in labels
    assert out.read_text().splitlines() == [f"{k}={v}" for k, v in labels.items()]


def test_cli_reads_mig_strategy_from_config_file_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\nflags:\n  migStrategy: single\n")
    args = ["gfd", "--preset", "h100-80gb-x8-mig-mixed", "--oneshot", "--output-file", "", "-o", "json"]
    result = runner.invoke(app, [*args, "--config-file", str(cfg)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-INVALID"
    monkeypatch.setenv("MIG_STRATEGY", "mixed")
    result = runner.invoke(app, [*args, "--config-file", str(cfg)])
    assert json.loads(result.stdout)["nvidia.com/mig.strategy"] == "mixed"


def test_cli_stdout_feature_file() -> None:
    result = runner.invoke(app, ["gfd", "--preset", "l4-x2", "--oneshot", "--output-file", "-"])
    assert result.exit_code == 0, result.output
    assert "nvidia.com/gpu.product=NVIDIA-L4\n" in result.stdout


def test_cli_bad_config_names_file_and_field(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("flags:\n  migStrategy: diagonal\n")
    result = runner.invoke(app, ["gfd", "--oneshot", "--output-file", "", "--config-file", str(cfg)])
    assert result.exit_code == 2
    assert "config.yaml:2" in result.output
    assert "flags.migStrategy" in result.output


def test_gfd_process_loops_until_sigterm(tmp_path: Path) -> None:
    out = tmp_path / "features.d" / "gfd"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuchain",
            "gfd",
            "--preset",
            "l4-x2",
            "--sleep-interval",
            "200ms",
            "--output-file",
            str(out),
            "--machine-type-file",
            str(tmp_path / "none"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        stamps: set[str] = set()
        while time.monotonic() < deadline and len(stamps) < 2:
            if out.exists():
                lines = dict(line.split("=", 1) for line in out.read_text().splitlines())
                assert lines["nvidia.com/gpu.product"] == "NVIDIA-L4"
                stamps.add(lines["nvidia.com/gfd.timestamp"])
            time.sleep(0.1)
        assert len(stamps) >= 2, "the loop should rewrite the file with a new timestamp"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert not out.exists(), "a stopped loop takes its labels away with the file, as NVIDIA's GFD"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_gfd_sigterm_while_opening_the_gpus_exits_cleanly_and_leaves_no_feature_file(tmp_path: Path) -> None:
    """SIGTERM during start-up (the GPUs being opened, before the first pass): exit 0 and no
    feature file, not the default action's death (a SIGTERM handler came only after start-up)."""
    out = tmp_path / "features.d" / "gfd"
    program = sigterm_during("gpuchain.gpu.sim:SimBackend.__init__", "after")
    args = ["gfd", "--preset", "l4-x2", "--sleep-interval", "200ms", "--output-file", str(out)]
    args += ["--machine-type-file", str(tmp_path / "none")]
    proc = subprocess.run([sys.executable, "-c", program, *args], capture_output=True, timeout=60, check=False)
    log = (proc.stdout + proc.stderr).decode()
    assert proc.returncode == 0, log
    assert "Traceback" not in log
    assert not out.exists() and not list(tmp_path.rglob(".gfd.*"))  # nor a temporary file of one


@pytest.mark.parametrize(
    ("ns", "oneshot", "seconds"),
    [(60 * 10**9, False, 60.0), (5, False, 5e-9), (0, True, None), (INFINITE_NS, False, None), (-1, True, None)],
)
def test_sleep_seconds_as_nvidias_gfd(ns: int, oneshot: bool, seconds: float | None) -> None:
    assert sleep_seconds(ns, oneshot) == seconds


@pytest.mark.parametrize("ns", [0, -5 * 10**9])
def test_sleep_seconds_refuses_a_busy_loop(ns: int) -> None:
    with pytest.raises(ValueError, match="without pause"):
        sleep_seconds(ns, False)


def test_infinite_interval_labels_once_then_waits_for_stop() -> None:
    seen: list[Labels] = []
    stop = threading.Event()
    discovery = Discovery(
        backend=SimBackend.from_preset("l4-x2"), config=parse_config(""), sinks=[seen.append], stop=stop
    )
    worker = threading.Thread(target=discovery.run, args=(None,))
    worker.start()
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    assert worker.is_alive() and len(seen) == 1
    stop.set()
    worker.join(5)
    assert not worker.is_alive() and len(seen) == 1


@pytest.mark.parametrize(
    ("extra", "env", "code", "text"),
    [
        (["--sleep-interval", "0"], {}, 2, "would relabel without pause"),
        (["--sleep-interval", "60"], {}, 2, "is not a duration"),
        (["--sleep-interval", "0", "--oneshot"], {}, 0, ""),
        (["--oneshot"], {"GFD_SLEEP_INTERVAL": "0s"}, 0, ""),
        ([], {"GFD_SLEEP_INTERVAL": "0s"}, 2, "GFD_SLEEP_INTERVAL"),
        ([], {"GFD_SLEEP_INTERVAL": "0s", "GFD_ONESHOT": "true"}, 0, ""),
    ],
)
def test_cli_sleep_interval_and_oneshot(
    extra: list[str], env: dict[str, str], code: int, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = runner.invoke(app, ["gfd", "--preset", "l4-x2", "--output-file", "", *extra])
    assert result.exit_code == code, result.output
    assert text in result.output


def test_cli_drops_config_naming_like_nvidias_gfd(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("sharing: {timeSlicing: {resources: [{name: gpu, rename: gpu.ts, replicas: 4}]}}\n")
    args = ["gfd", "--preset", "l4-x2", "--oneshot", "--output-file", "", "-o", "json", "--config-file", str(cfg)]
    nvidia = json.loads(runner.invoke(app, args).stdout)
    assert nvidia["nvidia.com/gpu.product"] == "NVIDIA-L4-SHARED"
    assert nvidia["nvidia.com/gpu.replicas"] == "4"
    named = json.loads(runner.invoke(app, [*args, "--config-resource-naming"]).stdout)
    assert named["nvidia.com/gpu.product"] == "NVIDIA-L4"


# ---- the device plugin's ConfigMap and the Node's config label, as NVIDIA's operator gives GFD ----


def _plugin_config_map(tmp_path: Path) -> Path:
    """A mounted ConfigMap of named plugin configs (hidden ..data entry as the kubelet writes)."""
    (tmp_path / "default").write_text("version: v1\n")
    (tmp_path / "ts").write_text(
        "version: v1\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n"
    )
    (tmp_path / "..data").mkdir()
    return tmp_path


def test_cli_config_dir_picks_the_cluster_default_key_then_default(tmp_path: Path) -> None:
    args = ["gfd", "--preset", "l4-x2", "--oneshot", "--output-file", "", "-o", "json"]
    directory = str(_plugin_config_map(tmp_path))
    shared = json.loads(runner.invoke(app, [*args, "--config-dir", directory], env={"NODE_CONFIG_KEY": "ts"}).stdout)
    assert (shared["nvidia.com/gpu.replicas"], shared["nvidia.com/gpu.product"]) == ("4", "NVIDIA-L4-SHARED")
    plain = json.loads(runner.invoke(app, [*args, "--config-dir", directory]).stdout)
    assert (plain["nvidia.com/gpu.replicas"], plain["nvidia.com/gpu.product"]) == ("1", "NVIDIA-L4")
    missing = runner.invoke(app, [*args, "--config-dir", directory, "--config-key", "h100-mig"])
    assert missing.exit_code == 2 and "'h100-mig', which does not exist; available: default, ts" in missing.output
    both = runner.invoke(app, [*args, "--config-dir", directory, "--config-file", str(tmp_path / "ts")])
    assert both.exit_code == 2 and "not both" in both.output


def _labelled_node(label: str | None) -> dict[str, Any]:
    labels = {NODE_CONFIG_LABEL: label} if label else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1", "labels": labels}}


def _wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_relabelling_the_node_relabels_at_once_with_the_config_it_names(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = ConfigSource(directory=_plugin_config_map(tmp_path), variables=GFD_ENV_FLAGS)
    cluster = MemoryCluster([_labelled_node(None)])
    watch = NodeLabelWatch(cluster, node_name="gpu-node-1")
    label, rv = watch.read()
    seen: list[Labels] = []
    discovery = Discovery(backend=SimBackend.from_preset("l4-x2"), config=source.load(label, {}), sinks=[seen.append])
    worker = threading.Thread(target=discovery.run, args=(None,))  # infinite: only a config change relabels
    worker.start()
    follower = follow_config_label(
        discovery,
        watch=watch,
        load=lambda value: source.load(value, {}),
        label=label,
        resource_version=rv,
        retry_seconds=0.05,
    )
    try:
        _wait_for(lambda: len(seen) == 1)
        assert seen[-1]["nvidia.com/gpu.replicas"] == "1"
        cluster.patch(NODE, name="gpu-node-1", patch={"metadata": {"labels": {NODE_CONFIG_LABEL: "ts"}}})
        _wait_for(lambda: len(seen) == 2)
        assert (seen[-1]["nvidia.com/gpu.replicas"], seen[-1]["nvidia.com/gpu.product"]) == ("4", "NVIDIA-L4-SHARED")
        # A label naming a missing key keeps the running config (and says so); relabelling works after it.
        cluster.patch(NODE, name="gpu-node-1", patch={"metadata": {"labels": {NODE_CONFIG_LABEL: "h100-mig"}}})
        _wait_for(lambda: "config not switched, keeping the running one" in caplog.text)
        cluster.patch(NODE, name="gpu-node-1", patch={"metadata": {"labels": {NODE_CONFIG_LABEL: None}}})
        _wait_for(lambda: len(seen) == 3)
        assert seen[-1]["nvidia.com/gpu.replicas"] == "1"
    finally:
        discovery.stop.set()
        worker.join(5)
        follower.join(5)
    assert not worker.is_alive() and not follower.is_alive(), "both stop with discovery.stop"


def test_the_label_follower_restarts_after_an_unexpected_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = ConfigSource(directory=_plugin_config_map(tmp_path), variables=GFD_ENV_FLAGS)
    cluster = MemoryCluster([_labelled_node(None)])
    watch = NodeLabelWatch(cluster, node_name="gpu-node-1")
    calls: list[str | None] = []

    def load(value: str | None) -> Config:
        calls.append(value)
        if len(calls) == 1:
            raise RuntimeError("a bug in the loader")
        return source.load(value, {})

    seen: list[Labels] = []
    discovery = Discovery(backend=SimBackend.from_preset("l4-x2"), config=source.load(None, {}), sinks=[seen.append])
    follower = follow_config_label(
        discovery, watch=watch, load=load, label=None, resource_version=None, retry_seconds=0.05
    )
    try:
        cluster.patch(NODE, name="gpu-node-1", patch={"metadata": {"labels": {NODE_CONFIG_LABEL: "ts"}}})
        _wait_for(lambda: "following Node gpu-node-1's" in caplog.text)
        cluster.patch(NODE, name="gpu-node-1", patch={"metadata": {"labels": {NODE_CONFIG_LABEL: "default"}}})
        _wait_for(lambda: bool(seen))
        assert calls[-1] == "default" and seen[-1]["nvidia.com/gpu.replicas"] == "1"
    finally:
        discovery.stop.set()
        follower.join(5)
    assert not follower.is_alive()


# ---- failOnInitError: the driver does not answer (no NVML on the test machine) --------------------


def test_cli_without_nvml_stops_when_fail_on_init_error(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    result = runner.invoke(app, ["gfd", "--backend", "nvml", "--oneshot", "--output-file", str(out)])
    assert result.exit_code == 2, result.output
    assert "GFD_FAIL_ON_INIT_ERROR=false" in result.output
    assert not out.exists()


@pytest.mark.parametrize("how", ["env", "config"])
def test_cli_without_nvml_labels_no_gpu_when_not_fail_on_init_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """As NVIDIA's GFD with its null resource manager: the run succeeds and the labels of GPUs
    that once answered leave the feature file, only the timestamp stays."""
    out = tmp_path / "gfd"
    out.write_text("nvidia.com/gpu.product=NVIDIA-L4\nnvidia.com/gpu.count=2\n")
    args = ["gfd", "--backend", "nvml", "--oneshot", "--output-file", str(out), "-o", "json"]
    if how == "env":
        monkeypatch.setenv("GFD_FAIL_ON_INIT_ERROR", "false")
    else:
        cfg = tmp_path / "config.yaml"
        cfg.write_text("version: v1\nflags:\n  failOnInitError: false\n")
        args += ["--config-file", str(cfg)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert list(json.loads(result.stdout)) == ["nvidia.com/gfd.timestamp"]
    assert [line.split("=")[0] for line in out.read_text().splitlines()] == ["nvidia.com/gfd.timestamp"]


def test_gfd_process_without_nvml_keeps_running_when_not_fail_on_init_error(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuchain",
            "gfd",
            "--backend",
            "nvml",
            "--sleep-interval",
            "200ms",
            "--output-file",
            out,
        ],
        env={**os.environ, "GFD_FAIL_ON_INIT_ERROR": "false"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, "the run should keep going without GPUs"
        assert [line.split("=")[0] for line in out.read_text().splitlines()] == ["nvidia.com/gfd.timestamp"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert proc.stderr is not None
        assert "failOnInitError is false" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
