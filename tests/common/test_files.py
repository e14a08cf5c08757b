"""atomic_write: the reader sees the old file or the new one, and no temporary file is left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpuchain.common import files
from gpuchain.common.files import atomic_write, remove


def test_writes_text_and_bytes_creating_the_directory(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "spec.json"
    assert atomic_write(target, data="héllo\n") == target
    assert target.read_text(encoding="utf-8") == "héllo\n"
    atomic_write(target, data=b"\x00raw")
    assert target.read_bytes() == b"\x00raw"
    assert os.listdir(target.parent) == ["spec.json"]


def test_mode_is_applied_not_the_temporary_files_0600(tmp_path: Path) -> None:
    target = tmp_path / "ready"
    atomic_write(target, data="{}")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    atomic_write(target, data="{}", mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "checkpoint.json"
    atomic_write(target, data="old")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space left"):
        atomic_write(target, data="new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["checkpoint.json"]


def test_remove_is_idempotent(tmp_path: Path) -> None:
    target = tmp_path / "x"
    atomic_write(target, data="1")
    assert remove(target) is True
    assert remove(target) is False


def test_the_file_and_then_its_directory_are_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the directory's sync a power loss can lose the rename (the DRA checkpoint relies on it)."""
    synced: list[str] = []
    real = os.fsync

    def record(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", record)
    target = tmp_path / "state.json"
    atomic_write(target, data="{}\n")
    assert len(synced) == 2
    assert Path(synced[0]).parent == tmp_path and synced[1] == str(tmp_path)
