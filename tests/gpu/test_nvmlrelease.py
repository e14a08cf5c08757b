"""The NVML release board: its decisions, its files, and holders in real OS processes.

Why it exists: the driver refuses ``nvidia-smi -r`` while any process holds NVML ("In use by
another client", quoted in DataDog/datadog-agent#56118), and NVIDIA/NVSentinel stops its own
agents before a reset; gpuchain's agents let go through this board instead.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuchain.gpu import nvmlrelease
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import DriverNotLoadedError, ReleasedError
from gpuchain.gpu.model import DriverInfo, HealthEvent, Inventory, Telemetry
from gpuchain.gpu.nvmlrelease import (
    REQUEST_FILE,
    BoardError,
    Follower,
    Holder,
    HolderState,
    ReleaseBoard,
    Request,
    is_current,
    open_board,
    still_holding,
    wanted_state,
)


class DoubleBackend(GpuBackend):
    """Holds a pretend NVML: counts releases and reacquires; ``refuse`` reacquires fail that often."""

    name = "double"

    def __init__(self, refuse: int = 0) -> None:
        self._released = False
        self.releases = 0
        self.reacquires = 0
        self.refuse = refuse

    def inventory(self) -> Inventory:
        if self._released:
            raise ReleasedError("released")
        return Inventory(DriverInfo("570.86.15", "12.8"), ())

    def telemetry(self, gpu_uuid: str) -> Telemetry:
        raise ReleasedError("released")

    async def events(self) -> AsyncIterator[HealthEvent]:
        await asyncio.Event().wait()
        yield  # type: ignore[misc]

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        if not self._released:
            self.releases += 1
        self._released = True

    def reacquire(self) -> None:
        if self.refuse:
            self.refuse -= 1
            raise DriverNotLoadedError("the driver is not ready yet")
        if self._released:
            self.reacquires += 1
        self._released = False


# ---- the decisions -------------------------------------------------------------------------------

states = st.sampled_from(list(HolderState))
ids = st.sampled_from(["r1", "r2", "r3"])
holder_lists = st.lists(
    st.builds(
        Holder,
        name=st.text("abcdef", min_size=1, max_size=4),
        component=st.sampled_from(["device-plugin", "exporter", "gfd"]),
        state=states,
        answers=st.none() | ids,
    ),
    max_size=8,
    unique_by=lambda h: h.name,
)


@given(holder_lists, ids, st.sets(st.text("abcdef", min_size=1, max_size=4), max_size=3))
def test_a_reset_waits_for_exactly_the_holders_not_released_for_its_request(
    holders: list[Holder], rid: str, exclude: set[str]
) -> None:
    waiting = still_holding(holders, request_id=rid, exclude=exclude)
    for h in holders:
        answered = h.state is HolderState.RELEASED and h.answers == rid
        assert (h in waiting) == (not answered and h.name not in exclude)


@given(ids, ids)
def test_released_for_an_older_request_still_counts_as_holding(old: str, new: str) -> None:
    h = Holder(name="dp.1", component="device-plugin", state=HolderState.RELEASED, answers=old)
    assert (still_holding([h], request_id=new) == ()) == (old == new)


@given(st.floats(0, 1e9), st.floats(0, 1e4), st.floats(-1e4, 1e4))
def test_a_request_is_current_until_it_lapses(at: float, ttl: float, offset: float) -> None:
    req = Request(id="r", gpus=("GPU-1",), reason="reset", requested_at=at, until=at + ttl)
    now = at + offset
    assert is_current(req, now) == (now < at + ttl)
    assert wanted_state(req, now) is (HolderState.RELEASED if now < at + ttl else HolderState.HOLDING)
    assert not is_current(None, now) and wanted_state(None, now) is HolderState.HOLDING


def test_request_round_trips_and_a_bad_one_names_file_and_field(tmp_path: Path) -> None:
    req = Request(
        id="r1", gpus=("GPU-a", "GPU-b"), reason="reset GPU 3", requested_at=10.0, until=310.0, by="gpu-health (pod x)"
    )
    assert Request.from_json(req.to_json()) == req
    with pytest.raises(BoardError, match=r"request.json: field 'until' is missing"):
        Request.from_json('{"id": "r"}')
    with pytest.raises(BoardError, match=r"request.json: line 1"):
        Request.from_json("{not json")
    board = ReleaseBoard(tmp_path)
    (tmp_path / REQUEST_FILE).write_text("[]")
    assert board.request() is None  # unreadable: no request (agents keep NVML), logged


# ---- the files -----------------------------------------------------------------------------------


def test_holders_register_mark_and_leave(tmp_path: Path) -> None:
    board = ReleaseBoard(tmp_path)
    dp = board.register("device-plugin")
    ex = board.register("exporter")
    try:
        seen = {h.component: h for h in board.holders()}
        assert set(seen) == {"device-plugin", "exporter"}
        assert seen["device-plugin"].pid == os.getpid() and seen["device-plugin"].state is HolderState.HOLDING
        dp.mark(HolderState.RELEASED, "r1")
        seen = {h.component: h for h in board.holders()}
        assert seen["device-plugin"].state is HolderState.RELEASED and seen["device-plugin"].answers == "r1"
        assert [h.component for h in still_holding(board.holders(), request_id="r1")] == ["exporter"]
    finally:
        ex.close()
    assert [h.component for h in board.holders()] == ["device-plugin"]
    dp.close()
    assert board.holders() == () and os.listdir(tmp_path) == []


def test_a_holder_s_files_are_readable_by_a_gpu_health_of_another_user(tmp_path: Path) -> None:
    """gpu-health tells live holders from dead ones by trying their locks; the files an agent
    writes must be readable by all (mkstemp would make the lock 0600)."""
    board = ReleaseBoard(tmp_path)
    holder = board.register("exporter")
    try:
        for path in (holder.lock_path, holder.state_path):
            assert path.stat().st_mode & 0o777 == 0o644, path
    finally:
        holder.close()


def test_a_state_file_without_its_lock_is_a_process_that_left(tmp_path: Path) -> None:
    (tmp_path / "holder.exporter.abc.json").write_text(json.dumps({"component": "exporter", "pid": 7}))
    (tmp_path / ".holder.exporter.abc.json.x1y2.tmp").write_text("{")  # killed while writing its state
    assert ReleaseBoard(tmp_path).holders() == ()
    assert os.listdir(tmp_path) == []


_HOLD = """
import sys, time
from pathlib import Path
from gpuchain.gpu.nvmlrelease import ReleaseBoard
h = ReleaseBoard(Path(sys.argv[1])).register(sys.argv[2])
print(h.name, flush=True)
time.sleep(60)
"""


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def _hold(tmp_path: Path, component: str, started: list[subprocess.Popen[str]]) -> str:
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path), component], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    started.append(p)
    assert p.stdout is not None
    return p.stdout.readline().strip()


def test_two_processes_hold_and_a_killed_one_is_seen_as_gone(
    tmp_path: Path, processes: list[subprocess.Popen[str]], caplog: pytest.LogCaptureFixture
) -> None:
    dp = _hold(tmp_path, "device-plugin", processes)
    ex = _hold(tmp_path, "exporter", processes)
    board = ReleaseBoard(tmp_path)
    live = {h.name: h for h in board.holders()}
    assert set(live) == {dp, ex}
    assert live[dp].pid == processes[0].pid and live[ex].pid == processes[1].pid
    (tmp_path / f".holder.{ex}.json.k1ll.tmp").write_text("{")  # as if killed in the middle of a write
    processes[1].send_signal(signal.SIGKILL)  # no clean-up runs: only the kernel drops its lock
    processes[1].wait(10)
    with caplog.at_level(logging.INFO, logger="gpuchain.gpu.nvmlrelease"):
        assert [h.name for h in board.holders()] == [dp]
    assert f"NVML holder {ex} is gone" in caplog.text
    assert sorted(os.listdir(tmp_path)) == [f"holder.{dp}.json", f"holder.{dp}.lock"]


def test_letting_go_names_who_did_not_and_clears_the_request(tmp_path: Path) -> None:
    board = ReleaseBoard(tmp_path)
    stuck = board.register("exporter")
    try:
        with board.letting_go(["GPU-1"], reason="reset GPU 1", wait=0.3, poll=0.05) as seen:
            assert board.request() == seen.request
            assert [h.component for h in seen.holding] == ["exporter"]
            assert 0.3 <= seen.waited < 5.0
            assert seen.describe().startswith("did not let go of NVML within 0 s: exporter (pod ")
        assert board.request() is None
        with pytest.raises(RuntimeError), board.letting_go(["GPU-1"], reason="reset", wait=0.0):
            raise RuntimeError("the reset blew up")
        assert board.request() is None  # cleared whatever happened
    finally:
        stuck.close()


def test_a_request_lapses_by_itself(tmp_path: Path) -> None:
    now = [1000.0]
    board = ReleaseBoard(tmp_path, clock=lambda: now[0])
    board.post(Request(id="r", gpus=("GPU-1",), reason="reset", requested_at=1000.0, until=1010.0))
    assert is_current(board.request(), now[0])
    now[0] = 1010.0
    assert not is_current(board.request(), now[0])


def test_open_board_runs_without_a_missing_directory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert open_board(tmp_path / "missing") is None
    assert "does not exist" in caplog.text
    assert open_board("") is None
    board = open_board(tmp_path)
    assert board is not None and board.directory == tmp_path


def test_open_board_without_a_directory_opens_the_charts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """None (the node agent's absent --nvml-release-dir) is the chart's hostPath, resolved here."""
    monkeypatch.setattr(nvmlrelease, "DEFAULT_DIR", tmp_path)
    board = open_board(None)
    assert board is not None and board.directory == tmp_path


# ---- the follower --------------------------------------------------------------------------------


async def _until(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_follower_lets_go_for_the_reset_and_takes_nvml_back(tmp_path: Path) -> None:
    board = ReleaseBoard(tmp_path)
    backend = DoubleBackend()
    follower = Follower(board, backend=backend, component="device-plugin", poll=0.05)
    task = asyncio.create_task(follower.run())
    try:
        await _until(lambda: len(board.holders()) == 1)

        def reset() -> tuple[bool, list[str], bool]:
            with board.letting_go(["GPU-1"], reason="reset GPU 1", wait=10.0) as seen:
                return backend.released, [h.component for h in seen.released], seen.complete

        released_during, who, complete = await asyncio.wait_for(asyncio.to_thread(reset), 15.0)
        assert released_during and who == ["device-plugin"] and complete
        await _until(lambda: not backend.released)
        await _until(lambda: board.holders()[0].state is HolderState.HOLDING)
        assert (backend.releases, backend.reacquires) == (1, 1)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert os.listdir(tmp_path) == []  # it left the board


async def test_a_request_posted_right_after_the_first_look_still_wakes_the_follower(tmp_path: Path) -> None:
    """gpu-health posts as soon as it sees a new holder; one posted after the follower's first look
    at the board must wake it through the watch (not the 300 s idle wake-up). The first look is
    made slow here, as load makes it, so the request lands between it and anything after it."""
    board = ReleaseBoard(tmp_path)
    backend = DoubleBackend()
    follower = Follower(board, backend=backend, component="exporter", poll=60.0, idle=60.0)
    first_look = asyncio.Event()
    step = follower.step

    async def slow_step(holder: Any) -> float:
        timeout = await step(holder)
        first_look.set()
        await asyncio.sleep(0.1)
        return timeout

    follower.step = slow_step  # type: ignore[method-assign]
    task = asyncio.create_task(follower.run())
    try:
        await asyncio.wait_for(first_look.wait(), 10.0)
        now = time.time()
        board.post(Request(id="r1", gpus=("GPU-1",), reason="reset GPU 1", requested_at=now, until=now + 300))
        await _until(lambda: backend.released, timeout=5.0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_follower_retries_a_refused_reacquire_and_follows_a_lapse(tmp_path: Path) -> None:
    now = [1000.0]
    board = ReleaseBoard(tmp_path, clock=lambda: now[0])
    backend = DoubleBackend(refuse=2)
    follower = Follower(board, backend=backend, component="exporter", retry_first=0.01, retry_max=0.02, poll=0.05)
    holder = board.register("exporter")
    try:
        board.post(Request(id="r1", gpus=("GPU-1",), reason="reset", requested_at=1000.0, until=1005.0))
        assert await follower.step(holder) == pytest.approx(5.05)  # the next look: when it lapses
        assert backend.released and holder.holder.answers == "r1"
        now[0] = 1005.0  # gpu-health crashed: the request lapses, nobody clears it
        assert await follower.step(holder) == 0.01
        assert await follower.step(holder) == 0.02
        assert backend.released and holder.state is HolderState.RELEASED
        await follower.step(holder)
        assert not backend.released and holder.state is HolderState.HOLDING and backend.reacquires == 1
    finally:
        holder.close()


async def test_a_follower_restarted_while_released_answers_the_new_request(tmp_path: Path) -> None:
    board = ReleaseBoard(tmp_path)
    backend = DoubleBackend()
    backend.release()
    board.post(Request(id="r2", gpus=(), reason="reset", requested_at=time.time(), until=time.time() + 60))
    holder = board.register("gfd", HolderState.RELEASED)
    try:
        await Follower(board, backend=backend, component="gfd").step(holder)
        assert still_holding(board.holders(), request_id="r2") == ()
        assert backend.releases == 1
    finally:
        holder.close()
