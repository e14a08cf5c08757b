"""Every command that reads a YAML file, and the exporter's collectors CSV, refuse the fault
campaign's bad files with one line naming the file (and line), exit 2: no traceback, no hang."""

from __future__ import annotations

import codecs
import os
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from gpuchain.cli import app

YAML_COMMANDS = {
    "device-plugin": ["device-plugin", "--list", "--config", "{f}"],
    "gfd": ["gfd", "--oneshot", "--output-file", "-", "--config-file", "{f}"],
    "gpu-health": ["gpu-health", "--dry-run", "--config-file", "{f}"],
    "mig": ["mig", "config", "-f", "{f}"],
    "mig-manager": ["mig-manager", "--backend", "sim", "--once", "--node", "n", "-f", "{f}"],
    "sim": ["sim", "run", "{f}", "--no-live"],
    "doctor": ["doctor", "--scenario", "{f}"],
    "operator": ["operator", "render", "-f", "{f}"],
    "topology": ["gpus", "--topology", "{f}"],
}
CSV_COMMAND = ["exporter", "--collectors", "{f}"]
DEVICE_PLUGIN_CONFIG_COMMANDS = ("device-plugin", "gfd", "gpu-health")
"""Commands that read NVIDIA's device plugin config, whose format says an empty file is every default."""
EMPTY_CASES = ("empty", "null")

BAD_YAML = {
    "nul": (b"version: v1\nflags: {\x00}\n", ":2: contains a NUL byte"),
    "latin-1": (b"version: v1\n# caf\xe9\n", ":2: is not UTF-8 (byte 0xe9)"),
    "utf-16": ("version: v1\n".encode("utf-16"), ":1: is UTF-16 text; save it as UTF-8"),
    "deep": (b"version: " + b"[" * 5000 + b"]" * 5000 + b"\n", ":1: nested more than 64 levels deep"),
    "empty": (b"", ":1: the file is empty (or null)"),
    "null": (b"null\n", ":1: the file is empty (or null)"),
    "duplicate": (b"version: v1\nversion: v1\n", ":2: version: duplicate key (first at line 1)"),
}
BAD_CSV = {
    "nul": (b"DCGM_FI_DEV_GPU_TEMP, gauge, t\n\x00\n", ":2: contains a NUL byte"),
    "latin-1": (b"# caf\xe9\nDCGM_FI_DEV_GPU_TEMP, gauge, t\n", ":1: is not UTF-8 (byte 0xe9)"),
    "utf-16": ("DCGM_FI_DEV_GPU_TEMP, gauge, t\n".encode("utf-16"), ":1: is UTF-16 text"),
    "bom": (codecs.BOM_UTF16_BE + "x".encode("utf-16-be"), ":1: is UTF-16 text"),
}


def _invoke(args: list[str], path: Path) -> Result:
    """Run the command on a thread so a hang fails the test instead of stalling the suite."""
    out: list[Result] = []
    thread = threading.Thread(
        target=lambda: out.append(CliRunner().invoke(app, [a.format(f=path) for a in args], env={"KUBECONFIG": "/x"})),
        daemon=True,
    )
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), f"{args[0]} hung on {path.name}"
    return out[0]


def _one_line(result: Result, path: Path, expected: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert f"{path}{expected}" in lines[0]


@pytest.mark.parametrize(
    ("command", "case"),
    [
        (command, case)
        for command in sorted(YAML_COMMANDS)
        for case in sorted(BAD_YAML)
        if not (command in DEVICE_PLUGIN_CONFIG_COMMANDS and case in EMPTY_CASES)
    ],
)
def test_bad_yaml_is_one_line_exit_2(tmp_path: Path, command: str, case: str) -> None:
    data, expected = BAD_YAML[case]
    path = tmp_path / f"{case}.yaml"
    path.write_bytes(data)
    _one_line(_invoke(YAML_COMMANDS[command], path), path, expected)


@pytest.mark.parametrize("command", DEVICE_PLUGIN_CONFIG_COMMANDS)
@pytest.mark.parametrize("case", EMPTY_CASES)
def test_an_empty_device_plugin_config_runs_with_every_default(tmp_path: Path, command: str, case: str) -> None:
    """NVIDIA's plugin and GFD start on an empty or null config file (every default); so do the
    commands that read that file here, where other inputs are refused (a truncated file)."""
    path = tmp_path / f"{case}.yaml"
    path.write_bytes(BAD_YAML[case][0])
    result = _invoke(YAML_COMMANDS[command], path)
    assert result.exit_code == 0, result.output
    assert str(path) not in result.stderr


@pytest.mark.parametrize("command", [*sorted(YAML_COMMANDS), "exporter"])
def test_a_fifo_is_refused_not_waited_on(tmp_path: Path, command: str) -> None:
    path = tmp_path / "input"
    os.mkfifo(path)
    args = CSV_COMMAND if command == "exporter" else YAML_COMMANDS[command]
    _one_line(_invoke(args, path), path, ": is a FIFO (named pipe), not a regular file; give the path of a file")


@pytest.mark.parametrize("case", sorted(BAD_CSV))
def test_bad_collectors_csv_is_one_line_exit_2(tmp_path: Path, case: str) -> None:
    data, expected = BAD_CSV[case]
    path = tmp_path / "counters.csv"
    path.write_bytes(data)
    _one_line(_invoke(CSV_COMMAND, path), path, expected)


@pytest.mark.parametrize(
    "args",
    [
        ["mig-manager", "--backend", "sim", "--node", "n", "--interval", "nan"],
        ["dra-plugin", "--cluster", "memory", "--resync-seconds", "inf"],
        ["exporter", "--port", "0", "--collect-interval", "nan"],
    ],
)
def test_non_finite_seconds_are_refused(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "must be a finite number of seconds above zero" in result.stderr
