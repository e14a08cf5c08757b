"""The doctor on a live API server (LiveCluster over kmock on loopback HTTP), as `kubectl gpuchain doctor` runs."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from kube.kmock_server import kmock_server
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.doctor import run_doctor
from gpuchain.kube import CLUSTER_POLICY, CONFIGMAP, DAEMONSET, EVENT, NODE, POD, RUNTIME_CLASS, LiveCluster
from gpuchain.sim import build, load_scenario


def _copy_scenario(name: str, live: LiveCluster) -> None:
    sim = build(load_scenario(name))
    for kind in (NODE, CLUSTER_POLICY, RUNTIME_CLASS, DAEMONSET, CONFIGMAP, POD, EVENT):
        for obj in sim.cluster.list(kind):
            meta = {
                k: v for k, v in obj["metadata"].items() if k not in ("uid", "resourceVersion", "creationTimestamp")
            }
            live.create({**obj, "metadata": meta})


def test_doctor_over_http_names_the_same_root_cause_with_seven_lists() -> None:
    with kmock_server() as (url, _emulator):
        live = LiveCluster.from_url(url)
        _copy_scenario("friday-scale-out", live)
        live.calls.reset()
        report = run_doctor(live)
    assert [g.id for g in report.root_causes] == ["driver.kernel-mismatch"]
    assert len(report.root_causes[0].nodes) == 8
    assert report.api_calls == {"list": 9}


def test_cli_reads_a_kubeconfig(tmp_path: Path) -> None:
    with kmock_server() as (url, _emulator):
        _copy_scenario("gpu-fell-off-bus", LiveCluster.from_url(url))
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "k", "cluster": {"server": url}}],
            "users": [{"name": "u", "user": {}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            "current-context": "c",
        }
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        result = CliRunner().invoke(app, ["doctor", "--kubeconfig", str(path), "--context", "c", "-o", "json"])
        missing = CliRunner().invoke(app, ["doctor", "--kubeconfig", str(path), "--context", "nope"])
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["rootCauses"] == ["gpu.lost"]
    assert missing.exit_code == 2 and "no context 'nope'" in missing.stderr
