"""`gpuchain remediator` / `gpuchain gpu-health` through the CLI, and the XID table in the docs."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.sim.remediation import SCENARIOS

runner = CliRunner()


def test_remediator_help_names_every_scenario() -> None:
    """The help spells the names out (the command loads the simulator only for --scenario), so it
    must keep naming each one the simulator plays."""
    result = runner.invoke(app, ["remediator", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())
    listed = text.split("Run on a simulated 4-node cluster instead: ")[1].split(".")[0]
    assert listed.split(", ") == list(SCENARIOS)


def test_scenario_xid79_json_report() -> None:
    result = runner.invoke(app, ["remediator", "--scenario", "xid79", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [(a["kind"], a.get("pod"), a["result"]) for a in data["actions"]] == [
        ("taint", None, "done"),
        ("evict", "ml/train-0", "done"),
    ]
    assert data["breaker"]["state"] == "closed" and data["unhealthyNodes"] == ["node-0"]


def test_scenario_storm_dry_run_reports_open_breaker() -> None:
    result = runner.invoke(app, ["remediator", "--scenario", "storm", "--dry-run", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["dryRun"] and data["breaker"]["state"] == "open" and data["actions"] == []
    assert {h["why"] for h in data["held"]} == {"breaker-open", "protected-namespace"}


def test_breaker_share_is_configurable() -> None:
    result = runner.invoke(app, ["remediator", "--scenario", "storm", "--breaker-share", "0.6", "-o", "json"])
    data = json.loads(result.stdout)
    assert data["breaker"]["state"] == "closed" and len(data["actions"]) == 4


def test_table_output_names_the_breaker() -> None:
    result = runner.invoke(app, ["remediator", "--scenario", "storm"])
    assert result.exit_code == 0 and "breaker open" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", "nope"], "unknown scenario 'nope'"),
        (["--scenario", "xid79", "--window", "ten"], "--window"),
        (["--scenario", "xid79", "--breaker-share", "1.5"], "--breaker-share"),
    ],
)
def test_bad_options_exit_2_naming_the_option(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["remediator", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_gpu_health_dry_run_publishes_a_healthy_node() -> None:
    result = runner.invoke(app, ["gpu-health", "--dry-run", "--pod-resources-socket", "/nonexistent", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["healthy"] is True and data["faults"] == {} and data["node"]


def test_gpu_health_needs_a_node_name_on_a_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    result = runner.invoke(app, ["gpu-health", "--once"])
    assert result.exit_code == 2 and "--node" in result.output
