"""`gpuchain.common.fastexit`: the console command leaves what it holds to the OS, and ends as before otherwise."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuchain.common import fastexit
from gpuchain.doctor import Snapshot, run_doctor
from gpuchain.sim import build, load_scenario

#: A process that holds an object whose freeing writes a file, prints without a newline (buffered until
#: flushed), registers an atexit handler that writes another, then leaves with status 3.
PROGRAM = """
import atexit, sys, threading, time
from pathlib import Path
from gpuchain.common import fastexit

where = Path(sys.argv[1])
allowed, holding, threaded = (flag == "1" for flag in sys.argv[2:5])
if allowed:
    fastexit.allow()

class Big:
    def __del__(self):
        (where / "freed").write_text("yes")

big = Big()
atexit.register(lambda: (where / "atexit").write_text("yes"))
if holding:
    fastexit.hold(big)
del big
if threaded:
    threading.Thread(target=time.sleep, args=(0.2,)).start()
sys.stdout.write("report")
fastexit.leave(3)
"""


def _run(tmp_path: Path, *, allowed: bool, holding: bool, threaded: bool = False) -> subprocess.CompletedProcess[str]:
    flags = ["1" if f else "0" for f in (allowed, holding, threaded)]
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROGRAM), str(tmp_path), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_command_leaves_what_it_holds_to_the_os_after_its_output_and_atexit(tmp_path: Path) -> None:
    done = _run(tmp_path, allowed=True, holding=True)
    assert (done.returncode, done.stdout, done.stderr) == (3, "report", "")
    assert (tmp_path / "atexit").read_text() == "yes"
    assert not (tmp_path / "freed").exists()  # never freed: the process ended first


@pytest.mark.parametrize(
    ("allowed", "threaded"),
    [(False, False), (True, True)],
    ids=["not the console command", "another thread runs"],
)
def test_elsewhere_the_process_ends_as_sys_exit_ends_it(tmp_path: Path, *, allowed: bool, threaded: bool) -> None:
    done = _run(tmp_path, allowed=allowed, holding=True, threaded=threaded)
    assert (done.returncode, done.stdout) == (3, "report")
    assert (tmp_path / "atexit").read_text() == "yes"
    assert (tmp_path / "freed").read_text() == "yes"


def test_nothing_held_ends_as_sys_exit() -> None:
    with pytest.raises(SystemExit) as leaving:
        fastexit.leave(2)
    assert leaving.value.code == 2


def test_run_doctor_hands_its_snapshot_to_keep_and_hold_keeps_nothing_in_a_library_caller() -> None:
    cluster = build(load_scenario("healthy")).cluster
    kept: list[object] = []
    report = run_doctor(cluster, keep=kept.append)
    assert len(kept) == 1 and isinstance(kept[0], Snapshot)
    assert len(kept[0].nodes) == report.cluster_nodes
    fastexit.hold(kept[0])  # this process never called allow(): nothing is kept for its exit
    assert not fastexit._held
