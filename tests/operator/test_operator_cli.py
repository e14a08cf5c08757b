"""`gpuchain operator render|crd`: manifests without a cluster, bad policies named by file:line: field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuchain.cli import app

runner = CliRunner()


def test_render_defaults() -> None:
    result = runner.invoke(app, ["operator", "render", "-n", "gpus"])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    kinds = [d["kind"] for d in docs]
    assert kinds[:2] == ["RuntimeClass", "ServiceAccount"]
    daemonsets = [d["metadata"]["name"] for d in docs if d["kind"] == "DaemonSet"]
    # the default layout: NVIDIA's driver and toolkit, and one node agent for the gpuchain operands
    assert daemonsets == ["nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset", "gpuchain-node-agent"]
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] == "DaemonSet"} == {"gpus"}


def test_render_policy_file(tmp_path: Path) -> None:
    f = tmp_path / "policy.yaml"
    f.write_text("apiVersion: gpuchain.io/v1\nkind: ClusterPolicy\nspec:\n  driver:\n    enabled: false\n")
    result = runner.invoke(app, ["operator", "render", "-f", str(f)])
    assert result.exit_code == 0
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(result.stdout)]
    assert "nvidia-driver-daemonset" not in names


def test_render_rejects_bad_policy(tmp_path: Path) -> None:
    f = tmp_path / "policy.yaml"
    f.write_text("kind: ClusterPolicy\nspec:\n  mig:\n    strategy: weird\n")
    result = runner.invoke(app, ["operator", "render", "-f", str(f)])
    assert result.exit_code == 2
    assert "spec.mig.strategy" in result.output
    f.write_text("kind: Policy\n")
    wrong = runner.invoke(app, ["operator", "render", "-f", str(f)])
    assert wrong.exit_code == 2 and "policy.yaml:1: kind" in wrong.output


def test_render_rejects_unknown_keys_with_image_problems(tmp_path: Path) -> None:
    f = tmp_path / "policy.yaml"
    f.write_text("kind: ClusterPolicy\nspec:\n  driver:\n    enabld: true\n  gfd:\n    repository: Bad/Repo\n")
    result = runner.invoke(app, ["operator", "render", "-f", str(f)])
    assert result.exit_code == 2, result.output
    # One line: file, line and field of the first problem, and how many more there are; then each of them.
    first, *also = result.output.strip().splitlines()
    assert "policy.yaml:4: spec.driver.enabld: unknown key; did you mean 'enabled'? (and 1 more problem)" in first
    assert len(also) == 1 and "policy.yaml:6: spec.gfd" in also[0] and "Bad/Repo" in also[0]


def _render(tmp_path: Path, text: str, *extra: str) -> Any:
    f = tmp_path / "policy.yaml"
    f.write_text(text)
    return runner.invoke(app, ["operator", "render", "-f", str(f), *extra])


@pytest.mark.parametrize(
    ("text", "where"),
    [
        # issue 15: each of these rendered with exit 0 and a manifest the API server refuses.
        (
            "spec:\n  operator:\n    runtimeClass: Bad Name!\n",
            "policy.yaml:3: spec.operator.runtimeClass: 'Bad Name!' is not a valid DNS subdomain",
        ),
        (
            "spec:\n  daemonsets:\n    tolerations:\n    - key: 5\n",
            "policy.yaml:4: spec.daemonsets.tolerations.0.key: Input should be a valid string",
        ),
        (
            "spec:\n  daemonsets:\n    tolerations:\n    - {key: a, operator: Exists, tolerationSeconds: '30'}\n",
            "policy.yaml:4: spec.daemonsets.tolerations.0.tolerationSeconds",
        ),
        (
            "spec:\n  daemonsets:\n    tolerations:\n    - {key: a, effect: NoRun}\n",
            "policy.yaml:4: spec.daemonsets.tolerations.0: effect 'NoRun' is not one of",
        ),
        (
            "spec:\n  daemonsets:\n    tolerations: {key: a}\n",
            "policy.yaml:3: spec.daemonsets.tolerations: Input should be a valid list",
        ),
        (
            "spec:\n  daemonsets:\n    priorityClassName: Critical\n",
            "policy.yaml:3: spec.daemonsets.priorityClassName: 'Critical'",
        ),
        (
            "spec:\n  daemonsets:\n    labels: {'bad key!': x}\n",
            "policy.yaml:3: spec.daemonsets.labels: key 'bad key!'",
        ),
        (
            "spec:\n  devicePlugin:\n    config: {name: My_Config}\n",
            "policy.yaml:3: spec.devicePlugin.config.name: 'My_Config'",
        ),
        (
            "spec:\n  gds:\n    enabled: true\n",
            "policy.yaml:3: spec.gds.enabled: GPUDirect Storage (nvidia-fs) is not supported by gpuchain",
        ),
    ],
)
def test_render_refuses_what_the_api_server_would_refuse(tmp_path: Path, text: str, where: str) -> None:
    result = _render(tmp_path, text)
    assert result.exit_code == 2, result.output
    assert where in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_render_refuses_a_bad_namespace() -> None:
    result = runner.invoke(app, ["operator", "render", "-n", "Bad_Namespace!"])
    assert result.exit_code == 2
    assert "--namespace: 'Bad_Namespace!' is not a valid DNS label" in result.output


def test_crd_command() -> None:
    result = runner.invoke(app, ["operator", "crd", "-o", "json"])
    assert result.exit_code == 0
    assert '"clusterpolicies.gpuchain.io"' in result.stdout


def test_status_command_over_http() -> None:
    import json

    from fakes.cluster_policy import cluster_policy
    from kube.kmock_server import kmock_server
    from operator_helpers import NS, node

    from gpuchain.kube import LiveCluster
    from gpuchain.operator.reconcile import reconcile

    with kmock_server() as (url, _):
        live = LiveCluster.from_url(url)
        empty = runner.invoke(app, ["operator", "status", "--server", url])
        assert empty.exit_code == 1 and "no ClusterPolicy" in empty.output
        live.create(node("gpu-0"))
        live.create(cluster_policy("cluster-policy", {"gfd": {"enabled": False}}))
        reconcile(live, name="cluster-policy", namespace=NS)
        result = runner.invoke(app, ["operator", "status", "--server", url, "-o", "json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data[0]["name"] == "cluster-policy" and data[0]["gpuNodes"] == 1
        assert data[0]["operands"]["gpu-feature-discovery"]["state"] == "disabled"
        table = runner.invoke(app, ["operator", "status", "--server", url])
        assert table.exit_code == 0 and "cluster-policy" in table.stdout and "disabled" in table.stdout
