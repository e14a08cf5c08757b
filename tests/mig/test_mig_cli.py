"""`gpuchain mig apply|assert|config`: exit codes and output a script can rely on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fakes.sigterm import sigterm_during
from kube.kmock_server import kmock_server, write_kubeconfig
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.kube import NODE, LiveCluster
from gpuchain.mig.config import default_config, parse_config

runner = CliRunner()


def test_apply_on_the_simulated_default_node() -> None:
    result = runner.invoke(app, ["mig", "apply", "-c", "all-1g.10gb", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["applied"] and len(data["steps"]) == 8 * 8  # a mode change and 7 devices per GPU
    assert sum(len(g["migDevices"]) for g in data["gpus"]) == 56


def test_dry_run_lists_steps_without_applying() -> None:
    result = runner.invoke(
        app, ["mig", "apply", "-c", "all-balanced", "--dry-run", "--preset", "h100-80gb-x8-mig-mixed"]
    )
    assert result.exit_code == 0, result.output
    assert "would apply (dry run)" in result.stdout and "GPU 4: destroy GPU instance" in result.stdout
    assert "GPU 0:" not in result.stdout
    assert "GPUs after apply (planned; nothing was changed)" in result.stdout


def test_dry_run_shows_the_planned_state_not_the_current_one() -> None:
    """GPUs 4-5 of the mixed preset hold 7x 1g.10gb and 6-7 have MIG off; all-balanced plans them all balanced."""
    args = ["mig", "apply", "-c", "all-balanced", "--dry-run", "--preset", "h100-80gb-x8-mig-mixed", "-o", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    balanced = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert [(g["index"], g["mig"], g["devices"]) for g in data["planned"]] == [
        (i, "enabled", balanced) for i in range(8)
    ]
    assert not data["applied"]
    assert sum(len(g["migDevices"]) for g in data["gpus"]) == 4 * 4 + 2 * 7  # the node itself is unchanged


def test_config_lists_each_pci_id_once_per_device_filter() -> None:
    result = runner.invoke(app, ["mig", "config"])
    assert result.exit_code == 0, result.output
    filters = [
        e["device-filter"]
        for entries in yaml.safe_load(result.stdout)["mig-configs"].values()
        for e in entries
        if "device-filter" in e
    ]
    assert filters and all(len(f) == len(set(f)) for f in filters)
    assert any("0x20B010DE" in f for f in filters)


def test_assert_exit_codes() -> None:
    ok = runner.invoke(app, ["mig", "assert", "-c", "all-disabled"])
    assert ok.exit_code == 0 and "node has MIG layout 'all-disabled'" in ok.stdout
    bad = runner.invoke(
        app, ["mig", "assert", "-c", "all-balanced", "--preset", "h100-80gb-x8-mig-mixed", "-o", "json"]
    )
    assert bad.exit_code == 1
    assert len(json.loads(bad.stdout)["differences"]) == 4


def test_bad_file_and_unfit_layout_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "mig.yaml"
    path.write_text("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enable: true\n")
    result = runner.invoke(app, ["mig", "apply", "-f", str(path), "-c", "a"])
    assert result.exit_code == 2
    assert f"{path}:4" in result.output or f"{path}:5" in result.output
    result = runner.invoke(app, ["mig", "apply", "-c", "all-1g.18gb"])
    assert result.exit_code == 2 and "selects none of this node's GPUs" in result.output


def test_env_vars_select_file_and_layout(tmp_path: Path) -> None:
    path = tmp_path / "mig.yaml"
    path.write_text(default_config().to_yaml())
    env = {"MIG_PARTED_CONFIG_FILE": str(path), "MIG_PARTED_SELECTED_CONFIG": "all-disabled"}
    assert runner.invoke(app, ["mig", "assert"], env=env).exit_code == 0


def test_config_prints_a_loadable_mig_parted_file() -> None:
    result = runner.invoke(app, ["mig", "config"])
    assert result.exit_code == 0
    assert parse_config(result.stdout) == default_config()


def test_mig_manager_once_against_a_real_http_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent command end to end: LiveCluster over kmock's HTTP API, simulated GPUs."""
    with kmock_server() as (url, _emulator):
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            f"apiVersion: v1\nkind: Config\nclusters: [{{name: k, cluster: {{server: '{url}'}}}}]\n"
            "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
            "current-context: c\n"
        )
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        cluster = LiveCluster.from_url(url)
        labels = {"nvidia.com/mig.config": "all-3g.40gb", "nvidia.com/gpu.deploy.device-plugin": "true"}
        cluster.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": labels}})
        refused = runner.invoke(app, ["mig-manager", "--node", "n1", "--once", "-o", "json"])
        assert refused.exit_code == 2 and "--backend defaults to sim" in refused.output
        assert "nvidia.com/mig.config.state" not in cluster.get(NODE, name="n1")["metadata"]["labels"], (
            "nothing written"
        )
        args = ["mig-manager", "--node", "n1", "--once", "--backend", "sim", "-o", "json"]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["outcome"] == "success"
        assert json.loads(result.stdout)["simulated"] is True and "(simulated)" in json.loads(result.stdout)["message"]
        node = cluster.get(NODE, name="n1")
        assert node["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
        assert node["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "true"
        cluster.close()


def test_mig_manager_applies_default_mig_config_to_an_unlabelled_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's migManager.config.default arrives as DEFAULT_MIG_CONFIG; no label: that layout."""
    with kmock_server() as (url, _emulator):
        cluster = LiveCluster.from_url(url)
        labels = {"nvidia.com/gpu.deploy.device-plugin": "true"}
        cluster.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": labels}})
        monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kubeconfig", url)))
        args = ["mig-manager", "--node", "n1", "--once", "--backend", "sim", "-o", "json"]
        idle = runner.invoke(app, args)
        assert idle.exit_code == 0 and json.loads(idle.stdout)["phase"] == "idle"
        assert "nvidia.com/mig.config.state" not in cluster.get(NODE, name="n1")["metadata"]["labels"]
        monkeypatch.setenv("DEFAULT_MIG_CONFIG", "all-3g.40gb")
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert (data["config"], data["outcome"]) == ("all-3g.40gb", "success")
        assert cluster.get(NODE, name="n1")["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
        cluster.close()
    bad = runner.invoke(app, [*args, "--default-config", "all-9g"])
    assert bad.exit_code == 2 and "all-9g" in bad.output


def test_mig_manager_without_kubeconfig_is_one_line_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = runner.invoke(app, ["mig-manager", "--node", "n1", "--once", "--backend", "sim"])
    assert result.exit_code == 2
    assert "no Kubernetes API configuration" in result.output and "Traceback" not in result.output
    assert "KUBECONFIG" in result.output


def test_mig_manager_sigterm_during_its_first_round_finishes_the_round_and_exits_cleanly(tmp_path: Path) -> None:
    """SIGTERM as the first reconcile starts (a pod deleted while the agent starts): the change in
    progress is finished, not cut off with the state pending, and the agent exits 0."""
    with kmock_server() as (url, _emulator):
        cluster = LiveCluster.from_url(url)
        labels = {"nvidia.com/mig.config": "all-3g.40gb", "nvidia.com/gpu.deploy.device-plugin": "true"}
        cluster.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": labels}})
        program = sigterm_during("gpuchain.mig.manager:MigManager.reconcile", "before")
        proc = subprocess.run(
            [sys.executable, "-c", program, "mig-manager", "--node", "n1", "--backend", "sim"],
            capture_output=True,
            timeout=60,
            check=False,
            env={**os.environ, "KUBECONFIG": str(write_kubeconfig(tmp_path / "kubeconfig", url))},
        )
        after = cluster.get(NODE, name="n1")["metadata"]["labels"]
        cluster.close()
    log = (proc.stdout + proc.stderr).decode()
    assert proc.returncode == 0, log
    assert "MIG manager stopped" in log and "Traceback" not in log
    assert after["nvidia.com/mig.config.state"] == "success"
    assert after["nvidia.com/gpu.deploy.device-plugin"] == "true"  # the operand is not left paused
