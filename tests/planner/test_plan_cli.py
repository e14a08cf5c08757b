"""`gpuchain plan` and `gpuchain plan fleet` through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from matplotlib.image import imread
from typer.testing import CliRunner

from gpuchain.cli import app

runner = CliRunner()
CHAPTER = ["plan", "--gpu", "a100-40gb", "--model-memory", "3GiB", "--qps-per-instance", "60"]


def test_chapter_example_table() -> None:
    result = runner.invoke(app, CHAPTER, env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "7 x MIG 1g.5gb *" in out
    assert "Recommended: 7 x MIG 1g.5gb - 420 QPS per GPU, hardware isolation." in out
    assert "≤600" in out and "time-slicing x10" in out
    assert "one tenant's OOM takes the shared pool" in out


def test_chapter_example_json_for_scripts() -> None:
    result = runner.invoke(app, [*CHAPTER, "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = {o["label"]: o for o in data["options"]}
    assert (rows["whole GPU"]["instancesPerGpu"], rows["whole GPU"]["qpsPerGpu"]) == (1, 60)
    assert (rows["MIG 1g.5gb"]["instancesPerGpu"], rows["MIG 1g.5gb"]["qpsPerGpu"]) == (7, 420)
    assert rows["MIG 1g.5gb"]["headroomMib"] == 1792
    ts = rows["time-slicing x10"]
    assert (ts["instancesPerGpu"], ts["qpsPerGpu"], ts["qpsNominal"], ts["isolation"]) == (10, 600, True, "none")
    assert data["recommendation"]["label"] == "7 x MIG 1g.5gb"


def test_yaml_and_soft_isolation() -> None:
    result = runner.invoke(app, [*CHAPTER, "--isolation", "soft", "-o", "yaml"])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.stdout)
    assert data["isolationNeed"] == "soft"
    assert data["recommendation"]["sharing"] == "time-slicing"


def test_plot_option_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "plan.png"
    result = runner.invoke(app, [*CHAPTER, "--plot", str(out), "-o", "json"])
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)  # the note about the plot goes to stderr, stdout stays JSON
    assert f"wrote {out}" in result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert imread(out).shape[2] in (3, 4)


def test_model_too_large_is_answered_not_an_empty_table() -> None:
    result = runner.invoke(app, ["plan", "--gpu", "a100-40gb", "--model-memory", "50GiB", "--qps-per-instance", "60"])
    assert result.exit_code == 0, result.output
    assert "Nothing fits" in result.stdout
    assert "A100-80GB" in result.stdout
    assert "Option" not in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan"], "--gpu, --model-memory, --qps-per-instance required"),
        (["plan", "--gpu", "v100", "--model-memory", "3GiB", "--qps-per-instance", "60"], "unknown GPU 'v100'"),
        (["plan", "--gpu", "l4", "--model-memory", "3", "--qps-per-instance", "60"], "'3' has no unit"),
        ([*CHAPTER, "--replicas", "1"], "--replicas: time-slicing needs at least 2"),
        ([*CHAPTER, "--replicas", "1000000000"], "--replicas: at most 40960 on"),
        ([*CHAPTER, "--plot", "plan.svg"], "must end in .png"),
        ([*CHAPTER, "--plot", "/nonexistent-dir/plan.png"], "--plot: cannot write"),
        (["plan", "fleet", "--failure-rate", "5", "--gpus", "128"], "'5' is ambiguous"),
        (["plan", "fleet", "--failure-rate", "5%", "--gpus", "0"], "--gpus: must be at least 1"),
    ],
)
def test_bad_input_exits_2_with_the_fix(args: list[str], message: str) -> None:
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stdout == ""


def test_fleet_chapter_question() -> None:
    result = runner.invoke(app, ["plan", "fleet", "--failure-rate", "5%", "--gpus", "128", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["expectedFailuresPerYear"] == pytest.approx(6.4)
    assert round(data["daysBetweenFailures"]) == 57


def test_fleet_table() -> None:
    result = runner.invoke(app, ["plan", "fleet", "--failure-rate", "5%", "--gpus", "128"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "6.4" in result.stdout and "57.0 days" in result.stdout
    assert "one every 57 days" in result.stdout
