"""What every long-running node agent does around its start-up: stop signals first, a settled heap after.

- ``stop_on_signals``: SIGTERM and SIGINT are the agent's from its first moment. The kubelet
  sends SIGTERM whenever it likes, start-up included; a default handler would end the process
  there, leaving sockets, feature files or paused operands behind. Installed before any start-up
  work, a signal only asks for the stop, and the agent stops (and cleans up) once start-up is over.
- ``release_follower``: an agent that shares no process with gpu-health lets go of NVML while
  gpu-health resets a GPU on the node (``gpu.nvmlrelease``), through the node's release board.
- ``first_served``: the node agent (``gpuchain.entry``) runs no cyclic garbage collection from its
  exec until its first role serves. What it imports on the way to the kubelet (the device plugin's
  modules, gRPC, protobuf, the Kubernetes client for its Node) allocates enough to set off some
  hundred collections, each walking a heap that only grows (~25 ms of CPU at load 3, on a path of
  ~300 ms), and they find next to nothing: importing makes few cycles. Reference counting frees as
  ever; the first collection after ``first_served`` takes what cycles that short while left.
- ``cap_malloc_arenas``: the node agent (``gpuchain.entry``) holds the C library's allocator to two
  arenas before its first thread starts. glibc gives each thread that allocates an arena of its
  own, up to eight per core: grpc's event engine, timer and lifeguard threads and the agent's
  worker threads each kept one, partly filled, for the life of the process (the device plugin
  alone: ten threads; every role: sixteen, on a 2-core machine).
  With two, the main thread keeps the main arena and the others share one; they allocate little
  and briefly, Python's under the GIL. Measured on ``bench.agents.node``'s busy processes
  (2026-12-06, two runs each way, alternated): -0.2 MiB the device plugin alone, -0.3 MiB every
  role; in one ``bench.agents.node --baseline`` run, -0.3 and -0.1 MiB (docs/performance.md).
- ``settled``: start-up is over, so what it allocated (imported modules, config, inventory,
  serialized device lists) lives as long as the process. ``gc.freeze`` moves it out of the
  collector's sight: a full collection then walks only what was allocated since, instead of
  tens of thousands of start-up objects (about 30 ms on a loaded node, a pause on the path from
  an XID to the kubelet). Frozen objects are still freed by reference counting when dropped (a
  reload's old config); only a reference cycle among them would stay.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuchain.gpu.backend import GpuBackend
    from gpuchain.gpu.nvmlrelease import Follower

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_on_signals(stop: Callable[[], None]) -> None:
    """From now on SIGTERM and SIGINT call ``stop`` and nothing else.

    Inside a running event loop ``stop`` runs on the loop (``add_signal_handler``). Without one
    (an agent whose main thread is not asyncio) it runs on a thread of its own, so it may take a
    lock the interrupted main thread holds (``threading.Event.set``) without deadlocking.
    """
    if threading.current_thread() is not threading.main_thread():
        # Python delivers signals to the main thread only and refuses handlers from any other: an
        # agent run on another thread (embedded, or a test bounding it with a thread) leaves the
        # signals to whoever owns the main thread.
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    for sig in STOP_SIGNALS:
        if loop is not None:
            loop.add_signal_handler(sig, stop)
        else:
            signal.signal(sig, lambda signum, frame: threading.Thread(target=stop, name="stop signal").start())


def stop_early() -> threading.Event:
    """SIGTERM and SIGINT from now on, before any event loop runs: set the event returned. An agent
    calls it first thing, and ``build.serve_alone`` (or the node agent) takes the signals over on its
    loop, stopping at once if one came while starting."""
    early = threading.Event()
    stop_on_signals(early.set)
    return early


M_ARENA_MAX = -8
"""``mallopt``'s parameter for the most arenas glibc's allocator makes (``<malloc.h>``)."""
MALLOC_ARENAS = 2
"""The main thread's arena and one that every other thread shares (see the module docstring)."""


def cap_malloc_arenas() -> None:
    """Hold the C library's allocator to ``MALLOC_ARENAS`` arenas (see the module docstring). Called
    before any thread starts: an arena once made stays. A C library without glibc's ``mallopt``
    (musl) has no per-thread arenas to cap, and is left as it is."""
    import ctypes

    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # the C library the interpreter runs on
    if mallopt is not None:
        mallopt(M_ARENA_MAX, MALLOC_ARENAS)


def first_served() -> None:
    """The first role serves (or failed): cyclic collection, off since exec, is on again (see the module
    docstring)."""
    gc.enable()


def settled() -> None:
    """Start-up is over: collect its garbage once and freeze what survives (see the module docstring)."""
    gc.collect()
    gc.freeze()


def release_follower(directory: str | None, *, backend: GpuBackend, component: str) -> Follower | None:
    """The follower of the board in ``directory`` for ``backend``, or None when there is no board
    (off, or the directory is missing: logged once, a warning on real GPUs)."""
    from gpuchain.gpu.nvmlrelease import Follower, open_board

    board = open_board(directory, quiet=backend.name != "nvml")
    return Follower(board, backend=backend, component=component) if board is not None else None
