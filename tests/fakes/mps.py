"""Stand-ins for NVIDIA's MPS control program and nvidia-smi, on PATH, recording what they are told.

``nvidia-cuda-mps-control -d`` starts a background process (the "daemon"), writing its pid to
``<pipe>/daemon.pid``, the line ``-d`` to ``<pipe>/record`` and its ``CUDA_VISIBLE_DEVICES`` to
``<pipe>/visible``; without arguments it reads one command from stdin, records it and answers only
while that process lives, as the real program does ("Cannot find MPS control daemon process"
otherwise); ``quit`` kills it. A ``<pipe>/refuse`` file makes ``-d`` fail; while a ``<pipe>/hold``
file exists, every call waits (a start or a command that takes long, as the real program's may). nvidia-smi appends its
arguments to ``$SMI_RECORD``. ``install`` (the ``mps_stand_ins`` fixture) puts both on PATH and returns an MPS root;
``stop_daemons`` ends what a test left running; ``record``, ``daemon_pid`` and ``daemon_running`` read them.
"""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

CONTROL = r"""#!/usr/bin/env python3
import os, signal, subprocess, sys, time
pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
record = os.path.join(pipe, "record")
pidfile = os.path.join(pipe, "daemon.pid")
def log(line):
    with open(record, "a") as f:
        f.write(line + "\n")
def alive():
    try:
        pid = int(open(pidfile).read())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None
while os.path.exists(os.path.join(pipe, "hold")):
    time.sleep(0.05)
if sys.argv[1:] == ["-d"]:
    if os.path.exists(os.path.join(pipe, "refuse")):
        sys.exit("refusing to start (the test asked)")
    if not os.path.isdir(os.environ["CUDA_MPS_LOG_DIRECTORY"]):
        sys.exit("no log directory")
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # a daemon: it keeps none of the caller's pipes open
    open(pidfile, "w").write(str(proc.pid))
    open(os.path.join(pipe, "visible"), "w").write(os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    log("-d")
    sys.exit(0)
command = sys.stdin.read().strip()
pid = alive()
if pid is None:
    print("Cannot find MPS control daemon process")
    sys.exit(1)
log(command)
if command == "quit":
    os.kill(pid, signal.SIGKILL)
print("50")
"""

SMI = r"""#!/bin/sh
echo "$*" >> "$SMI_RECORD"
"""


def record(root: Path, name: str) -> list[str]:
    """What the daemon of ``name`` (a GPU UUID, a resource) under the MPS root was told, a line each."""
    path = root / name / "pipe" / "record"
    return path.read_text().splitlines() if path.exists() else []


def daemon_pid(root: Path, name: str) -> int:
    """The pid of the last daemon started for ``name``, as its PID namespace numbers it."""
    return int((root / name / "pipe" / "daemon.pid").read_text())


def daemon_running(pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether the daemon runs (a killed daemon nobody reaped yet is a zombie: not running); ``proc``
    is the /proc of the PID namespace it was started in (a real node's own, peers/node.py)."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_daemons(root: Path, proc: Path = Path("/proc"), kill: Callable[[int], None] | None = None) -> None:
    """Kill every stand-in daemon started under ``root`` that still runs: a plugin may leave its daemons
    running on purpose (a restarted plugin takes them over), and a test must not leave them behind. A pid
    is killed only while its command line is still the stand-in's, so a pid the system reused is spared.
    ``proc`` and ``kill``: the /proc of the PID namespace the daemons were started in, and how to kill
    one there by its pid in it (a real node's, peers/node.py); this process's own by default."""
    for pidfile in root.rglob("daemon.pid"):
        try:
            pid = int(pidfile.read_text())
            if b"time.sleep(600)" in (proc / str(pid) / "cmdline").read_bytes():
                (kill or _kill)(pid)
        except (OSError, ValueError):
            continue


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bin directory on PATH with the two stand-ins (``tmp_path/bin``, nvidia-smi recording to
    ``tmp_path/smi``); returns the MPS root to use."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("nvidia-cuda-mps-control", CONTROL), ("nvidia-smi", SMI)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SMI_RECORD", str(tmp_path / "smi"))
    return tmp_path / "mps"
