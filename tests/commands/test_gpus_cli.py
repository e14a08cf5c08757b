"""`gpuchain gpus`: the issue's done-when, through the real CLI entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuchain.cli import app

runner = CliRunner()


def test_h100_json_has_eight_gpus_and_nvlink_topology() -> None:
    result = runner.invoke(app, ["gpus", "--backend", "sim", "--preset", "h100-80gb-x8", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["gpus"]) == 8
    assert len({g["uuid"] for g in data["gpus"]}) == 8
    assert {g["memoryMib"] for g in data["gpus"]} == {81559}
    assert data["links"] and all(link["nvlinks"] == 18 for link in data["links"])
    assert data["driver"] == {"version": "570.86.15", "cudaVersion": "12.8"}


def test_mig_preset_yaml_lists_profiles() -> None:
    result = runner.invoke(app, ["gpus", "--preset", "h100-80gb-x8-mig-mixed", "-o", "yaml"])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.stdout)
    profiles = [m["profile"] for g in data["gpus"] for m in g["migDevices"]]
    assert sorted(set(profiles)) == ["1g.10gb", "2g.20gb", "3g.40gb"]
    assert len(profiles) == 30


def test_table_output_for_people() -> None:
    result = runner.invoke(app, ["gpus", "--preset", "l4-x2"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "NVIDIA L4" in result.stdout and "Driver 570.86.15" in result.stdout


def test_unknown_preset_is_one_line_exit_2() -> None:
    result = runner.invoke(app, ["gpus", "--preset", "nope"])
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0
    assert "unknown preset 'nope'" in result.stderr


def test_bad_topology_file_names_field_and_line(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text("node: n\ngpus:\n  - model: H100-80GB\n    count: 2\n    mig: {1g.10gb: 9}\n")
    result = runner.invoke(app, ["gpus", "--topology", str(path)])
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert "\n" not in line
    assert f"{path}:5: gpus.0.mig: H100-80GB: 9 x 1g.10gb does not fit: at most 7 per GPU" in line


def test_nvml_backend_without_driver_fails_cleanly() -> None:
    """No GPU here: a clear one-line error and exit 2, no traceback."""
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver")
    proc = subprocess.run(
        [sys.executable, "-m", "gpuchain", "gpus", "--backend", "nvml"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "libnvidia-ml.so.1" in proc.stderr
