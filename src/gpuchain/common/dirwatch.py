"""Wake on changes of a directory's entries (Linux inotify), so an agent need not poll it.

The kubelet announces a restart only through its socket directory: the directory is wiped and a
new ``kubelet.sock`` appears. NVIDIA's plugin watches it with fsnotify; polling it every 100 ms
instead costs an agent CPU on every GPU node while nothing happens. ``DirectoryChanges`` wraps
inotify (through libc, no dependency) on the event loop: ``wait(timeout)`` returns when an entry
was created, deleted, moved or changed, or after ``timeout`` seconds. Where inotify is not there
(another OS, a libc without it, the instance limit reached) or the directory does not exist yet,
``watching`` is False and the caller polls with a short timeout, as before.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import os
from pathlib import Path

from gpuchain.common.supervise import wait_event

log = logging.getLogger(__name__)

_IN_ATTRIB = 0x004
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_MASK = _IN_ATTRIB | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF


class DirectoryChanges:
    """Changes of ``path``'s entries, as an awaitable; ``close()`` when done (or use ``with``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._changed = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._fd = -1
        self._libc: ctypes.CDLL | None = None
        self._refused = 0
        """The errno the last refused watch gave (0: the last one was added)."""
        try:
            # The C library the interpreter runs on (dlopen(NULL)), found without ctypes.util: its
            # find_library runs `ldconfig -p` in a child process, on the loop answering the kubelet.
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError) as exc:
            log.info("no inotify (%s): polling %s", exc, path)
            return
        if fd < 0:
            log.info("no inotify (%s): polling %s", os.strerror(ctypes.get_errno()), path)
            return
        self._libc, self._fd = libc, fd
        self._loop.add_reader(fd, self._readable)

    @property
    def watching(self) -> bool:
        """True when a change of the directory wakes ``wait`` (inotify is there and so is the directory)."""
        if self._libc is None:
            return False
        # Adding the watch again is idempotent while the directory lives; after it was removed and
        # created again it watches the new one.
        if self._libc.inotify_add_watch(self._fd, os.fsencode(self.path), _MASK) >= 0:
            self._refused = 0
            return True
        code = ctypes.get_errno()
        if code not in (errno.ENOENT, errno.ENOTDIR) and code != self._refused:
            # Once per cause: ENOSPC (fs.inotify.max_user_watches) lasts, and the caller asks again
            # at every poll.
            log.warning("cannot watch %s (%s): polling it", self.path, os.strerror(code))
        self._refused = code
        return False

    async def wait(self, timeout: float) -> None:
        """Until an entry changed since the last ``wait``, or ``timeout`` seconds.

        ``wait_event``, not ``wait_for``: on Python 3.11 ``wait_for`` can swallow a cancellation
        that arrives as the change does (CPython gh-86296), and the watching task would not stop."""
        await wait_event(self._changed, timeout)
        self._changed.clear()

    def _readable(self) -> None:
        try:
            while os.read(self._fd, 65536):  # the events themselves do not matter: the caller looks
                pass
        except BlockingIOError:
            pass
        self._changed.set()

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
            self._libc = None

    def __enter__(self) -> DirectoryChanges:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
