"""Control device nodes: each one only where the driver created it under the dev root, as NVIDIA's
plugin (internal/plugin/server.go apiDeviceSpecs, v0.18.0: all four optional) lists them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuchain.gpu.devnodes import CONTROL_DEVICES, control_device_nodes


def _make(root: Path, *paths: str) -> None:
    (root / "dev").mkdir(exist_ok=True)
    for p in paths:
        (root / p.lstrip("/")).touch()


def test_none_without_a_driver(tmp_path: Path) -> None:
    assert control_device_nodes(tmp_path) == []


def test_all_four_where_the_driver_made_them(tmp_path: Path) -> None:
    _make(tmp_path, *CONTROL_DEVICES)
    assert control_device_nodes(str(tmp_path)) == [
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
    ]  # fmt: skip


@pytest.mark.parametrize("missing", CONTROL_DEVICES)
def test_one_not_made_yet_is_left_out(tmp_path: Path, missing: str) -> None:
    """/dev/nvidia-uvm appears only once nvidia-modprobe loaded its module: a device spec naming
    it before then would make the runtime refuse the container."""
    _make(tmp_path, *(p for p in CONTROL_DEVICES if p != missing))
    assert control_device_nodes(tmp_path) == [p for p in CONTROL_DEVICES if p != missing]
