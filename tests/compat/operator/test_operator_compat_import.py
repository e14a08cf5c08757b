"""`gpuchain operator import`: NVIDIA's published ClusterPolicies become gpuchain's, with a report.

Inputs are NVIDIA's own files (fixtures/SOURCES.md): the chart's default policy, the sample, the
OLM bundle's example and the sample NVIDIADriver. Each imported policy must be one gpuchain's
operator accepts and whose manifests the API server accepts.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from operator_compat_helpers import FIXTURES, load, olm_example_policy, published_policies
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.operator.desired import desired
from gpuchain.operator.migrate import NVIDIA_CLUSTER_POLICY, PolicyImportError, import_policy, runtime_of
from gpuchain.operator.operands import Facts
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy

runner = CliRunner()


def _accepted(doc: dict[str, Any]) -> ClusterPolicySpec:
    assert doc["apiVersion"] == "gpuchain.io/v1" and doc["kind"] == "ClusterPolicy"
    parsed = parse_policy(doc["spec"])
    assert isinstance(parsed, ClusterPolicySpec), [str(p) for p in parsed]  # type: ignore[union-attr]
    for obj in desired(parsed, Facts(namespace="gpu-operator", policy_name=doc["metadata"]["name"])):
        kubernetes_validate.validate(obj, "1.36.0", strict=True)
    return parsed


@pytest.mark.parametrize("name", ["sample", "helm-default", "olm-example"])
def test_every_published_policy_imports_to_one_gpuchain_accepts(name: str) -> None:
    result = import_policy(published_policies()[name])
    _accepted(result.policy)


def test_chart_default_keeps_nvidias_driver_and_toolkit_and_swaps_operand_images() -> None:
    nvidia = load("helm-default-clusterpolicy.yaml")
    result = import_policy(nvidia)
    policy = _accepted(result.policy)
    assert result.of("blocks") == []
    # driver and toolkit stay NVIDIA's images at NVIDIA's versions
    assert policy.driver.image_ref() == "nvcr.io/nvidia/driver:595.91.07"
    assert policy.toolkit.image_ref() == "nvcr.io/nvidia/k8s/container-toolkit:v1.20.0"
    # the operands gpuchain runs use gpuchain's image
    assert policy.device_plugin.image == "gpuchain" and policy.gfd.image == "gpuchain"
    ignored = {e.key for e in result.of("ignored")}
    assert {"devicePlugin.image", "gfd.image", "validator.image", "dcgmExporter.image", "migManager.image"} <= ignored
    assert "dcgmExporter.serviceMonitor" in ignored, "the chart turns NVIDIA's ServiceMonitor on; gpuchain has none"
    assert "daemonsets.labels.app.kubernetes.io/managed-by" in ignored
    assert "app.kubernetes.io/managed-by" not in policy.daemonsets.labels
    assert policy.driver.upgrade_policy.auto_upgrade is True, "the chart sets autoUpgrade: true"
    assert policy.mig.strategy == "single" and policy.mig_manager.config.default == "all-disabled"
    maps = {e.key for e in result.of("maps")}
    assert {"driver", "toolkit", "devicePlugin", "gfd", "migManager", "daemonsets", "mig"} <= maps


def test_nvidias_defaults_are_kept_where_gpuchains_differ() -> None:
    # NVIDIA upgrades drivers automatically only when upgradePolicy.autoUpgrade says so.
    result = import_policy({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "spec": {}})
    assert result.policy["spec"]["driver"]["upgradePolicy"]["autoUpgrade"] is False


def _node(runtime_version: str, gpu: bool = True) -> dict[str, Any]:
    labels = {"nvidia.com/gpu.present": "true"} if gpu else {}
    return {"metadata": {"labels": labels}, "status": {"nodeInfo": {"containerRuntimeVersion": runtime_version}}}


def test_deprecated_default_runtime_is_dropped_and_the_nodes_runtime_reported() -> None:
    # NVIDIA's types (fixtures/clusterpolicy_types.go, defaultRuntime): "Deprecated: DefaultRuntime is no
    # longer used by the gpu-operator"; older NVIDIA charts wrote defaultRuntime: docker and such CRs survive.
    crio, containerd = _node("cri-o://1.30.2"), _node("containerd://1.7.20")
    result = import_policy({"spec": {"operator": {"defaultRuntime": "docker"}}}, nodes=[crio, containerd])
    assert "defaultRuntime" not in result.policy["spec"]["operator"]
    (entry,) = [e for e in result.entries if e.key == "operator.defaultRuntime"]
    assert entry.outcome == "ignored" and "deprecated" in entry.detail and "containerd now" in entry.detail


def test_runtime_is_chosen_from_the_gpu_nodes_as_nvidias_operator_chooses() -> None:
    # controllers/state_manager.go getRuntime: GPU nodes only; containerd if any of them runs it.
    crio, containerd = _node("cri-o://1.30.2"), _node("containerd://1.7.20")
    assert runtime_of([crio, containerd, crio]) == "containerd"
    assert runtime_of([crio, _node("containerd://1.7.20", gpu=False)]) == "crio"
    assert runtime_of([_node("containerd://1.7.20", gpu=False)]) is None


def test_olm_example_blocks_on_node_status_exporter() -> None:
    nvidia = olm_example_policy()
    assert nvidia["spec"]["nodeStatusExporter"]["enabled"] is True
    result = import_policy(nvidia)
    assert [e.key for e in result.of("blocks")] == ["nodeStatusExporter.enabled"]
    policy = _accepted(result.policy)
    assert not policy.node_status_exporter.enabled, "switched off so the imported policy applies"


def test_sandbox_workloads_block_with_each_operand() -> None:
    nvidia = copy.deepcopy(load("v1_clusterpolicy.yaml"))
    nvidia["spec"]["sandboxWorkloads"]["enabled"] = True
    result = import_policy(nvidia)
    assert {e.key for e in result.of("blocks")} == {
        "sandboxWorkloads.enabled",
        "vgpuManager.enabled",
        "vgpuDeviceManager.enabled",
        "vfioManager.enabled",
        "sandboxDevicePlugin.enabled",
    }
    _accepted(result.policy)


def test_nvidiadriver_resources_block() -> None:
    driver = load("nvidia_v1alpha1_nvidiadriver.yaml")
    nvidia = copy.deepcopy(load("v1_clusterpolicy.yaml"))
    nvidia["spec"]["driver"]["useNvidiaDriverCRD"] = True
    result = import_policy(nvidia, drivers=[driver])
    assert {e.key for e in result.of("blocks")} == {"driver.useNvidiaDriverCRD", "NVIDIADriver/nvidiadriver-sample"}
    assert not _accepted(result.policy).driver.use_nvidia_driver_crd


def test_a_policy_nvidias_schema_refuses_is_bad_input() -> None:
    with pytest.raises(PolicyImportError, match="spec.driver.enabld: unknown key"):
        import_policy({"spec": {"driver": {"enabld": True}}})


def test_cli_writes_the_policy_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "gpuchain-policy.yaml"
    result = runner.invoke(
        app,
        ["operator", "import", "-f", str(FIXTURES / "helm-default-clusterpolicy.yaml"), "-w", str(out), "-o", "json"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert set(report) == {"policy", "maps", "ignored", "blocks"} and report["blocks"] == []
    assert yaml.safe_load(out.read_text()) == report["policy"]
    rendered = runner.invoke(app, ["operator", "render", "-f", str(out)])
    assert rendered.exit_code == 0, rendered.output


def test_cli_exit_1_when_something_blocks(tmp_path: Path) -> None:
    f = tmp_path / "olm.yaml"
    f.write_text(yaml.safe_dump(olm_example_policy()))
    result = runner.invoke(app, ["operator", "import", "-f", str(f)])
    assert result.exit_code == 1
    assert "1 blocking: switched off in the written policy" in result.output
    as_json = runner.invoke(app, ["operator", "import", "-f", str(f), "-o", "json"])
    assert as_json.exit_code == 1
    assert [b["key"] for b in json.loads(as_json.stdout)["blocks"]] == ["nodeStatusExporter.enabled"]


def test_cli_bad_nvidia_file_is_one_line_with_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "nvidia.yaml"
    f.write_text("apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nspec:\n  gfd:\n    enabeld: true\n")
    result = runner.invoke(app, ["operator", "import", "-f", str(f)])
    assert result.exit_code == 2
    assert "nvidia.yaml:5: spec.gfd.enabeld: unknown key; did you mean 'enabled'?" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_cli_reads_nvidias_policy_from_the_cluster() -> None:
    from kube.kmock_server import kmock_server

    from gpuchain.kube import LiveCluster

    with kmock_server() as (url, _):
        live = LiveCluster.from_url(url)
        missing = runner.invoke(app, ["operator", "import", "--server", url])
        assert missing.exit_code == 2 and "no nvidia.com ClusterPolicy" in missing.output
        live.create(load("helm-default-clusterpolicy.yaml"))
        assert len(live.list(NVIDIA_CLUSTER_POLICY)) == 1
        result = runner.invoke(app, ["operator", "import", "--server", url, "-o", "json"])
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["policy"]["spec"]["driver"]["version"] == "595.91.07"


@pytest.mark.parametrize("command", ["render", "import"])
def test_nvidiadriver_is_named_with_what_to_do(command: str) -> None:
    # gpuchain has no NVIDIADriver kind: its sample is refused in one line that says what the file is
    # and where its settings go, not as a wrong apiVersion.
    result = runner.invoke(app, ["operator", command, "-f", str(FIXTURES / "nvidia_v1alpha1_nvidiadriver.yaml")])
    assert result.exit_code == 2
    line = result.output.strip()
    assert len(line.splitlines()) == 1
    assert "nvidia_v1alpha1_nvidiadriver.yaml:2: kind: this file is NVIDIA's NVIDIADriver, not a ClusterPolicy" in line
    assert "under driver in the ClusterPolicy" in line and "gpuchain operator import" in line
    assert "apiVersion" not in line


def test_olm_csv_is_named_with_where_its_policy_is() -> None:
    csv = FIXTURES / "gpu-operator-certified.clusterserviceversion.yaml"
    result = runner.invoke(app, ["operator", "import", "-f", str(csv)])
    assert result.exit_code == 2
    assert "kind: this file is an OLM ClusterServiceVersion" in result.output and "alm-examples" in result.output


def test_every_problem_of_nvidias_chart_policy_is_listed_for_render() -> None:
    # The chart's default policy has 6 problems for render (fixtures: helm-default-clusterpolicy.yaml);
    # the first line counts them and each further one follows on a line of its own.
    result = runner.invoke(app, ["operator", "render", "-f", str(FIXTURES / "helm-default-clusterpolicy.yaml")])
    assert result.exit_code == 2
    first, *also = result.output.strip().splitlines()
    assert first.endswith("(and 5 more problems)")
    assert len(also) == 5 and all(a.startswith("  also: ") and "helm-default-clusterpolicy.yaml:" in a for a in also)
    assert any("spec.migManager.image" in a for a in also)


def test_sample_reports_its_inert_sandbox_switches_as_ignored() -> None:
    # NVIDIA's sample (v1_clusterpolicy.yaml) sets vgpuManager, vgpuDeviceManager, vfioManager and
    # sandboxDevicePlugin enabled without sandboxWorkloads.enabled: NVIDIA's operator deploys none of them.
    nvidia = load("v1_clusterpolicy.yaml")
    assert nvidia["spec"]["vgpuManager"]["enabled"] is True and not nvidia["spec"]["sandboxWorkloads"]["enabled"]
    result = import_policy(nvidia)
    inert = {e.key: e for e in result.of("ignored") if e.detail.startswith("no effect here")}
    assert set(inert) == {
        "vgpuManager.enabled",
        "vgpuDeviceManager.enabled",
        "vfioManager.enabled",
        "sandboxDevicePlugin.enabled",
    }
    assert "sandboxWorkloads.enabled" in inert["vgpuManager.enabled"].detail
    assert result.policy["spec"]["vgpuManager"]["enabled"] is True and not result.of("blocks")
