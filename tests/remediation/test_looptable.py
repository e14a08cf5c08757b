"""NVIDIA's XID catalog as the repair loop reads it (source: the catalog page named in the data
file), and the generated table in docs/remediation.md."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.gpu.xidcatalog import Resolution, catalog, lookup, source
from gpuchain.remediation.gpuloop import (
    GpuRecord,
    LoopPolicy,
    Stage,
    advance,
    needs_repair,
    parse_xid_resolutions,
    resolution,
)
from gpuchain.remediation.looptable import repair_markdown
from gpuchain.remediation.model import Fault

DOC = Path(__file__).resolve().parents[2] / "docs" / "remediation.md"


def fault(*xids: int, lost: bool = False) -> Fault:
    return Fault("GPU-1", "GPU-1", xids, lost, ("GPU-1",))


def test_the_catalog_names_nvidia_s_page_and_its_buckets() -> None:
    assert source() == "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
    assert lookup(109) is not None and lookup(109).bucket == "RESET_GPU"  # type: ignore[union-attr]
    assert lookup(79) is not None and lookup(79).mnemonic == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"  # type: ignore[union-attr]
    assert all(e.code == c for c, e in catalog().items())


def test_resolutions_follow_the_catalog() -> None:
    assert resolution(fault(109)) is Resolution.RESET  # NVIDIA: RESET_GPU (gpuchain's table said restart-app)
    assert resolution(fault(48)) is Resolution.RESET  # WORKFLOW_XID_48
    assert resolution(fault(79)) is Resolution.REBOOT  # RESTART_BM
    assert resolution(fault(94)) is Resolution.NONE  # contained: restart the application
    assert resolution(fault(48, 79)) is Resolution.REBOOT  # the worst wins
    assert resolution(fault(lost=True)) is Resolution.REBOOT
    assert resolution(fault(999)) is Resolution.RESET  # not catalogued: gpuchain's table, unknown = reset
    assert needs_repair(fault(109)) and not needs_repair(fault(13))


def test_docs_carry_the_current_repair_table() -> None:
    table = repair_markdown()
    assert table in DOC.read_text()
    assert "| 109 | ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR | RESET_GPU | drain the GPU, reset it" in table


def test_config_overrides_win_over_the_catalog() -> None:
    overrides = parse_xid_resolutions("109=none, 92=reset,79=RESET")
    assert overrides == {109: Resolution.NONE, 92: Resolution.RESET, 79: Resolution.RESET}
    assert resolution(fault(109), overrides) is Resolution.NONE
    assert resolution(fault(79), overrides) is Resolution.RESET
    policy = LoopPolicy(xid_resolutions=overrides)
    rec, _ = advance(GpuRecord("GPU-1", 0), fault(109), (), False, "b", 0, policy)
    assert rec.stage is Stage.HEALTHY
    rec, _ = advance(GpuRecord("GPU-1", 0), fault(92), (), False, "b", 0, policy)
    assert rec.stage is Stage.RESET


def test_bad_overrides_name_the_item_and_the_form() -> None:
    for text in ("109", "109=maybe", "x=reset", "-3=reset"):
        with pytest.raises(ValueError, match="XID"):
            parse_xid_resolutions(text)


def test_gpu_health_refuses_a_bad_override_in_one_line() -> None:
    result = CliRunner().invoke(app, ["gpu-health", "--dry-run", "--xid-resolution", "109=maybe"])
    assert result.exit_code == 2
    assert "--xid-resolution: '109=maybe': expected XID=<reset|reboot|none>" in result.output
