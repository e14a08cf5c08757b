"""Ready files: the on-node handshake between links (``<dir>/<link>-ready``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuchain.common.files import atomic_write

DEFAULT_DIR = Path("/run/gpuchain/validations")
#: The links in chain order; each has one ready file.
LINKS = ("driver", "toolkit", "cuda", "plugin")


class ReadyFiles:
    """The validations directory of one node."""

    def __init__(self, directory: str | Path = DEFAULT_DIR) -> None:
        self.dir = Path(directory)

    def path(self, link: str) -> Path:
        """Where ``link``'s ready file lives; ValueError for an unknown link."""
        if link not in LINKS:
            raise ValueError(f"unknown link {link!r}: one of {', '.join(LINKS)}")
        return self.dir / f"{link}-ready"

    def write(self, link: str, details: dict[str, Any]) -> Path:
        """Mark ``link`` ready (atomically: a waiter never reads a half-written file)."""
        return atomic_write(self.path(link), data=json.dumps({"link": link, "time": time.time(), **details}))

    def is_ready(self, link: str) -> bool:
        """Has ``link`` been validated on this node?"""
        return self.path(link).exists()

    def clear(self, from_link: str = LINKS[0]) -> None:
        """Remove ``from_link``'s ready file and those of every link above it.

        A link that fails validation takes the links built on it down too (a broken driver
        invalidates toolkit, cuda and plugin), so nothing above starts on stale evidence.
        """
        self.path(from_link)  # ValueError for an unknown link
        for name in LINKS[LINKS.index(from_link) :]:
            self.path(name).unlink(missing_ok=True)

    def wait(
        self,
        link: str,
        *,
        timeout: float | None = None,
        interval: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> bool:
        """Block until ``link`` is ready; False if ``timeout`` seconds pass first (None: forever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_ready(link):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            sleep(interval)
        return True
