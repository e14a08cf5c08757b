"""`gpuchain doctor --from-dump` on what the real kubectl writes from the real API server.

A simulated cluster of each stack is recreated on the tests/peers control plane (kube-apiserver
v1.37.2; NVIDIA's own CRDs from tests/compat/operator/fixtures, see SOURCES.md there), then the
real `kubectl cluster-info dump --all-namespaces --output-directory=DIR` writes the dump and
`gpuchain doctor --from-dump DIR` (a separate process, no API access) must name the same root
causes on the same nodes as the doctor reading the live server. There is no kubelet behind this
server, so kubectl writes no container log (each pod's logs.txt says why) and the live doctor
reads none either: both see the same evidence.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuchain.kube import CLUSTER_POLICY, CRD, Kind, KubeError, LiveCluster
from gpuchain.operator.migrate import NVIDIA_CLUSTER_POLICY, NVIDIA_DRIVER
from peers.apiserver import ApiServer
from peers.test_kube_apiserver import _until, copy_into

KUBECTL = shutil.which("kubectl")
NVIDIA_CRDS = Path(__file__).resolve().parents[1] / "compat" / "operator" / "fixtures"


def install_nvidia_crds(live: LiveCluster) -> None:
    """NVIDIA's ClusterPolicy and NVIDIADriver CRDs as the GPU Operator's chart installs them."""
    for name in ("nvidia.com_clusterpolicies.yaml", "nvidia.com_nvidiadrivers.yaml"):
        crd = yaml.safe_load((NVIDIA_CRDS / name).read_text())
        live.create(crd)

        def established(crd_name: str = crd["metadata"]["name"]) -> bool:
            conditions = (live.get(CRD, name=crd_name).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        _until(established, f"{name} is established")


def _lists(live: LiveCluster, kind: Kind) -> bool:
    """A CRD just established can still answer 'storage is (re)initializing' for a moment."""
    try:
        live.list(kind)
    except KubeError:
        return False
    return True


def load_scenario_into(apiserver: ApiServer, live: LiveCluster, scenario: str) -> None:
    from gpuchain.sim import build, load_scenario

    sim = build(load_scenario(scenario))
    install_nvidia_crds(live)
    copy_into(apiserver, live, sim.cluster)
    for kind in (CLUSTER_POLICY, NVIDIA_CLUSTER_POLICY, NVIDIA_DRIVER):
        _until(lambda kind=kind: _lists(live, kind), f"the server lists {kind.plural} of {kind.api_version}")


def real_dump(apiserver: ApiServer, out_dir: Path) -> None:
    assert KUBECTL is not None
    result = subprocess.run(
        [KUBECTL, "--kubeconfig", str(apiserver.kubeconfig), "cluster-info", "dump", "--all-namespaces",
         f"--output-directory={out_dir}"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def doctor_from_dump(directory: Path) -> dict[str, Any]:
    env = {**os.environ, "KUBECONFIG": str(directory / "no-such-kubeconfig")}  # no API access to fall back on
    result = subprocess.run(
        [sys.executable, "-m", "gpuchain", "doctor", "--from-dump", str(directory), "-o", "json"],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def roots(findings: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    by_id: dict[str, set[str]] = {}
    for f in findings:
        if f["root"]:
            by_id.setdefault(f["id"], set()).update(f.get("nodes") or ([f["node"]] if f.get("node") else []))
    return sorted((k, sorted(v)) for k, v in by_id.items())


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl on PATH (Debian's kubectl or the cloud SDK's)")
@pytest.mark.parametrize(
    ("scenario", "stack", "root"),
    [
        ("op-kernel-mismatch", "gpu-operator", "driver.kernel-mismatch"),
        ("friday-scale-out", "gpuchain", "driver.kernel-mismatch"),
        ("dp-gpu-fell-off-bus", "nvidia-device-plugin", "gpu.lost"),
        ("eks-gpu-fell-off-bus", "eks", "gpu.lost"),
        ("aks-plugin-no-nvml", "aks", "device-plugin.not-registered"),
        # Issue 24: all the dump shows of an operator that never ran is its Pending pod and the Event.
        ("op-operator-pending", "gpu-operator", "operator.not-running"),
    ],
)
def test_doctor_from_the_real_kubectl_dump_names_what_the_live_doctor_names(
    apiserver: ApiServer, live_cluster: LiveCluster, tmp_path: Path, scenario: str, stack: str, root: str
) -> None:
    from gpuchain.doctor import run_doctor

    load_scenario_into(apiserver, live_cluster, scenario)
    live = run_doctor(live_cluster).to_dict()
    real_dump(apiserver, tmp_path / "dump")
    offline = doctor_from_dump(tmp_path / "dump")
    assert live["stack"]["id"] == offline["stack"]["id"] == stack
    assert root in live["rootCauses"]
    assert offline["rootCauses"] == live["rootCauses"]
    assert roots(offline["findings"]) == roots(live["findings"])


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl on PATH (Debian's kubectl or the cloud SDK's)")
def test_a_plain_kubectl_dump_of_a_policy_without_the_driver_is_not_judged_from_defaults(
    apiserver: ApiServer, live_cluster: LiveCluster, tmp_path: Path
) -> None:
    """Issue 24: kubectl's dump has no ClusterPolicy. Its policy turns the driver container off (the
    nodes bring their own), so there is no nvidia-driver-daemonset; the doctor used to read the
    policy's defaults and call it missing on every node. It now says what the dump lacks, marks
    nothing broken that it cannot judge, and names the same root cause as the live doctor."""
    from gpuchain.doctor import run_doctor

    load_scenario_into(apiserver, live_cluster, "op-driver-skew-host")
    live = run_doctor(live_cluster).to_dict()
    real_dump(apiserver, tmp_path / "dump")
    assert not (tmp_path / "dump" / "clusterpolicies.json").exists()
    offline = doctor_from_dump(tmp_path / "dump")
    assert live["rootCauses"] == offline["rootCauses"] == ["driver.version-skew"]
    assert "operand.not-deployed" not in {f["id"] for f in offline["findings"]}
    assert any("no ClusterPolicy" in line for line in offline["notJudged"]) and not live["notJudged"]
    skew = next(f for f in offline["findings"] if f["id"] == "driver.version-skew")
    assert skew["action"]["changes"]["fact"] == "host-driver:550.54.15"
    assert {n["links"]["driver"]["state"] for n in offline["nodes"]} == {"ok"}


def test_a_dump_gpuchain_writes_from_the_real_server_lacks_nothing(
    apiserver: ApiServer, live_cluster: LiveCluster, tmp_path: Path
) -> None:
    """`gpuchain doctor dump` writes the ClusterPolicy and the stack's ConfigMaps with kubectl's layout,
    so reading it back judges everything the live doctor judges."""
    load_scenario_into(apiserver, live_cluster, "op-driver-skew-host")
    written = subprocess.run(
        [sys.executable, "-m", "gpuchain", "doctor", "dump", str(tmp_path / "dump"),
         "--kubeconfig", str(apiserver.kubeconfig)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    offline = doctor_from_dump(tmp_path / "dump")
    assert offline["notJudged"] == [] and offline["rootCauses"] == ["driver.version-skew"]


def test_a_cluster_with_no_gpu_node_exits_3_and_names_the_context_and_server(apiserver: ApiServer) -> None:
    """Issue 24: pointed at a cluster without GPU nodes (the wrong context), the doctor said "every
    link on every GPU node is healthy" and exited 0."""
    command = [sys.executable, "-m", "gpuchain", "doctor", "--kubeconfig", str(apiserver.kubeconfig)]
    table = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert table.returncode == 3, table.stderr
    server = yaml.safe_load(apiserver.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert f"no GPU node found in context peer (server {server})" in table.stdout
    assert "healthy" not in table.stdout.replace("nothing is called healthy", "")
    data = subprocess.run([*command, "-o", "json"], capture_output=True, text=True, timeout=120, check=False)
    assert data.returncode == 3
    assert json.loads(data.stdout)["target"] == {"kind": "live", "context": "peer", "server": server}
