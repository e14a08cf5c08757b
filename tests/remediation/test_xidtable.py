"""The one XID table as the remediator and the repair loop read it, and the generated tables in
docs/remediation.md, in full and its notable rows (source of the facts: the header of
src/gpuchain/gpu/xids.yaml)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from remediation.xidtable import xid_markdown
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.gpu.xid import Resolution, Threshold, XidOverride, parse_overrides, xid_table
from gpuchain.remediation.gpuloop import GpuRecord, LoopPolicy, Stage, advance, needs_repair, resolution
from gpuchain.remediation.model import Fault, decode_faults, encode_faults

ROOT = Path(__file__).resolve().parents[2]


def fault(*xids: int, lost: bool = False, repeated: tuple[int, ...] = ()) -> Fault:
    return Fault(uuid="GPU-1", gpu="GPU-1", xids=xids, lost=lost, covers=("GPU-1",), repeated=repeated)


def test_resolutions_follow_nvidia_s_catalog() -> None:
    assert resolution(fault(109)) is Resolution.RESET_GPU  # RESET_GPU in NVIDIA's catalog
    assert resolution(fault(48)) is Resolution.RESET_GPU  # WORKFLOW_XID_48 ends in a reset
    assert resolution(fault(74)) is Resolution.RESET_GPU  # WORKFLOW_NVLINK_ERR
    assert resolution(fault(79)) is Resolution.REBOOT_NODE  # RESTART_BM
    assert resolution(fault(94)) is Resolution.RESTART_APP  # contained: restart the application
    assert resolution(fault(63)) is Resolution.NONE  # IGNORE
    assert resolution(fault(48, 79)) is Resolution.REBOOT_NODE  # the worst wins
    assert resolution(fault(lost=True)) is Resolution.REBOOT_NODE
    assert resolution(fault(999)) is Resolution.RESET_GPU  # not in the table: not safe
    assert needs_repair(fault(109)) and not needs_repair(fault(13)) and not needs_repair(fault(94))


def test_a_repeated_xid_needs_its_threshold_s_resolution() -> None:
    assert not needs_repair(fault(13))
    assert needs_repair(fault(13, repeated=(13,)))
    assert resolution(fault(94, repeated=(94,))) is Resolution.RESET_GPU
    # an XID without a threshold is unchanged by "repeated"
    assert resolution(fault(63, repeated=(63,))) is Resolution.NONE


def test_repeated_travels_in_the_faults_annotation() -> None:
    faults = {"GPU-1": fault(13, 109, repeated=(109,))}
    text = encode_faults(faults)
    assert json.loads(text)["GPU-1"]["repeated"] == [109]
    assert decode_faults(text) == faults
    assert "XID 109 (Context Switch Timeout Error, repeated)" in faults["GPU-1"].summary()


def test_config_overrides_win_over_the_table() -> None:
    overrides = parse_overrides("109=none, 92=reset,79=RESET, 13=reboot@2/10m")
    assert overrides[109] == XidOverride(Resolution.NONE)
    assert overrides[92] == XidOverride(Resolution.RESET_GPU)
    assert overrides[13] == XidOverride(threshold=Threshold(2, 600.0, Resolution.REBOOT_NODE))
    assert resolution(fault(109), overrides) is Resolution.NONE
    assert resolution(fault(79), overrides) is Resolution.RESET_GPU
    assert resolution(fault(13, repeated=(13,)), overrides) is Resolution.REBOOT_NODE
    policy = LoopPolicy(xid_resolutions=overrides)
    rec, _ = advance(
        GpuRecord(uuid="GPU-1", index=0),
        fault=fault(109),
        pods=(),
        breaker_open=False,
        boot_id="b",
        now=0,
        policy=policy,
    )
    assert rec.stage is Stage.HEALTHY
    rec, _ = advance(
        GpuRecord(uuid="GPU-1", index=0),
        fault=fault(92),
        pods=(),
        breaker_open=False,
        boot_id="b",
        now=0,
        policy=policy,
    )
    assert rec.stage is Stage.RESET


def test_both_forms_for_one_xid_combine() -> None:
    overrides = parse_overrides("13=none,13=reset@3/30s")
    assert overrides == {13: XidOverride(Resolution.NONE, Threshold(3, 30.0, Resolution.RESET_GPU))}
    row = xid_table().with_overrides(overrides).describe(13)
    assert row.needs() is Resolution.NONE and row.needs(repeated=True) is Resolution.RESET_GPU


@pytest.mark.parametrize(
    "text", ["109", "109=maybe", "x=reset", "-3=reset", "13=reset@0/1h", "13=reset@3/0s", "13=reset@3"]
)
def test_bad_overrides_name_the_item_and_the_form(text: str) -> None:
    with pytest.raises(ValueError, match="XID"):
        parse_overrides(text)


def test_gpu_health_refuses_a_bad_override_in_one_line() -> None:
    result = CliRunner().invoke(app, ["gpu-health", "--dry-run", "--xid-resolution", "109=maybe"])
    assert result.exit_code == 2
    assert "--xid-resolution: '109=maybe': expected XID=<none|restart-app|reset|reboot>[@COUNT/WINDOW]" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_docs_carry_the_current_table() -> None:
    table = xid_markdown()
    assert table in (ROOT / "docs" / "remediation.md").read_text()
    assert all(f"| {code} |" in table for code in xid_table().rows)


def test_docs_carry_the_notable_rows() -> None:
    brief = xid_markdown(brief=True)
    assert brief in (ROOT / "docs" / "remediation.md").read_text()
    codes = {line.split("|")[1].strip() for line in brief.splitlines()[2:]}
    assert {"13", "31", "43", "45", "68", "109", "48", "79", "94"} <= codes
    assert "39" not in codes  # a copy-engine error: withhold and evict, like most


def test_the_table_s_last_columns_follow_the_rules() -> None:
    rows = {line.split("|")[1].strip(): line for line in xid_markdown().splitlines()[2:]}
    assert rows["13"].endswith("| nothing | 5 within 1h: withhold, evict, reset |")
    assert rows["79"].endswith("| reboot-node | withhold, evict, reboot |  |")
    assert rows["94"].endswith("| withhold, evict | 3 within 1d: withhold, evict, reset |")
    assert rows["63"].endswith("| none | withhold |  |")
    assert rows["109"].endswith("| reset-gpu | nothing | 3 within 1h: withhold, evict, reset |")
