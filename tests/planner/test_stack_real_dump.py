"""`gpuchain plan stack` on the real API server: `--from-cluster` reading it live, and `--from-dump`
reading what the real `kubectl cluster-info dump` wrote from it, must read the same inputs.

The simulated stacks are recreated on the tests/peers control plane (kube-apiserver v1.37.2) with
the helpers of tests/peers/test_doctor_real_dump.py; `--from-dump` runs as a separate process with
no API access to fall back on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from peers.apiserver import ApiServer
from peers.test_doctor_real_dump import KUBECTL, load_scenario_into, real_dump
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.kube import LiveCluster


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl on PATH (Debian's kubectl or the cloud SDK's)")
@pytest.mark.parametrize(
    ("scenario", "driver", "route"),
    [
        ("healthy-eks", "cloud-image", "device-plugin"),
        ("healthy-gpu-operator", "self-managed", "operator"),
        ("mig-56", "self-managed", "operator"),
    ],
)
def test_live_and_real_dump_read_the_same_inputs(
    apiserver: ApiServer, live_cluster: LiveCluster, tmp_path: Path, scenario: str, driver: str, route: str
) -> None:
    load_scenario_into(apiserver, live_cluster, scenario)
    result = CliRunner().invoke(
        app, ["plan", "stack", "--from-cluster", "--kubeconfig", str(apiserver.kubeconfig), "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    live: dict[str, Any] = json.loads(result.stdout)
    real_dump(apiserver, tmp_path / "dump")
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "no-such-kubeconfig")}
    offline = subprocess.run(
        [sys.executable, "-m", "gpuchain", "plan", "stack", "--from-dump", str(tmp_path / "dump"), "-o", "json"],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert offline.returncode == 0, offline.stderr
    dump: dict[str, Any] = json.loads(offline.stdout)
    assert (live["request"]["driver"], live["recommendation"]) == (driver, route)
    assert live["readFrom"].startswith("context peer (server https://127.0.0.1:")
    for key in ("request", "recommendation", "reason", "crossover"):
        assert dump[key] == live[key], key
    assert [(i["flag"], i["source"]) for i in dump["inputs"]] == [(i["flag"], i["source"]) for i in live["inputs"]]
