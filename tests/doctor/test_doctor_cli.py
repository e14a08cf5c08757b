"""`gpuchain doctor`, `gpuchain verify`, `gpuchain sim`: output formats and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpuchain.cli import app

runner = CliRunner()


def test_doctor_friday_json_names_the_root_cause_and_exits_1() -> None:
    result = runner.invoke(app, ["doctor", "--scenario", "friday-scale-out", "-o", "json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["rootCauses"] == ["driver.kernel-mismatch"]
    assert data["apiCalls"] == {"list": 8}
    first = data["findings"][0]
    assert first["id"] == "driver.kernel-mismatch" and first["count"] == 8 and first["root"]
    node = next(n for n in data["nodes"] if n["node"] == "gpu-new-0")
    assert node["brokenLink"] == "driver" and node["links"]["device-plugin"]["state"] == "not-reached"


def test_doctor_table_shows_root_cause_and_chain_view() -> None:
    result = runner.invoke(app, ["doctor", "--scenario", "friday-scale-out"], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "ROOT CAUSE driver.kernel-mismatch" in result.stdout
    assert "chain per GPU node" in result.stdout and "not reached" in result.stdout


def test_doctor_exit_codes_healthy_0_warning_0_bad_scenario_2(tmp_path: Path) -> None:
    assert runner.invoke(app, ["doctor", "--scenario", "healthy"]).exit_code == 0
    assert runner.invoke(app, ["doctor", "--scenario", "leftover-time-slicing"]).exit_code == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnodes:\n  - name: gpu\n    kernal: 1\n")
    result = runner.invoke(app, ["doctor", "--scenario", str(bad)])
    assert result.exit_code == 2 and "bad.yaml:4: nodes.0.kernal" in result.stderr


def test_doctor_live_flag_runs_the_grpc_link_first() -> None:
    result = runner.invoke(app, ["doctor", "--scenario", "gpu-fell-off-bus", "--live", "-o", "json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["rootCauses"] == ["gpu.lost"]


def test_verify_exit_codes_and_json() -> None:
    ok = runner.invoke(app, ["verify", "--scenario", "healthy", "-o", "json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["passed"] is True
    bad = runner.invoke(app, ["verify", "--scenario", "gpu-fell-off-bus", "--no-test-pod", "-o", "json"])
    items = {i["id"]: i for i in json.loads(bad.stdout)["items"]}
    assert bad.exit_code == 1
    assert items["device-plugin-count"]["status"] == "fail" and items["test-pod"]["status"] == "skip"


def test_sim_list_and_run() -> None:
    listed = json.loads(runner.invoke(app, ["sim", "list", "-o", "json"]).stdout)
    healthy = next(r for r in listed if r["name"] == "healthy")
    assert (healthy["stack"], healthy["source"], healthy["baseline"]) == ("gpuchain", "healthy baseline", True)
    assert (healthy["nodes"], healthy["expect"], healthy["symptom"]) == (6, [], "nothing is wrong")
    op = next(r for r in listed if r["name"] == "op-kernel-mismatch")
    assert (op["stack"], op["source"]) == ("gpu-operator", "NVIDIA/gpu-operator#85")
    assert len(listed) >= 40
    run = runner.invoke(app, ["sim", "run", "leftover-time-slicing", "--live-nodes", "1", "-o", "json"])
    data = json.loads(run.stdout)
    assert run.exit_code == 0 and data["objects"]["Node"] == 3
    assert data["live"][0]["agreesWithRendered"] is True
    table = runner.invoke(app, ["sim", "run", "friday-scale-out", "--no-live"], env={"COLUMNS": "200"})
    assert "kernel-mismatch" in table.stdout and "gpuchain doctor --scenario friday-scale-out" in table.stdout
