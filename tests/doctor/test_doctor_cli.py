"""`gpuchain doctor`, `gpuchain verify`, `gpuchain sim`: output formats and exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.doctor.ready_gpu_logs import MAX_READY_LOGS

runner = CliRunner()


def test_doctor_friday_json_names_the_root_cause_and_exits_1() -> None:
    result = runner.invoke(app, ["doctor", "--scenario", "friday-scale-out", "-o", "json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["rootCauses"] == ["driver.kernel-mismatch"]
    # one log: the stack's exporter beside the GPU pods of the nodes that work (its pod-resources client); and the
    # probe of a ready GPU pod on each of at most MAX_READY_LOGS GPU nodes (lost GPUs show only in their logs)
    assert data["apiCalls"] == {"list": 9, "logs": 1 + MAX_READY_LOGS}
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


def test_doctor_on_a_cluster_without_gpu_nodes_exits_3_and_says_where_it_looked(tmp_path: Path) -> None:
    """Issue 24: no GPU node read as "every link on every GPU node is healthy", exit 0."""
    scenario = tmp_path / "cpu-only.yaml"
    scenario.write_text("name: cpu-only\nstack: none\nnodes:\n  - {name: cpu, count: 3, gpu: false}\n")
    table = runner.invoke(app, ["doctor", "--scenario", str(scenario)])
    assert table.exit_code == 3 and "healthy" not in table.stdout.replace("nothing is called healthy", "")
    assert "no GPU node found in scenario cpu-only (simulated): 3 node(s), none with an NVIDIA GPU" in table.stdout
    assert "3 no GPU node found" in runner.invoke(app, ["doctor", "--help"], env={"COLUMNS": "300"}).stdout
    data = json.loads(runner.invoke(app, ["doctor", "--scenario", str(scenario), "-o", "json"]).stdout)
    assert (data["gpuNodes"], data["clusterNodes"], data["target"]) == (0, 3, {"kind": "scenario", "name": "cpu-only"})


def test_fixes_are_whole_lines_on_an_80_column_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: fixes were printed in a bordered box (so a copied command carried the border), and
    at 80 columns the finding column cut ids into pieces (driver.k / nel-mism / ch). On a terminal
    the report is now plain lines: the fix is one line of its own, ids and node names are whole."""
    from gpuchain.commands import _render

    monkeypatch.setattr(_render.console, "_force_terminal", True)
    monkeypatch.setattr(_render.console, "_width", 80)
    result = runner.invoke(app, ["doctor", "--scenario", "friday-scale-out"])
    assert result.exit_code == 1
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in result.stdout.splitlines()]
    assert not any(set(line) & set("╭╮╰╯│─") for line in lines), "a box"
    fix = lines[lines.index("  fix:") + 1]
    assert fix.startswith("    kubectl cordon gpu-new-0 && kubectl drain gpu-new-0 --ignore-daemonsets   # then ")
    assert fix.endswith("a release built for 6.8.0-51-generic")  # one line: the terminal, not gpuchain, wraps it
    assert "ROOT CAUSE driver.kernel-mismatch on gpu-new-0 … gpu-new-7 (8)" in lines
    chain = lines[lines.index("chain per GPU node (bottom-up)") :]
    assert max(len(line) for line in chain) <= 80  # wrapped at spaces, never inside a word
    words = " ".join(chain).split()
    assert "driver.kernel-mismatch" in words and "gpu-new-0" in words and "gpu-old-3" in words


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
