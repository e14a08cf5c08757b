"""A one-shot command's process ends without freeing, object by object, what it read.

Why: a live ``gpuchain doctor`` holds a snapshot of the whole cluster until it has printed its
report; at 10,000 nodes and 75,000 pods that is some fifteen million dicts, lists and strings, and
freeing them one by one as the process ends took about half a second of a run's five
(bench.doctor.live), for memory the operating system takes back at once. mypy leaves the same way
(its "fast exit": flush the output, then ``os._exit``).

Only the console entry point ends so (`gpuchain.cli.main` calls `allow`, then `leave`): a command run
inside another process (tests, a library caller of ``run_doctor``) keeps its objects and their freeing
as before, because `hold` keeps nothing there. And it ends so only when nothing else is left to do at
exit but what `leave` does itself: the output flushed, the ``atexit`` handlers run (logging's flush
among them); with another thread still running, the process ends as usual and waits for it.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

_allowed = False
#: What the command asked to keep until the process ends (the doctor's snapshot).
_held: list[object] = []


def allow() -> None:
    """This process is the console command: what `hold` is given may be left to the OS at `leave`."""
    global _allowed
    _allowed = True


def hold(obj: object) -> None:
    """Keep ``obj`` until the process ends, where `allow` was called; elsewhere keep nothing, so
    that ``obj`` is freed when its other holders let it go, as before."""
    if _allowed:
        _held.append(obj)


def leave(code: int) -> NoReturn:
    """End the process with exit status ``code``: at once where something is held (`hold`) and no
    other thread runs, after flushing the output and running the ``atexit`` handlers; else as
    ``sys.exit`` does."""
    if not _held or threading.active_count() > 1:
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        sys.exit(code)  # a closed pipe: the usual exit reports it as it always has
    atexit._run_exitfuncs()  # what the interpreter runs at exit; all there is besides freeing objects
    os._exit(code)
