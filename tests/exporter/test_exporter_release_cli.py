"""`gpuchain exporter --nvml-release-dir` as a process: it joins the node's NVML release board,
lets go when gpu-health asks (its scrapes then carry no GPU sample and
``gpuchain_exporter_nvml_released 1``), takes NVML back, and a killed exporter is seen as gone; a
missing board directory is logged once and the exporter serves as before."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuchain.gpu.nvmlrelease import ReleaseBoard


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def exporter() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def _start(started: list[subprocess.Popen[str]], board: Path, port: int) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "gpuchain", "exporter", "--preset", "l4-x2", "--address", "127.0.0.1"]
    cmd += ["--port", str(port), "--collect-interval", "0.2", "--nvml-release-dir", str(board)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started.append(proc)
    return proc


def _scrape(port: int, ready: Callable[[str], bool], timeout: float = 20.0) -> str:
    """The first /metrics body ``ready`` accepts."""
    deadline = time.monotonic() + timeout
    body = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                body = resp.read().decode()
            if ready(body):
                return body
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"no such scrape in time; the last one:\n{body[-2000:]}")


def _metrics(port: int) -> str:
    return _scrape(port, lambda body: "DCGM_FI_DEV_GPU_TEMP{" in body)


def test_the_exporter_process_follows_the_board_and_a_killed_one_is_gone(
    tmp_path: Path, exporter: list[subprocess.Popen[str]]
) -> None:
    port = _free_port()
    proc = _start(exporter, tmp_path, port)
    board = ReleaseBoard(tmp_path)
    deadline = time.monotonic() + 20
    # Joined once its state is written beside its lock (a holder registering right now has none yet).
    while not any(h.pid for h in board.holders()):
        assert time.monotonic() < deadline and proc.poll() is None, "the exporter did not join the board"
        time.sleep(0.05)
    holder = board.holders()[0]
    assert (holder.component, holder.pid) == ("exporter", proc.pid)
    with board.letting_go(["GPU-x"], reason="reset GPU 1", wait=10.0) as seen:
        assert seen.complete and [h.component for h in seen.released] == ["exporter"]
        during = _scrape(port, lambda body: "gpuchain_exporter_nvml_released 1.0" in body)
        assert "DCGM_FI_DEV_GPU_TEMP{" not in during  # no old reading passed off as current
    after = _scrape(port, lambda body: "gpuchain_exporter_nvml_released 0.0" in body)
    assert "DCGM_FI_DEV_GPU_TEMP{" in after  # NVML taken back, GPUs sampled again
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert board.holders() == ()
    assert list(tmp_path.iterdir()) == []


def test_a_missing_board_is_logged_once_and_the_exporter_serves(
    tmp_path: Path, exporter: list[subprocess.Popen[str]]
) -> None:
    port = _free_port()
    proc = _start(exporter, tmp_path / "missing", port)
    _metrics(port)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    assert proc.stderr is not None
    log = proc.stderr.read()
    assert log.count("does not exist") == 1, log
