"""`gpuchain validate ...` end to end: ready files written, failures exit 1, plugin over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path

from kube.kmock_server import kmock_server
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.kube import LiveCluster

runner = CliRunner()


def test_validate_driver_writes_ready_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "driver", "--dir", str(tmp_path), "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ok"] and data["gpus"] == 8
    assert (tmp_path / "driver-ready").exists()


def test_validate_toolkit_fails_without_devices(tmp_path: Path) -> None:
    for stale in ("driver", "toolkit", "cuda"):
        (tmp_path / f"{stale}-ready").write_text("{}")
    result = runner.invoke(app, ["validate", "toolkit", "--dir", str(tmp_path), "--dev-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert (tmp_path / "driver-ready").exists()
    assert not (tmp_path / "toolkit-ready").exists(), "a failed link withdraws its ready file"
    assert not (tmp_path / "cuda-ready").exists(), "and those of the links above it"


def test_validate_plugin_against_api_server(tmp_path: Path) -> None:
    with kmock_server() as (url, _):
        LiveCluster.from_url(url).create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "gpu-1"},
                "status": {"capacity": {"nvidia.com/gpu": "8"}},
            }
        )
        args = ["validate", "plugin", "--server", url, "--tries", "1", "--dir", str(tmp_path)]
        ok = runner.invoke(app, [*args, "--node", "gpu-1"])
        assert ok.exit_code == 0, ok.output
        assert (tmp_path / "plugin-ready").exists()
        missing = runner.invoke(app, [*args, "--node", "gpu-2"])
        assert missing.exit_code == 1


def test_validate_wait(tmp_path: Path) -> None:
    timeout = runner.invoke(app, ["validate", "wait", "toolkit", "--dir", str(tmp_path), "--timeout", "0.05"])
    assert timeout.exit_code == 1
    (tmp_path / "toolkit-ready").write_text("{}")
    ok = runner.invoke(app, ["validate", "wait", "toolkit", "--dir", str(tmp_path), "--timeout", "1"])
    assert ok.exit_code == 0 and "toolkit ready" in ok.output
    bad = runner.invoke(app, ["validate", "wait", "kernel", "--dir", str(tmp_path), "--timeout", "0"])
    assert bad.exit_code == 2


def test_validate_driver_on_the_default_backend_never_writes_the_real_ready_dir() -> None:
    """Default backend is simulated: without --backend sim it must not claim a real node's driver works."""
    from gpuchain.validator.ready import DEFAULT_DIR

    existed = (DEFAULT_DIR / "driver-ready").exists()
    result = runner.invoke(app, ["validate", "driver"])
    assert result.exit_code == 2
    assert "--backend defaults to sim" in result.output and "--backend nvml" in result.output
    assert (DEFAULT_DIR / "driver-ready").exists() == existed


def test_validate_driver_says_simulated_on_every_result(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "driver", "--dir", str(tmp_path), "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["simulated"] is True and data["message"].endswith("(simulated)")
    assert json.loads((tmp_path / "driver-ready").read_text())["simulated"] is True
    table = runner.invoke(app, ["validate", "driver", "--backend", "sim", "--dir", str(tmp_path)])
    assert table.exit_code == 0 and "(simulated)" in table.output
    failed = runner.invoke(app, ["validate", "toolkit", "--dir", str(tmp_path), "--dev-dir", str(tmp_path)])
    assert failed.exit_code == 1 and "(simulated)" in failed.output


def test_validate_plugin_reads_node_name_when_run(tmp_path: Path) -> None:
    """NODE_NAME set after import (as in a container started later) is still the default node."""
    with kmock_server() as (url, _):
        LiveCluster.from_url(url).create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "gpu-9"},
                "status": {"capacity": {"nvidia.com/gpu": "1"}},
            }
        )
        args = ["validate", "plugin", "--server", url, "--tries", "1", "--dir", str(tmp_path)]
        result = runner.invoke(app, args, env={"NODE_NAME": "gpu-9"})
        assert result.exit_code == 0, result.output
        assert "gpu-9" in result.output


def test_validate_plugin_without_kubeconfig_is_one_line(tmp_path: Path) -> None:
    env = {"KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path), "KUBERNETES_SERVICE_HOST": None}
    result = runner.invoke(app, ["validate", "plugin", "--node", "x", "--dir", str(tmp_path)], env=env)
    assert result.exit_code == 2
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "no Kubernetes API configuration" in result.output and "missing" in result.output
    assert len(result.output.strip().splitlines()) == 1
