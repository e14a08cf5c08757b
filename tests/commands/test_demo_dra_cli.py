"""`gpuchain demo --dra` runs the DRA path of the same simulated node."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpuchain.cli import app


def test_demo_dra_publishes_a_slice_and_prepares_a_claim() -> None:
    result = CliRunner().invoke(app, ["demo", "--dra", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["driver"] == "gpu.gpuchain.io"
    devices = data["resourceSlice"]["spec"]["devices"]
    assert len(devices) == 8
    assert data["xid"] and data["unprepare"]
