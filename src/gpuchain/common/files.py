"""Atomic file writes: a reader (NFD's worker, the container runtime, a restarted plugin, a waiting
validator) sees the old file or the new one, never a half-written one.

The data goes to a temporary file beside the target (a rename is atomic only within one file
system), is synced to disk, given its final permissions, and renamed over the target. On any
failure the temporary file is removed and the target is left as it was.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

DEFAULT_MODE = 0o644
"""Readable by every reader (a temporary file is created 0600), writable by the owner."""


def atomic_write(path: str | Path, *, data: str | bytes, mode: int = DEFAULT_MODE) -> Path:
    """Replace ``path`` with ``data`` (text is written as UTF-8) in one step; returns the path.

    The parent directory is created when missing. ``mode`` is the file's permission bits. The file
    and then its directory are synced, so after a power loss the path holds the old or the new
    content, never an empty file nor a rename that was lost.
    """
    import tempfile  # here: with shutil, bz2 and lzma, a device plugin that writes no file never loads it

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    directory = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return target


def remove(path: str | Path) -> bool:
    """Delete ``path``; False when it was already gone (so callers stay idempotent)."""
    try:
        Path(path).unlink()
    except FileNotFoundError:
        return False
    return True


def output_problem(path: str | Path, *, directory: bool = False) -> str | None:
    """Why ``path`` cannot take what a command is about to write there, or None when it can.

    ``directory``: the command writes a directory of files (created when missing); otherwise one
    file, replaced atomically. Asked before any work, so a wrong path is one line naming it and
    the fix instead of an ``[Errno 17]`` after a long read, or a service that starts and then
    fails every pass (a directory given for a file cannot be replaced by a rename).
    """
    target = Path(path)
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except NotADirectoryError:
        return "a part of this path is a file, not a directory; give a path under an existing directory"
    except OSError as exc:
        return f"cannot be checked: {exc.strerror or exc}"
    if directory:
        if mode is not None and not stat.S_ISDIR(mode):
            return "exists and is not a directory; give a new directory (it is created) or an existing one"
        return None
    if mode is not None and stat.S_ISDIR(mode):
        return f"is a directory; give the path of a file in it, e.g. {target / 'gfd'}"
    if mode is not None and not stat.S_ISREG(mode):
        return "exists and is not a regular file; give the path of a file"
    parent = target.parent
    if parent.exists() and not parent.is_dir():
        return f"{parent} is not a directory; give a path under an existing directory"
    return None
