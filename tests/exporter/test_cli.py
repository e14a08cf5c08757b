"""`gpuchain exporter` as a process: serves until SIGTERM, then exits cleanly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("extra", "env", "expected"),
    [
        ([], {}, ['gpuchain_gpu_up{gpu="1",', "gpuchain_gpus_expected{"]),
        (["--per-process"], {}, ['gpuchain_gpu_unattributed_processes{gpu="1",']),
        # dcgm-exporter's switch (pkg/cmd/app.go@d5e5f51), as a ClusterPolicy's dcgmExporter.env sets it
        ([], {"KUBERNETES_VIRTUAL_GPUS": "true"}, ['gpuchain_gpu_unattributed_processes{gpu="1",']),
    ],
    ids=["default", "per-process", "dcgm-exporter-env"],
)
def test_exporter_process_serves_and_stops_on_sigterm(
    extra: list[str], env: dict[str, str], expected: list[str]
) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuchain",
            "exporter",
            "--preset",
            "l4-x2",
            "--address",
            "127.0.0.1",
            "--port",
            str(port),
            "--hostname",
            "l4-node",
            "--collect-interval",
            "0.2",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
    )
    try:
        deadline = time.monotonic() + 20
        body = ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                    body = resp.read().decode()
                if "DCGM_FI_DEV_GPU_UTIL{" in body:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.1)
        assert 'DCGM_FI_DEV_GPU_TEMP{gpu="1",' in body
        assert 'Hostname="l4-node"' in body
        assert all(line in body for line in expected), body
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
