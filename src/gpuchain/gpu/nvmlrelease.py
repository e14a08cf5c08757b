"""The node-local NVML release board: every gpuchain agent lets go of NVML while a GPU is reset.

The driver refuses to reset a GPU while any process on the node holds NVML ("In use by another
client"), and gpuchain runs several agents per GPU node that keep it open for their life (device
plugin, exporter, DRA plugin, feature discovery, MIG manager). They share no process and may run
in different containers, but they share the node's file system: a directory (``DEFAULT_DIR``, a
hostPath in the chart) is the board.

- The repair loop (``gpu-health``) posts ``request.json``: an id, the GPUs to reset, the reason,
  when it was asked and an expiry (``until``). A request left behind by a crashed ``gpu-health``
  lapses by itself at ``until``; a finished reset clears it.
- Every agent that holds NVML registers a holder: ``holder.<component>.<token>.lock``, on which it
  keeps an exclusive ``flock`` for its life, and ``holder.<component>.<token>.json`` with its
  state (holding or released, and the request id it answers). A lock the kernel lets anyone else
  take belongs to a process that is gone (killed, OOM, its container restarted): the files are
  removed by whoever sees it. ``flock`` works across containers on one host path, and needs no
  PID (each container has its own PID namespace, so a PID alone would not name a process).
  The state lives beside the lock, not in it: it is replaced atomically (rename), which would
  drop a lock held on the replaced file.
- ``Follower`` (in each agent): on a current request ``backend.release()`` and marks its holder
  released for that id; once the request is cleared or lapsed, ``backend.reacquire()`` (retried
  with backoff) and marks it holding again. It wakes on changes of the directory (inotify, else a
  slow poll) and on the request's expiry, so an idle agent costs nothing.
- ``ReleaseBoard.letting_go`` (in ``gpu-health``): posts the request, waits (bounded) until every
  live holder answers it released, yields who did not let go, and clears the request on exit.

The decisions (is a request current, whom does the reset still wait for) are the pure functions
``is_current``, ``wanted_state`` and ``still_holding``; the rest is file I/O at the edge.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import fcntl
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuchain.common.dirwatch import DirectoryChanges
from gpuchain.common.files import DEFAULT_MODE, atomic_write, remove
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import GpuError

log = logging.getLogger(__name__)

DEFAULT_DIR = Path("/run/gpuchain/nvml")
"""Where the chart mounts the board (a hostPath shared by gpuchain's pods on the node)."""
ENV_VAR = "GPUCHAIN_NVML_RELEASE_DIR"
REQUEST_FILE = "request.json"
HOLDER_PREFIX = "holder."
DEFAULT_WAIT = 30.0
"""Seconds ``letting_go`` waits for every holder to let go before it resets anyway."""
DEFAULT_TTL = 300.0
"""Seconds a request stays current: the wait, the reset with its retries, and room to spare. A
request a crashed ``gpu-health`` left behind lapses after this and every agent takes NVML back."""
IDLE_WAKE = 300.0
"""Seconds a watching follower sleeps when nothing changes (a safety net: a change wakes it)."""
POLL = 2.0
"""Seconds between looks of a follower that cannot watch the directory (no inotify)."""


class HolderState(enum.StrEnum):
    HOLDING = "holding"
    RELEASED = "released"


class BoardError(ValueError):
    """A board file that cannot be read; the message names the file and the field."""


@dataclass(frozen=True, kw_only=True)
class Request:
    """A reset waiting for the node's agents to let go of NVML (``request.json``)."""

    id: str
    gpus: tuple[str, ...]
    reason: str
    requested_at: float
    until: float
    by: str = ""
    """Who asked (component and pod), for a person reading the file on the node."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "id": self.id,
                "gpus": list(self.gpus),
                "reason": self.reason,
                "requestedAt": self.requested_at,
                "until": self.until,
                "by": self.by,
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str, source: str = REQUEST_FILE) -> Request:
        data = _object(text, source)
        try:
            return cls(
                id=str(data["id"]),
                gpus=tuple(str(g) for g in data.get("gpus") or ()),
                reason=str(data.get("reason", "")),
                requested_at=float(data.get("requestedAt", 0.0)),
                until=float(data["until"]),
                by=str(data.get("by", "")),
            )
        except KeyError as exc:
            raise BoardError(f"{source}: field {exc.args[0]!r} is missing; gpu-health writes it") from None
        except (TypeError, ValueError) as exc:
            raise BoardError(f"{source}: {exc}; 'requestedAt' and 'until' are seconds since the epoch") from None


@dataclass(frozen=True, kw_only=True)
class Holder:
    """One agent process that holds (or has let go of) NVML on this node."""

    name: str
    """The file stem after ``holder.``: ``<component>.<token>``, unique per registration."""
    component: str
    pid: int = 0
    pod: str = ""
    state: HolderState = HolderState.HOLDING
    answers: str | None = None
    """The id of the request it let go for (None while holding)."""
    at: float = 0.0

    def describe(self) -> str:
        """``device-plugin (pod gpuchain-device-plugin-x7k2p, pid 1)``: enough to find it on the node."""
        where = ", ".join(
            p for p in (f"pod {self.pod}" if self.pod else "", f"pid {self.pid}" if self.pid else "") if p
        )
        return f"{self.component} ({where})" if where else self.component

    def to_json(self) -> str:
        return json.dumps(
            {
                "component": self.component,
                "pid": self.pid,
                "pod": self.pod,
                "state": self.state.value,
                "answers": self.answers,
                "at": self.at,
            }
        )

    @classmethod
    def from_json(cls, name: str, *, text: str, source: str) -> Holder:
        data = _object(text, source)
        try:
            return cls(
                name=name,
                component=str(data.get("component") or name.split(".")[0]),
                pid=int(data.get("pid") or 0),
                pod=str(data.get("pod") or ""),
                state=HolderState(data.get("state", HolderState.HOLDING.value)),
                answers=None if data.get("answers") is None else str(data["answers"]),
                at=float(data.get("at") or 0.0),
            )
        except (TypeError, ValueError) as exc:
            raise BoardError(f"{source}: {exc}; 'state' is holding or released") from None


def _object(text: str, source: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BoardError(f"{source}: line {exc.lineno}: {exc.msg}; the file is JSON written by gpuchain") from None
    if not isinstance(data, dict):
        raise BoardError(f"{source}: a JSON object is expected, not {type(data).__name__}")
    return data


# ---- the decisions -------------------------------------------------------------------------------


def is_current(request: Request | None, now: float) -> bool:
    """Whether agents must let go for ``request`` at ``now``: it exists and has not lapsed."""
    return request is not None and now < request.until


def wanted_state(request: Request | None, now: float) -> HolderState:
    """What an agent should be at ``now``: released while a request is current, else holding."""
    return HolderState.RELEASED if is_current(request, now) else HolderState.HOLDING


def still_holding(holders: Sequence[Holder], *, request_id: str, exclude: Collection[str] = ()) -> tuple[Holder, ...]:
    """The holders a reset for ``request_id`` still waits for: every one not marked released for
    that very request (released for an older one does not count: it may have taken NVML back since),
    leaving out ``exclude`` (holder names, e.g. the asking process's own)."""
    return tuple(
        h
        for h in holders
        if h.name not in exclude and not (h.state is HolderState.RELEASED and h.answers == request_id)
    )


# ---- the files -----------------------------------------------------------------------------------


class HolderFile:
    """This process's registration on the board: the locked file and its state beside it.

    The lock file is created under a temporary name, locked, then renamed into place, so nobody
    ever sees it unlocked while this process lives (a reaper would take it for a dead one's).
    """

    def __init__(self, directory: Path, *, component: str, state: HolderState, clock: Callable[[], float]) -> None:
        self.directory = directory
        self.component = component
        # 12 random hex digits, as uuid4's first 48 bits are (uuid, with platform and libuuid, stays unloaded)
        self.name = f"{component}.{os.urandom(6).hex()}"
        self.clock = clock
        self.lock_path = directory / f"{HOLDER_PREFIX}{self.name}.lock"
        self.state_path = directory / f"{HOLDER_PREFIX}{self.name}.json"
        import tempfile  # here: it brings shutil, bz2 and lzma, for an agent that follows a board only

        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".lock.", suffix=".tmp")
        try:
            # Readable by all (mkstemp makes 0600): gpu-health tells a live holder from a dead one
            # by trying its lock, and it may run as another user than this agent.
            os.fchmod(fd, DEFAULT_MODE)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(tmp, self.lock_path)
        except BaseException:
            os.close(fd)
            remove(tmp)
            raise
        self._fd = fd
        self._lock = threading.Lock()
        """``mark`` runs on a worker thread (``asyncio.to_thread``) that a cancelled follower does not
        wait for: it must not write the state again after ``close`` removed it."""
        self.holder = Holder(name=self.name, component=component, pid=os.getpid(), pod=_pod_name())
        self.mark(state)

    def mark(self, state: HolderState, answers: str | None = None) -> None:
        """Publish this process's state (atomically: readers see the old state or the new one)."""
        with self._lock:
            if self._fd < 0:
                return
            self.holder = Holder(
                name=self.name,
                component=self.component,
                pid=self.holder.pid,
                pod=self.holder.pod,
                state=state,
                answers=answers,
                at=self.clock(),
            )
            atomic_write(self.state_path, data=self.holder.to_json())

    @property
    def state(self) -> HolderState:
        return self.holder.state

    def close(self) -> None:
        """Leave the board: the state first, then the lock (a state without a lock reads as gone)."""
        with self._lock:
            if self._fd < 0:
                return
            try:
                remove(self.state_path)
                remove(self.lock_path)
            finally:  # the lock goes with the descriptor, whatever the removals did
                os.close(self._fd)
                self._fd = -1


def _pod_name() -> str:
    """The pod's name (a container's host name is its pod's), so a person can find the holder."""
    return os.environ.get("HOSTNAME") or socket.gethostname()


@dataclass(frozen=True, kw_only=True)
class Release:
    """What ``letting_go`` saw: the request, how long it waited, who let go and who did not."""

    request: Request
    waited: float
    released: tuple[Holder, ...] = ()
    holding: tuple[Holder, ...] = ()
    """The holders that did not let go within the wait: the reset is likely refused because of them."""

    @property
    def complete(self) -> bool:
        return not self.holding

    def describe(self) -> str:
        """One line for an Event, the loop annotation and the log."""
        if self.holding:
            names = ", ".join(h.describe() for h in self.holding)
            return f"did not let go of NVML within {self.waited:.0f} s: {names}"
        if self.released:
            return "every gpuchain agent on the node let go of NVML: " + ", ".join(h.component for h in self.released)
        return "no gpuchain agent on the node holds NVML"


@dataclass
class ReleaseBoard:
    """The board in ``directory`` (see the module docstring)."""

    directory: Path
    clock: Callable[[], float] = time.time
    _reaped: set[str] = field(default_factory=set, repr=False)

    @property
    def request_path(self) -> Path:
        return self.directory / REQUEST_FILE

    def request(self) -> Request | None:
        """The posted request, or None. A file that cannot be read counts as none (agents keep
        NVML; the reset then names who did not let go), and is logged."""
        try:
            text = self.request_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            return Request.from_json(text, str(self.request_path))
        except BoardError as exc:
            log.warning("%s; ignoring it", exc)
            return None

    def post(self, request: Request) -> None:
        atomic_write(self.request_path, data=request.to_json())

    def clear(self, request_id: str) -> bool:
        """Remove the request if it is still ``request_id``'s (another may have replaced it)."""
        current = self.request()
        if current is None or current.id != request_id:
            return False
        return remove(self.request_path)

    def register(self, component: str, state: HolderState = HolderState.HOLDING) -> HolderFile:
        """Join the board as a holder for the life of the returned file (``close`` to leave)."""
        return HolderFile(self.directory, component=component, state=state, clock=self.clock)

    def holders(self) -> tuple[Holder, ...]:
        """Every live holder, by name. The files of a process that is gone (its lock can be taken)
        are removed on the way."""
        found: list[Holder] = []
        try:
            entries = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return ()
        names = {
            e[len(HOLDER_PREFIX) : -len(".lock")]
            for e in entries
            if e.startswith(HOLDER_PREFIX) and e.endswith(".lock")
        }
        for name in sorted(names):
            holder = self._live(name)
            if holder is not None:
                found.append(holder)
        for entry in entries:  # a state whose lock is gone: its process left (or was reaped) mid-way
            stem = entry[len(HOLDER_PREFIX) : -len(".json")]
            if entry.startswith(HOLDER_PREFIX) and entry.endswith(".json") and stem not in names:
                self._remove_holder(stem)
        return tuple(found)

    def _remove_holder(self, name: str) -> None:
        """A gone holder's files: its state, its lock, and a state it was writing when it died
        (``atomic_write``'s temporary file beside the target)."""
        partial = f".{HOLDER_PREFIX}{name}.json."
        for entry in os.listdir(self.directory):
            if entry.startswith(partial) and entry.endswith(".tmp"):
                remove(self.directory / entry)
        remove(self.directory / f"{HOLDER_PREFIX}{name}.json")
        remove(self.directory / f"{HOLDER_PREFIX}{name}.lock")

    def _live(self, name: str) -> Holder | None:
        lock_path = self.directory / f"{HOLDER_PREFIX}{name}.lock"
        state_path = self.directory / f"{HOLDER_PREFIX}{name}.json"
        try:
            fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except PermissionError:  # another user's holder that cannot be checked: it may hold NVML
            log.warning("cannot open %s to see whether its agent lives; counting it as holding NVML", lock_path)
            return Holder(name=name, component=name.split(".")[0])
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass  # its process lives
            else:
                self._remove_holder(name)
                if name not in self._reaped:
                    self._reaped.add(name)
                    log.info("NVML holder %s is gone (its process ended); removed its files", name)
                return None
        finally:
            os.close(fd)
        try:
            text = state_path.read_text(encoding="utf-8")
        except FileNotFoundError:  # registering right now: it holds NVML until it says otherwise
            return Holder(name=name, component=name.split(".")[0])
        try:
            return Holder.from_json(name, text=text, source=str(state_path))
        except BoardError as exc:
            log.warning("%s; counting it as holding NVML", exc)
            return Holder(name=name, component=name.split(".")[0])

    @contextlib.contextmanager
    def letting_go(
        self,
        gpus: Sequence[str],
        *,
        reason: str,
        wait: float = DEFAULT_WAIT,
        ttl: float = DEFAULT_TTL,
        by: str = "",
        exclude: Collection[str] = (),
        poll: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> Iterator[Release]:
        """Post a request for ``gpus``, wait up to ``wait`` seconds until every live holder (but
        ``exclude``) answers it released, and yield what was seen; the request is cleared on exit,
        whatever happens, so the agents take NVML back. Blocking: run it off the event loop."""
        import uuid  # here: a request is posted by what resets a GPU, never by an agent that follows

        now = self.clock()
        request = Request(
            id=uuid.uuid4().hex, gpus=tuple(gpus), reason=reason, requested_at=now, until=now + max(ttl, wait), by=by
        )
        self.post(request)
        log.info("asked gpuchain's agents to let go of NVML (%s, request %s)", reason, request.id)
        try:
            started = monotonic()
            while True:
                holders = self.holders()
                waiting = still_holding(holders, request_id=request.id, exclude=exclude)
                waited = monotonic() - started
                if not waiting or waited >= wait:
                    break
                sleep(min(poll, max(0.0, wait - waited)))
            released = tuple(h for h in holders if h.name not in exclude and h not in waiting)
            seen = Release(request=request, waited=waited, released=released, holding=waiting)
            (log.warning if waiting else log.info)("%s (request %s)", seen.describe(), request.id)
            yield seen
        finally:
            self.clear(request.id)


def open_board(directory: str | Path | None, quiet: bool = False) -> ReleaseBoard | None:
    """The board in ``directory`` (None: the chart's, ``DEFAULT_DIR``), or None (logged once, here) when
    it is turned off ('') or does not exist: the agent then runs without following it, as before the
    board existed. ``quiet`` logs that at INFO rather than WARNING (simulated GPUs: no driver refuses
    a reset)."""
    if directory is None:
        directory = DEFAULT_DIR
    if not directory:
        return None
    directory = Path(directory)
    if not directory.is_dir():
        log.log(
            logging.INFO if quiet else logging.WARNING,
            "NVML release board %s does not exist: this agent will not let go of NVML for GPU resets "
            "(mount the chart's hostPath there, or pass --nvml-release-dir '' to turn this off)",
            directory,
        )
        return None
    return ReleaseBoard(directory)


# ---- the follower (in every agent that holds NVML) -----------------------------------------------


class Follower:
    """Lets go of ``backend``'s NVML while a request is current and takes it back afterwards.

    ``run`` is the long-lived task (supervise it: ``spawn`` on the agent's event loop, where
    ``agent.build`` starts it for every agent). Its holder lives as long as ``run``: a restarted ``run`` registers
    again, and starts from the backend's state (a backend still released is taken back, or marked
    released for the current request).
    """

    def __init__(
        self,
        board: ReleaseBoard,
        *,
        backend: GpuBackend,
        component: str,
        retry_first: float = 1.0,
        retry_max: float = 30.0,
        idle: float = IDLE_WAKE,
        poll: float = POLL,
    ) -> None:
        self.board = board
        self.backend = backend
        self.component = component
        self.retry_first = retry_first
        self.retry_max = retry_max
        self.idle = idle
        self.poll = poll
        self.holder: HolderFile | None = None
        self._retry = retry_first

    async def run(self) -> None:
        """Until cancelled. Raises what it cannot handle (the supervisor logs it and restarts it)."""
        state = HolderState.RELEASED if self.backend.released else HolderState.HOLDING
        holder = await asyncio.to_thread(self.board.register, self.component, state)
        self.holder = holder
        log.info("following the NVML release board %s as %s", self.board.directory, holder.name)
        try:
            with DirectoryChanges(self.board.directory) as changes:
                # Watch before the first look: a request posted between that look and the watch
                # (gpu-health posts as soon as it sees the holder) would wake nobody.
                watching = changes.watching
                while True:
                    timeout = await self.step(holder)
                    if watching and changes.watching:
                        await changes.wait(timeout)
                    else:
                        await asyncio.sleep(min(timeout, self.poll))
        finally:
            self.holder = None
            holder.close()

    async def step(self, holder: HolderFile) -> float:
        """Bring the backend and the holder's state in line with the board; the seconds until the
        next look is due without a change (a request's expiry, a retry)."""
        now = self.board.clock()
        request = await asyncio.to_thread(self.board.request)
        if wanted_state(request, now) is HolderState.RELEASED:
            assert request is not None
            if not self.backend.released:
                log.info(
                    "letting go of NVML: %s (request %s, GPUs %s)",
                    request.reason or "a GPU reset",
                    request.id,
                    ", ".join(request.gpus) or "-",
                )
                await asyncio.to_thread(self.backend.release)
            if holder.state is not HolderState.RELEASED or holder.holder.answers != request.id:
                await asyncio.to_thread(holder.mark, HolderState.RELEASED, request.id)
            self._retry = self.retry_first
            return min(self.idle, max(0.0, request.until - now) + 0.05)
        if self.backend.released:
            try:
                await asyncio.to_thread(self.backend.reacquire)
            except GpuError as exc:
                wait, self._retry = self._retry, min(self._retry * 2, self.retry_max)
                log.warning("cannot take NVML back (%s); retrying in %.1f s", exc, wait)
                return wait
            log.info("took NVML back")
        if holder.state is not HolderState.HOLDING:
            await asyncio.to_thread(holder.mark, HolderState.HOLDING)
        self._retry = self.retry_first
        return self.idle
