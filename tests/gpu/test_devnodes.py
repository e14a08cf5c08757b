"""Control device nodes: the three always, /dev/nvidia-modeset only where the driver created it."""

from __future__ import annotations

from pathlib import Path

from gpuchain.gpu.devnodes import control_device_nodes

ALWAYS = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]


def test_without_modeset(tmp_path: Path) -> None:
    assert control_device_nodes(tmp_path) == ALWAYS


def test_modeset_when_present_under_the_dev_root(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia-modeset").touch()
    assert control_device_nodes(str(tmp_path)) == [*ALWAYS, "/dev/nvidia-modeset"]
