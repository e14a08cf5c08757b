"""Every result computed from simulated GPUs says so, in what a person reads and in what a script reads.

The README promises the mark; these tests read the output for it (not only the exit code).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuchain.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["gpus"], "Driver 570.86.15, CUDA 12.8 (simulated)"),
        (["device-plugin", "--list"], "Resources this node announces (simulated)"),
        (["gfd", "--oneshot", "--output-file", ""], "feature discovery labels (simulated)"),
        (["gfd", "--oneshot", "--output-file", "-"], "# simulated GPUs: these labels describe no real hardware"),
        (["doctor", "--local", "--backend", "sim"], "NVML: driver 570.86.15, CUDA 12.8, 8 GPU(s) (simulated)"),
        (["doctor", "--scenario", "healthy"], "scenario healthy (simulated)"),
        (["demo", "--quiet-seconds", "0"], "driver 570.86.15 (simulated)"),
        (
            ["mig", "apply", "-c", "all-1g.10gb", "--dry-run"],
            "GPUs after apply (planned; nothing was changed) (simulated)",
        ),
        (["mig", "assert", "-c", "all-disabled"], "node has MIG layout 'all-disabled' (simulated)"),
        (["remediator", "--scenario", "xid79"], "scenario xid79 (simulated): breaker closed"),
        (["top"], "8 GPUs answering of 8 expected (seen) (simulated)"),
        (["top", "--scenario", "time-sliced"], "gpu-0: 8 GPUs answering of 8 expected (seen) (simulated)"),
    ],
    ids=lambda a: " ".join(a) if isinstance(a, list) else None,
)
def test_people_see_the_mark(args: list[str], expect: str) -> None:
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert expect in result.stdout, result.stdout


def test_validate_marks_its_message_and_ready_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "driver", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "sees 8 GPU(s) (simulated)" in result.stdout
    assert json.loads((tmp_path / "driver-ready").read_text() or "{}").get("simulated") is True


@pytest.mark.parametrize(
    "args",
    [
        ["gpus"],
        ["doctor", "--local", "--backend", "sim"],
        ["gpu-health", "--dry-run"],
        ["mig", "apply", "-c", "all-1g.10gb", "--dry-run"],
        ["mig", "assert", "-c", "all-disabled"],
        ["remediator", "--scenario", "xid79"],
        ["top"],
    ],
    ids=" ".join,
)
def test_scripts_see_simulated_true(args: list[str]) -> None:
    result = runner.invoke(app, [*args, "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["simulated"] is True


def test_device_plugin_list_rows_are_marked() -> None:
    rows = json.loads(runner.invoke(app, ["device-plugin", "--list", "-o", "json"]).stdout)
    assert rows and all(r["simulated"] is True for r in rows)


def test_nvml_missing_is_exit_2_in_every_command_that_needs_it(tmp_path: Path) -> None:
    """No libnvidia-ml here: the commands that need NVML all stop with one line and exit 2."""
    for args in (
        ["gpus", "--backend", "nvml"],
        ["device-plugin", "--backend", "nvml", "--socket-dir", str(tmp_path)],
        ["gfd", "--backend", "nvml", "--oneshot", "--output-file", "-"],
        ["exporter", "--backend", "nvml", "--port", "0"],
        ["top", "--backend", "nvml"],
        ["mig", "apply", "-c", "all-disabled", "--backend", "nvml"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "NVML library (libnvidia-ml.so.1) not found" in result.output, args
