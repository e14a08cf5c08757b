"""Which ClusterPolicy a name reaches with the real kubectl, NVIDIA's CRD installed beside gpuchain's.

Issue 24 item 4: both CRDs are called ClusterPolicy. kubectl resolves a bare name through API
discovery, and among API groups of equal priority (every CRD group) the first by name wins:
``gpuchain.io`` before ``nvidia.com``. While gpuchain's CRD also took the singular
``clusterpolicy``, ``kubectl get clusterpolicy`` and NVIDIA's own ``kubectl patch
clusterpolicy/cluster-policy ...`` (NVIDIA/gpu-operator tests/scripts/update-clusterpolicy.sh)
acted on gpuchain's policy. Here the real kube-apiserver (v1.37.2) serves NVIDIA's CRD, verbatim
from NVIDIA/gpu-operator at a22dbf6 (tests/compat/operator/fixtures/SOURCES.md), and the chart's
CRD; both hold a ``cluster-policy``, and the real kubectl says whose object each name reaches.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes.cluster_policy import cluster_policy

from gpuchain.kube import CRD, LiveCluster
from peers.apiserver import ApiServer

ROOT = Path(__file__).resolve().parents[2]
GPUCHAIN_CRD = ROOT / "charts" / "gpuchain" / "crds" / "clusterpolicies.gpuchain.io.yaml"
NVIDIA_CRD = ROOT / "tests" / "compat" / "operator" / "fixtures" / "nvidia.com_clusterpolicies.yaml"
NVIDIA_SAMPLE = NVIDIA_CRD.with_name("v1_clusterpolicy.yaml")  # NVIDIA's config/samples/ policy
KUBECTL = shutil.which("kubectl")

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="no kubectl on PATH (Debian's kubectl or the cloud SDK's)")


def _install(live: LiveCluster, path: Path) -> None:
    crd = yaml.safe_load(path.read_text())
    live.create(crd)
    deadline = time.monotonic() + 30
    while True:
        conditions = (live.get(CRD, name=crd["metadata"]["name"]).get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        assert time.monotonic() < deadline, f"{crd['metadata']['name']} not established within 30s"
        time.sleep(0.1)


@pytest.fixture
def kubectl(apiserver: ApiServer, live_cluster: LiveCluster, tmp_path: Path) -> Any:
    """Both CRDs installed, a ``cluster-policy`` of each; a function running the real kubectl as admin."""
    _install(live_cluster, GPUCHAIN_CRD)
    _install(live_cluster, NVIDIA_CRD)
    live_cluster.create(cluster_policy("cluster-policy", {"mig": {"strategy": "single"}}))
    nvidia = yaml.safe_load(NVIDIA_SAMPLE.read_text())  # its spec has mig.strategy single
    nvidia["metadata"] = {"name": "cluster-policy"}  # the name NVIDIA's chart gives it
    apiserver.request("POST", "/apis/nvidia.com/v1/clusterpolicies", nvidia)
    # A fresh discovery cache per test: kubectl must resolve names from what this server serves now.
    env = {**os.environ, "KUBECONFIG": str(apiserver.kubeconfig), "HOME": str(tmp_path)}

    def run(*args: str) -> str:
        done = subprocess.run(
            [str(KUBECTL), "--cache-dir", str(tmp_path / "cache"), *args],
            capture_output=True, text=True, timeout=60, check=False, env=env,
        )  # fmt: skip
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    return run


def _strategy(apiserver: ApiServer, group: str) -> str:
    return str(apiserver.request("GET", f"/apis/{group}/v1/clusterpolicies/cluster-policy")["spec"]["mig"]["strategy"])


def test_the_names_nvidias_docs_use_reach_nvidias_policy(apiserver: ApiServer, kubectl: Any) -> None:
    assert kubectl("get", "clusterpolicy", "-o", "jsonpath={.items[*].apiVersion}") == "nvidia.com/v1"
    assert kubectl("get", "ClusterPolicy", "cluster-policy", "-o", "jsonpath={.apiVersion}") == "nvidia.com/v1"
    assert kubectl("get", "clusterpolicies.nvidia.com", "-o", "jsonpath={.items[*].apiVersion}") == "nvidia.com/v1"
    # NVIDIA's own script's write, as written there: it must change NVIDIA's policy, not gpuchain's.
    patch = json.dumps([{"op": "replace", "path": "/spec/mig/strategy", "value": "mixed"}])
    kubectl("patch", "clusterpolicy/cluster-policy", "--type=json", "-p", patch)
    assert (_strategy(apiserver, "nvidia.com"), _strategy(apiserver, "gpuchain.io")) == ("mixed", "single")


def test_gpuchains_policy_is_reached_by_its_documented_names(kubectl: Any) -> None:
    for name in ("clusterpolicies.gpuchain.io", "gpuchainpolicy", "gcpol"):
        got = kubectl("get", name, "cluster-policy", "-o", "jsonpath={.apiVersion}")
        assert got == "gpuchain.io/v1", f"kubectl get {name} reached {got}"
    # The plural is both CRDs' identity and stays shared: bare, it goes to the group first by name,
    # gpuchain.io, as docs/operator.md ("Names") says; NVIDIA's docs qualify it (clusterpolicies.nvidia.com).
    assert kubectl("get", "clusterpolicies", "-o", "jsonpath={.items[*].apiVersion}") == "gpuchain.io/v1"
