"""The chart's doctor role (doctorRole.create, templates/doctor-rbac.yaml) on the real API server.

Issue 24: a member of the role's group ran `kubectl gpuchain doctor` and got "daemonsets.apps is
forbidden ... at the cluster scope"; `doctor dump` failed on replicationcontrollers. The role was
only ever rendered. Here the rendered RBAC is created on the real kube-apiserver (v1.37.2), bound
to a group a service account is a member of (``system:serviceaccounts:<namespace>``), and the real
CLI runs with that account's token: every read succeeds, and a write is refused.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuchain.kube import NODE, ForbiddenError, LiveCluster
from peers.apiserver import ApiServer
from peers.test_doctor_real_dump import load_scenario_into
from peers.test_node_write_policy import _apply

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "charts"))
from test_chart import render

READER_NS = "gpu-readers"  # the doctor's users: every service account of this namespace
READER_GROUP = f"system:serviceaccounts:{READER_NS}"


def _doctor_kubeconfig(apiserver: ApiServer, path: Path) -> Path:
    apiserver.ensure_namespace("gpu-operator")
    apiserver.ensure_namespace(READER_NS)
    for doc in render({"doctorRole": {"create": True, "groups": [READER_GROUP]}}):
        if doc["metadata"]["name"] == "gpuchain-doctor":
            _apply(apiserver, doc)
    return apiserver.kubeconfig_for_token(apiserver.service_account_token(READER_NS, "alice"), path)


def _gpuchain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuchain", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_doctor_role_runs_doctor_dump_and_verify_and_writes_nothing(
    apiserver: ApiServer, live_cluster: LiveCluster, tmp_path: Path
) -> None:
    load_scenario_into(apiserver, live_cluster, "op-driver-skew-host")
    kubeconfig = str(_doctor_kubeconfig(apiserver, tmp_path / "doctor.kubeconfig"))
    doctor = _gpuchain("doctor", "--kubeconfig", kubeconfig, "-o", "json")
    assert "forbidden" not in (doctor.stdout + doctor.stderr).lower(), doctor.stderr
    assert '"driver.version-skew"' in doctor.stdout, doctor.stdout + doctor.stderr
    dump = _gpuchain("doctor", "dump", str(tmp_path / "dump"), "--kubeconfig", kubeconfig)
    assert dump.returncode == 0, dump.stdout + dump.stderr
    verify = _gpuchain("verify", "--no-test-pod", "--kubeconfig", kubeconfig, "-o", "json")
    assert "forbidden" not in (verify.stdout + verify.stderr).lower(), verify.stderr
    assert '"items"' in verify.stdout or verify.stdout.lstrip().startswith("{"), verify.stdout + verify.stderr
    reader = LiveCluster.from_kubeconfig(kubeconfig)
    try:
        node = reader.list(NODE)[0]["metadata"]["name"]
        with pytest.raises(ForbiddenError):
            reader.patch(NODE, name=node, patch={"metadata": {"labels": {"doctor-wrote": "yes"}}})
    finally:
        reader.close()
