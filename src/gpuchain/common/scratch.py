"""Scratch directories for unix sockets (simulated kubelets, demos): in $TMPDIR when it fits.

A unix socket path is limited to 107 bytes (``sun_path``), and a socket directory holds names such
as ``dp/nvidia-mig-1g.10gb.sock``. So the scratch directory goes under ``tempfile.gettempdir()``
($TMPDIR, which users and CI point at writable, private space) when the longest socket path still
fits, and under /tmp otherwise, saying why.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

SUN_PATH_MAX = 107
"""Longest unix socket path Linux accepts (108 bytes with the terminating NUL)."""
SOCKET_ROOM = 48
"""Room kept for what callers put below the scratch directory (``/dp/nvidia-mig-3g.40gb.sock``...)."""


def scratch_dir(prefix: str) -> Path:
    """A new private directory for sockets: under $TMPDIR when sockets fit there, else /tmp."""
    base = tempfile.gettempdir()
    # mkdtemp adds 8 random characters after the prefix, plus a separator
    if len(base) + 1 + len(prefix) + 8 + SOCKET_ROOM > SUN_PATH_MAX:
        log.warning("TMPDIR %s is too long for unix socket paths (at most %d bytes); using /tmp", base, SUN_PATH_MAX)
        base = "/tmp"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))
