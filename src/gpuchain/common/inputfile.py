"""The one way gpuchain reads a file a user (or a ConfigMap) gave it: bounded, regular, UTF-8 text.

Every input (device plugin and GFD config, MIG layouts, topologies, scenarios, ClusterPolicy
files, the exporter's collectors CSV) comes through ``read_input_text``, so each refuses the same
bad files the same way, as one line (``file:line: field: reason; fix``) and never a traceback or
a hang:

- only regular files (after following symlinks, which is how a ConfigMap is mounted): a FIFO, a
  socket or a device is refused at once instead of blocking forever on the read;
- at most ``max_bytes`` (a config is kilobytes; a mistaken ``--config /dev/zero`` or a log file
  must not be read into memory);
- UTF-8 (a UTF-8 byte-order mark is dropped); UTF-16 and other encodings are named, with the line
  of the first bad byte;
- no NUL byte (no text format gpuchain reads has one; it means a binary or a corrupted file).
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from pathlib import Path


class ConfigFileError(ValueError):
    """A file that cannot be used. ``str()`` is one line: `source:line: field: reason`."""

    def __init__(self, source: str, *, line: int | None, field: str, reason: str, others: tuple[str, ...] = ()) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.reason = reason
        #: Every further problem, each one line in the same form, for a command to list after the first.
        self.others = others
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {field}: {reason}" if field else f"{where}: {reason}")


_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)
MAX_BYTES = 4 * 1024 * 1024
"""The largest input read: far above any config (a 64-GPU topology is ~20 KiB)."""


def read_input_text(path: str | Path, max_bytes: int = MAX_BYTES) -> str:
    """The text of ``path``; raises ConfigFileError (one line naming the file and the fix)."""
    return decode_input(read_input_bytes(path, max_bytes), source=str(path), max_bytes=max_bytes)


def read_input_bytes(path: str | Path, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of ``path`` by the same rules as ``read_input_text`` save the text checks.

    For inputs that are not strict UTF-8 text by nature (a container log in a cluster dump keeps
    whatever bytes the program wrote), so they are still refused when they are a FIFO, a device or
    too large, and never block or fill memory."""
    source = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConfigFileError(source, line=None, field="", reason=f"cannot read file: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _kind(st.st_mode)
            raise ConfigFileError(
                source, line=None, field="", reason=f"is {kind}, not a regular file; give the path of a file"
            )
        return _read(fd, max_bytes, source)
    finally:
        os.close(fd)


def decode_input(data: bytes, *, source: str, max_bytes: int = MAX_BYTES) -> str:
    """Check and decode bytes already read (a ConfigMap value, a resource file) by the same rules."""
    if len(data) > max_bytes:
        raise ConfigFileError(
            source, line=None, field="", reason=f"is larger than {max_bytes // 1024} KiB; is this the right file?"
        )
    for bom, name in _WIDE_BOMS:
        if data.startswith(bom):
            raise ConfigFileError(
                source, line=1, field="", reason=f"is {name} text; save it as UTF-8 (e.g. iconv -f {name} -t UTF-8)"
            )
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    nul = data.find(b"\0")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if 0 <= nul < exc.start:
            raise _nul(source, data, nul) from None
        line = data.count(b"\n", 0, exc.start) + 1
        byte = data[exc.start]
        raise ConfigFileError(
            source, line=line, field="", reason=f"is not UTF-8 (byte 0x{byte:02x}); save it as UTF-8 text"
        ) from None
    if nul >= 0:
        raise _nul(source, data, nul)
    return text


def _nul(source: str, data: bytes, at: int) -> ConfigFileError:
    line = data.count(b"\n", 0, at) + 1
    return ConfigFileError(
        source, line=line, field="", reason="contains a NUL byte (a binary or corrupted file); give a text file"
    )


def _read(fd: int, max_bytes: int, source: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        try:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
        except OSError as exc:
            if exc.errno == errno.EISDIR:
                raise ConfigFileError(
                    source, line=None, field="", reason="is a directory; give the path of a file"
                ) from None
            raise ConfigFileError(
                source, line=None, field="", reason=f"cannot read file: {exc.strerror or exc}"
            ) from None
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            raise ConfigFileError(
                source, line=None, field="", reason=f"is larger than {max_bytes // 1024} KiB; is this the right file?"
            )


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a plain file"
