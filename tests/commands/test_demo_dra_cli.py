"""`gpuchain demo --dra` is the DRA demo of the same simulated node (one implementation with dra-demo)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpuchain.cli import app


def test_demo_dra_prepares_a_claim_and_withdraws_on_xid() -> None:
    result = CliRunner().invoke(app, ["demo", "--dra", "-o", "json"])
    assert result.exit_code == 0, result.output
    t = json.loads(result.stdout)
    assert t["driver"] == "gpu.gpuchain.io" and len(t["resourceSlice"]["spec"]["devices"]) == 8
    assert t["prepare"]["error"] == "" and [d["device"] for d in t["prepare"]["devices"]] == t["claim"]["allocated"]
    assert t["xid"]["withdrawn"] and t["xid"]["generation"] == 2 and t["xid"]["devices"] == 7
    assert t["unprepare"] == {"errors": ["", ""], "cdiSpecRemoved": True}


def test_demo_dra_honours_the_preset() -> None:
    result = CliRunner().invoke(app, ["demo", "--dra", "--preset", "h100-80gb-x8-mig-mixed", "-o", "json"])
    assert result.exit_code == 0, result.output
    names = [d["name"] for d in json.loads(result.stdout)["resourceSlice"]["spec"]["devices"]]
    assert any("-mig-1g10gb-" in n for n in names)
