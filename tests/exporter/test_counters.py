"""The collectors CSV in dcgm-exporter's format."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.exporter.counters import CollectorsFileError, Field, PromType, load_collectors, parse_collectors


def test_default_set_has_the_dashboard_and_issue_fields() -> None:
    counters = load_collectors()
    fields = {c.field for c in counters.counters}
    for f in (
        Field.GPU_UTIL,
        Field.FB_USED,
        Field.FB_FREE,
        Field.GPU_TEMP,
        Field.POWER_USAGE,
        Field.TOTAL_ENERGY_CONSUMPTION,
        Field.XID_ERRORS,
        Field.XID_ERRORS_TOTAL,
        Field.SM_CLOCK,
        Field.MEM_CLOCK,
        Field.UNCORRECTABLE_REMAPPED_ROWS,
        Field.CORRECTABLE_REMAPPED_ROWS,
    ):
        assert f in fields
    assert [c.field for c in counters.labels()] == [Field.DRIVER_VERSION]
    assert counters.skipped == ()


def test_dcgm_exporter_file_with_fields_nvml_cannot_read() -> None:
    text = """
# Format
# DCGM FIELD, Prometheus metric type, help message
DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_PCIE_TX_THROUGHPUT,  counter, Total number of bytes transmitted through PCIe TX (in KB) via NVML.
DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).
DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).
"""
    counters = parse_collectors(text, "dcgm.csv")
    assert [c.field for c in counters.counters] == [
        Field.SM_CLOCK,
        Field.DEC_UTIL,
        Field.TOTAL_ENERGY_CONSUMPTION,
    ]
    assert counters.counters[2].prom_type is PromType.counter
    assert counters.counters[2].help == "Total energy consumption since boot (in mJ)."
    assert counters.skipped == ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "DCGM_FI_DEV_VGPU_LICENSE_STATUS")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("DCGM_FI_DEV_GPU_UTIL, gauge, ok\nGPU_TEMP, gauge, typo", r"m.csv:2: 'GPU_TEMP' is not a DCGM field"),
        ("DCGM_FI_DEV_GPU_UTIL, gaug, typo", r"m.csv:1: DCGM_FI_DEV_GPU_UTIL: unknown Prometheus type 'gaug'"),
        ("DCGM_FI_DEV_GPU_UTIL", r"m.csv:1: expected 'DCGM field, Prometheus type, help message'"),
        (
            "DCGM_FI_DEV_GPU_UTIL, gauge, a\n\nDCGM_FI_DEV_GPU_UTIL, gauge, b",
            r"m.csv:3: .* listed twice \(first on line 1\)",
        ),
        ("DCGM_FI_DRIVER_VERSION, gauge, x", r"m.csv:1: DCGM_FI_DRIVER_VERSION is a text field"),
        ("DCGM_FI_DEV_GPU_TEMP, label, x", r"m.csv:1: DCGM_FI_DEV_GPU_TEMP is numeric"),
        ("# only comments\n", r"m.csv: no usable metric rows"),
    ],
)
def test_bad_files_name_the_line(text: str, message: str) -> None:
    with pytest.raises(CollectorsFileError, match=message):
        parse_collectors(text, "m.csv")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(CollectorsFileError, match=r"missing.csv: cannot read file: No such file or directory"):
        load_collectors(tmp_path / "missing.csv")


def test_cli_rejects_a_bad_collectors_file_before_serving(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("DCGM_FI_DEV_GPU_UTIL, histogram, nope\n")
    result = CliRunner().invoke(app, ["exporter", "--port", "0", "--collectors", str(bad)])
    assert result.exit_code == 2
    assert "bad.csv:1" in result.output
