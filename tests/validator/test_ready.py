"""Ready files go through the shared atomic write: complete JSON, readable, no temporary left."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from gpuchain.validator.ready import ReadyFiles


def test_ready_file_is_complete_readable_and_alone(tmp_path: Path) -> None:
    files = ReadyFiles(tmp_path / "validations")
    path = files.write("cuda", {"vectorAdd": "ok"})
    data = json.loads(path.read_text())
    assert data["link"] == "cuda" and data["vectorAdd"] == "ok"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # a waiter in another container can read it
    assert os.listdir(path.parent) == ["cuda-ready"]
