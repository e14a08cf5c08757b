"""Output people can read and pipe: full ids, no markup or emoji, one-line errors and log lines.

Run through the real entry point (``python -m gpuchain``) where the reader matters: a pipe is
what ``| grep`` and a pod's log see. The bus id ``00000000:AB:00.0`` is GPU 5 of the
``h100-80gb-x8-mig-mixed`` preset; real HGX H100 boards use ``AB`` in their bus ids, and rich
used to print ``:AB:`` as an emoji.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import re
import subprocess
import sys

import pytest
import yaml
from rich.table import Table
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.commands._output import (
    JsonLogFormatter,
    TextLogFormatter,
    _console,
    camel,
    plain,
    records,
    to_yaml,
    to_yaml_all,
)

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def gpuchain(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS")}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gpuchain", *args], capture_output=True, text=True, timeout=120, env=full, check=False
    )


def test_bus_id_with_ab_is_printed_exactly_in_a_pipe() -> None:
    result = gpuchain("gpus", "--preset", "h100-80gb-x8-mig-mixed")
    assert result.returncode == 0, result.stderr
    assert "00000000:AB:00.0" in result.stdout
    assert "\N{NEGATIVE SQUARED AB}" not in result.stdout


def test_bus_id_with_ab_is_printed_exactly_on_a_terminal() -> None:
    result = gpuchain("gpus", "--preset", "h100-80gb-x8-mig-mixed", env={"TTY_COMPATIBLE": "1", "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    shown = ANSI.sub("", result.stdout)
    assert "\x1b[" in result.stdout, "a terminal gets colour"
    assert "00000000:AB:00.0" in shown and "\N{NEGATIVE SQUARED AB}" not in shown


def test_piped_table_has_every_full_uuid_one_row_per_gpu_and_no_boxes() -> None:
    data = json.loads(gpuchain("gpus", "--preset", "h100-80gb-x8-mig-mixed", "-o", "json").stdout)
    table = gpuchain("gpus", "--preset", "h100-80gb-x8-mig-mixed").stdout
    uuids = [g["uuid"] for g in data["gpus"]] + [m["uuid"] for g in data["gpus"] for m in g["migDevices"]]
    assert len(uuids) > 8
    for uuid in uuids:
        rows = [line for line in table.splitlines() if uuid in line]
        assert len(rows) == 1, (uuid, table)
    assert not set("│┃━─┏└") & set(table)
    assert all(line == line.rstrip() for line in table.splitlines())
    header = next(line for line in table.splitlines() if line.startswith("GPU "))
    assert header.split() == ["GPU", "UUID", "Name", "Memory", "MiB", "CC", "NUMA", "PCI", "bus", "MIG"]


def test_an_exported_columns_does_not_cut_a_piped_table() -> None:
    # Some shells and CI runners export COLUMNS; rich honours it, and a wide table lost columns.
    data = json.loads(gpuchain("sim", "list", "-o", "json").stdout)
    table = gpuchain("sim", "list", env={"COLUMNS": "80"}).stdout
    assert table.splitlines()[0].split() == ["scenario", "stack", "source", "nodes", "doctor", "names", "symptom"]
    for row in data:
        assert any(line.startswith(row["name"] + " ") and row["symptom"] in line for line in table.splitlines()), row


@pytest.mark.parametrize("preset", ["h100-80gb-x8", "h100-80gb-x8-mig-mixed", "l4-x2"])
def test_terminal_at_80_columns_keeps_every_id_whole_and_leaves_columns_out(preset: str) -> None:
    """A UUID folded over five lines and a bus id over two (issue 24) cannot be read or copied:
    identifiers stay whole, and a table too wide for 80 columns leaves columns out and says so."""
    result = gpuchain("gpus", "--preset", preset, env={"TTY_COMPATIBLE": "1", "COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    shown = ANSI.sub("", result.stdout)
    lines = shown.splitlines()
    assert "…" not in shown
    assert all(len(line) <= 80 for line in lines)
    data = json.loads(gpuchain("gpus", "--preset", preset, "-o", "json").stdout)
    uuids = [g["uuid"] for g in data["gpus"]] + [m["uuid"] for g in data["gpus"] for m in g["migDevices"]]
    for uuid in uuids:
        assert sum(uuid in line for line in lines) == 1, (uuid, shown)
    fragments = [line for line in lines if re.search(r"\b(GPU|MIG)-[0-9a-f-]+", line)]
    assert len(fragments) == len(uuids), "no line holds a piece of a UUID"
    bus_ids = [g["pciBusId"] for g in data["gpus"]]
    if "PCI bus" in next(line for line in lines if " UUID " in line):
        assert all(any(b in line for line in lines) for b in bus_ids)
    else:
        assert "PCI bus" in next(line for line in lines if "left out at 80 columns" in line)
        assert not any(b[:8] in line for b in bus_ids for line in lines), "no piece of a bus id"
    assert "-o wide shows every column" in shown


def test_wide_adds_columns_and_never_cuts_on_a_terminal() -> None:
    result = gpuchain("gpus", "-o", "wide", env={"TTY_COMPATIBLE": "1", "COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    shown = ANSI.sub("", result.stdout)
    assert "PCI device id" in shown and "0x233010DE" in shown
    assert any(len(line) > 80 for line in shown.splitlines())


@pytest.mark.parametrize(
    "args",
    [["gpus", "--bogus"], ["gpus", "-o", "xml"], ["gpus", "--backend", "nvml", "--preset", "l4-x2"], ["nosuchcommand"]],
)
def test_usage_error_is_one_line_and_exit_2(args: list[str]) -> None:
    result = gpuchain(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and "--help" in lines[0]
    assert result.stdout == ""


def test_help_shows_flags_without_a_value_type() -> None:
    result = CliRunner().invoke(app, ["verify", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "<bool>" not in result.output
    assert "--test-pod" in result.output and "--no-test-pod" in result.output


def test_data_is_never_read_as_markup_or_emoji() -> None:
    out = io.StringIO()
    con = _console()
    con.file = out
    table = Table("evidence")
    table.add_row("[ERROR] nvidia-smi [bold]failed[/] on 00000000:AB:00.0 :smile:")
    con.print(table)
    con.print("[red]log line[/] :AB:")
    text = out.getvalue()
    assert "[ERROR] nvidia-smi [bold]failed[/] on 00000000:AB:00.0 :smile:" in text
    assert "[red]log line[/] :AB:" in text


def test_piped_text_is_never_wrapped() -> None:
    out = io.StringIO()
    con = _console()
    con.file = out
    con.print("x" * 500)
    assert out.getvalue() == "x" * 500 + "\n"


def test_json_keys_are_camel_case_field_names_and_data_keys_stay() -> None:
    @dataclasses.dataclass
    class Row:
        pci_bus_id: str
        labels: dict[str, str]

    assert camel("pci_bus_id") == "pciBusId" and camel("NVIDIA_VISIBLE_DEVICES") == "NVIDIA_VISIBLE_DEVICES"
    assert camel("nvidia.com/gpu.product") == "nvidia.com/gpu.product" and camel("uuid") == "uuid"
    row = Row("00000000:AB:00.0", {"nvidia.com/mig.config_state": "success", "my_label": "x"})
    assert plain(row) == {
        "pciBusId": "00000000:AB:00.0",
        "labels": {"nvidia.com/mig.config_state": "success", "my_label": "x"},
    }
    assert records({"step_key": [{"gpu_index": 1, "env": {"CUDA_VISIBLE_DEVICES": "0"}}]}) == {
        "stepKey": [{"gpuIndex": 1, "env": {"CUDA_VISIBLE_DEVICES": "0"}}]
    }


JSON_COMMANDS = [
    ["gpus", "--preset", "h100-80gb-x8-mig-mixed"],
    ["demo", "--quiet-seconds", "0"],
    ["plan", "--gpu", "a100-40gb", "--model-memory", "3GiB", "--qps-per-instance", "60"],
    ["plan", "fleet", "--failure-rate", "5%", "--gpus", "128"],
    ["doctor", "--scenario", "friday-scale-out"],
    ["verify", "--scenario", "healthy"],
    ["remediator", "--scenario", "xid79"],
    ["device-plugin", "--list"],
    ["sim", "run", "healthy"],
    ["mig", "apply", "-c", "all-1g.10gb", "--dry-run"],
]


def _keys(data: object, data_maps: frozenset[str]) -> set[str]:
    """Every key that names a field (keys under known data maps such as labels are data)."""
    found: set[str] = set()
    if isinstance(data, dict):
        for k, v in data.items():
            found.add(k)
            if k not in data_maps:
                found |= _keys(v, data_maps)
    elif isinstance(data, list):
        for v in data:
            found |= _keys(v, data_maps)
    return found


@pytest.mark.parametrize("args", JSON_COMMANDS, ids=lambda a: " ".join(a))
def test_every_command_speaks_camel_case_json(args: list[str]) -> None:
    result = CliRunner().invoke(app, [*args, "-o", "json"])
    assert result.exit_code in (0, 1), result.output
    data = json.loads(result.stdout)
    data_maps = frozenset({"labels", "annotations", "capacity", "allocatable", "env", "objects", "apiCalls", "data"})
    snake = sorted(k for k in _keys(data, data_maps) if re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)+", k))
    assert not snake, snake


def test_yaml_has_no_aliases() -> None:
    shared = {"key": "nvidia.com/gpu", "operator": "Exists"}
    text = to_yaml({"a": [shared], "b": [shared]})
    assert "&id" not in text and "*id" not in text
    assert yaml.safe_load(text) == {"a": [shared], "b": [shared]}
    docs = to_yaml_all([{"spec": shared}, {"spec": shared}])
    assert "*id" not in docs and len(list(yaml.safe_load_all(docs))) == 2


def _record(msg: str, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise RuntimeError("socket gone\nsecond line")
        except RuntimeError:
            info = sys.exc_info()
    return logging.LogRecord("gpuchain.deviceplugin", logging.ERROR, __file__, 1, msg, None, info)


def test_text_log_line_is_one_line_even_with_a_traceback() -> None:
    line = TextLogFormatter().format(_record("ListAndWatch failed\nfor nvidia.com/gpu", exc=True))
    assert "\n" not in line
    assert "ERROR gpuchain.deviceplugin: ListAndWatch failed | for nvidia.com/gpu" in line
    assert "RuntimeError: socket gone | second line" in line


def test_json_log_line_is_one_object() -> None:
    line = JsonLogFormatter().format(_record("ListAndWatch failed", exc=True))
    assert "\n" not in line
    entry = json.loads(line)
    assert (entry["level"], entry["logger"], entry["msg"]) == ("error", "gpuchain.deviceplugin", "ListAndWatch failed")
    assert "RuntimeError: socket gone" in entry["error"] and entry["ts"].endswith("Z")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_service_log_lines_are_one_per_message(fmt: str) -> None:
    """The exporter as a pod runs it: its first log line, read from stderr, is one line (one JSON object)."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    env["COLUMNS"] = "40"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuchain", "exporter", "--port", "0", "--address", "127.0.0.1", "--log-format", fmt],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    if fmt == "json":
        entry = json.loads(line)
        assert entry["logger"] == "gpuchain.exporter" and entry["level"] == "info"
        message = entry["msg"]
    else:
        assert " INFO gpuchain.exporter: serving http://127.0.0.1:" in line
        message = line.rstrip()
    assert message.startswith("serving http://127.0.0.1:") or " serving " in message
    assert message.endswith("(simulated)"), message


def test_operator_render_yaml_has_no_aliases() -> None:
    """Operands share one tolerations list; PyYAML used to write it once as ``&id001`` and then ``*id001``."""
    result = CliRunner().invoke(app, ["operator", "render"])
    assert result.exit_code == 0, result.output
    assert "&id0" not in result.stdout and "*id0" not in result.stdout
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert len(docs) > 5 and all("kind" in d for d in docs)


@pytest.mark.parametrize("args", [*JSON_COMMANDS, ["sim", "list"], ["gpu-health", "--dry-run"]], ids=" ".join)
def test_every_listing_takes_wide(args: list[str]) -> None:
    """``-o wide`` prints the people's view (never nothing, as a data format would)."""
    table = CliRunner().invoke(app, [*args, "-o", "table"], env={"COLUMNS": "300"})
    wide = CliRunner().invoke(app, [*args, "-o", "wide"], env={"COLUMNS": "80"})
    assert wide.exit_code == table.exit_code, wide.output
    assert wide.stdout.strip() and not wide.stdout.lstrip().startswith(("{", "["))
