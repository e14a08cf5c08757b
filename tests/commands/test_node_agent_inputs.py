"""Node agents' command lines: no simulated GPUs at the real kubelet, no tracebacks, flags that reach the agent."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuchain.agent.roles import dra_plugin
from gpuchain.cli import app
from gpuchain.dra.checkpoint import CheckpointError
from gpuchain.dra.driver import DriverConfig


def test_default_backend_refuses_the_kubelets_directory() -> None:
    result = CliRunner().invoke(app, ["device-plugin"])
    assert result.exit_code == 2
    assert "refusing to write simulated GPU results to the kubelet's device plugin directory" in result.stderr
    assert "--backend nvml" in result.stderr


def test_listing_on_the_default_backend_is_fine_and_marked() -> None:
    result = CliRunner().invoke(app, ["device-plugin", "--list", "-o", "json"])
    assert result.exit_code == 0, result.output


def test_a_bad_healthcheck_variable_is_one_line_not_a_traceback() -> None:
    result = CliRunner().invoke(
        app,
        ["device-plugin", "--backend", "sim", "--socket-dir", "/tmp/gc-none"],
        env={"DP_DISABLE_HEALTHCHECKS": "foo"},
    )
    assert result.exit_code == 2
    assert "DP_DISABLE_HEALTHCHECKS: 'foo' is not an XID number" in result.stderr
    assert "Traceback" not in result.output


def test_exporter_port_out_of_range_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["exporter", "--port", "99999"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_dra_plugin_passes_quiet_period_dev_root_and_gpu_shares_to_the_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[DriverConfig] = []

    def capture(backend: object, cluster: object, config: DriverConfig) -> None:
        seen.append(config)
        raise CheckpointError("stop here")

    monkeypatch.setattr(dra_plugin, "DraDriver", capture)
    dirs = [f"--{d}-dir={tmp_path / d}" for d in ("registry", "plugin", "cdi", "state")]
    args = ["dra-plugin", "--backend", "sim", "--cluster", "memory", *dirs]
    flags = ["--recovery-quiet-seconds", "2.5", "--dev-root", str(tmp_path), "--gpu-shares"]
    result = CliRunner().invoke(app, [*args, *flags])
    assert result.exit_code == 2 and "stop here" in result.stderr
    assert (seen[0].recovery_quiet_seconds, seen[0].dev_root, seen[0].gpu_shares) == (2.5, tmp_path, True)
    CliRunner().invoke(app, args)
    assert seen[1].gpu_shares is False  # off unless asked for


@pytest.mark.parametrize(
    ("mount", "fill", "reason"),
    [
        ("size=16k,ro", "", "Read-only file system"),
        ("size=4k,nr_inodes=2", "touch a b 2>/dev/null;", "No space left on device"),
    ],
)
def test_a_socket_directory_that_cannot_take_a_socket_is_one_line(
    tmp_path: Path, mount: str, fill: str, reason: str
) -> None:
    """A read-only or full device plugin directory (issue 25) ended in a Python traceback and exit
    1; it is one line naming the directory and the system's reason, exit 2. The tmpfs is mounted
    in a mount namespace of the test's own (``unshare -m``), so nothing outside sees it."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a tmpfs in a mount namespace of its own")
    sockets = tmp_path / "device-plugins"
    sockets.mkdir()
    script = (
        f"mount -t tmpfs -o {mount} tmpfs {sockets} && cd {sockets} && {fill} "
        f"exec {sys.executable} -m gpuchain device-plugin --backend sim --socket-dir {sockets} --nvml-release-dir ''"
    )
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60)
    errors = [line for line in done.stderr.splitlines() if " INFO " not in line]
    assert done.returncode == 2, done.stderr
    assert errors == [
        f"error: cannot serve in {sockets}: {reason}; --socket-dir must be the kubelet's device plugin "
        "directory, mounted read-write with room for a socket"
    ], done.stderr


def test_the_node_agents_exporter_takes_per_process_from_its_flag_or_dcgm_exporters_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As ``gpuchain exporter``: --per-process, or KUBERNETES_VIRTUAL_GPUS from a ClusterPolicy's
    dcgmExporter.env; --pods-from-api beside it."""
    from gpuchain.agent.settings import ExporterSettings
    from gpuchain.commands.node_agent import parser, settings_of

    monkeypatch.delenv("KUBERNETES_VIRTUAL_GPUS", raising=False)
    plain = settings_of(parser().parse_args([]))["exporter"]
    flagged = settings_of(parser().parse_args(["--per-process", "--pods-from-api"]))["exporter"]
    monkeypatch.setenv("KUBERNETES_VIRTUAL_GPUS", "true")
    from_env = settings_of(parser().parse_args([]))["exporter"]
    assert isinstance(plain, ExporterSettings) and isinstance(flagged, ExporterSettings)
    assert isinstance(from_env, ExporterSettings)
    assert (plain.per_process, plain.pods_from_api) == (False, False)
    assert (flagged.per_process, flagged.pods_from_api) == (True, True)
    assert (from_env.per_process, from_env.pods_from_api) == (True, False)
