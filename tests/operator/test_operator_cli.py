"""`gpuchain operator render|crd`: manifests without a cluster, bad policies named by file:line: field."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from gpuchain.cli import app

runner = CliRunner()


def test_render_defaults() -> None:
    result = runner.invoke(app, ["operator", "render", "-n", "gpus"])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    kinds = [d["kind"] for d in docs]
    assert kinds[:2] == ["RuntimeClass", "ServiceAccount"] and kinds.count("DaemonSet") == 7
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
    assert "spec.driver.enabld: unknown key; did you mean 'enabled'?" in result.output
    assert "spec.gfd.repository" in result.output, "image problems come with the schema ones"


def test_crd_command() -> None:
    result = runner.invoke(app, ["operator", "crd", "-o", "json"])
    assert result.exit_code == 0
    assert '"clusterpolicies.gpuchain.io"' in result.stdout


def test_status_command_over_http() -> None:
    import json

    from kube.kmock_server import kmock_server
    from operator_helpers import NS, node

    from gpuchain.kube import LiveCluster
    from gpuchain.operator.crd import cluster_policy
    from gpuchain.operator.reconcile import reconcile

    with kmock_server() as (url, _):
        live = LiveCluster.from_url(url)
        empty = runner.invoke(app, ["operator", "status", "--server", url])
        assert empty.exit_code == 1 and "no ClusterPolicy" in empty.output
        live.create(node("gpu-0"))
        live.create(cluster_policy("cluster-policy", {"gfd": {"enabled": False}}))
        reconcile(live, "cluster-policy", NS)
        result = runner.invoke(app, ["operator", "status", "--server", url, "-o", "json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data[0]["name"] == "cluster-policy" and data[0]["gpuNodes"] == 1
        assert data[0]["operands"]["gpu-feature-discovery"]["state"] == "disabled"
        table = runner.invoke(app, ["operator", "status", "--server", url])
        assert table.exit_code == 0 and "cluster-policy" in table.stdout and "disabled" in table.stdout
