"""Ending the processes a bench started: politely first, so agents clean up as they would on a node."""

from __future__ import annotations

import subprocess
from typing import Any


def stop(*procs: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """SIGTERM every process still running, wait up to ``grace`` seconds for each, kill what is left."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
