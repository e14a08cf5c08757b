"""``gpuchain operator run`` as it runs in its pod, for the tests on the real API server.

One way to start it, whoever's credentials it runs with: the admin's (steady writes) or the
operator's own ServiceAccount token (its chart role)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def operator_run(kubeconfig: Path, workdir: Path, namespace: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """The operator in its own process for ``namespace``, kopf logging in from ``kubeconfig``, resyncing every second;
    stopped with SIGTERM (killed after 20 s). Yields it and its stderr file (under ``workdir``)."""
    stderr = workdir / "operator.log"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(workdir)}
    args = [
        sys.executable,
        "-m",
        "gpuchain",
        "operator",
        "run",
        "-n",
        namespace,
        "--min-interval",
        "0.2",
        "--resync",
        "1",
    ]
    with stderr.open("wb") as err:
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        yield proc, stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
