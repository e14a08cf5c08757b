"""NVIDIA's GPU-sharing end-to-end check, replayed on the operands gpuchain's operator renders.

Upstream (NVIDIA/gpu-operator a22dbf6, ``tests/scripts/update-clusterpolicy.sh`` ``test_gpu_sharing``):
create ConfigMap ``plugin-config`` from ``tests/plugin-config.yaml`` (key ``plugin-config.yaml``),
patch the ClusterPolicy's ``spec.devicePlugin.config`` to ``{name: plugin-config, default:
plugin-config.yaml}``, then expect the 5 replicas of ``tests/plugin-test.yaml`` (one
``nvidia.com/gpu`` each, nodeSelector ``nvidia.com/gpu.product: <product>-SHARED``) to run, and the
node labels ``nvidia.com/gpu.replicas=10`` and ``nvidia.com/gpu.product=<product>-SHARED``. Those
labels come from GFD, which NVIDIA's operator gives the device plugin's ConfigMap as well
(``controllers/object_controls.go``: ``TransformGPUDiscoveryPlugin`` calls ``handleDevicePluginConfig``).

Here each operand's container runs as its pod would: its command, args and literal env, the
ConfigMap's keys as files where the pod mounts the volume, on a simulated node with two L4s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from operator_compat_helpers import FIXTURES
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.operator.desired import desired
from gpuchain.operator.operands import Facts
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy

runner = CliRunner()
CONFIG_MAP = {"plugin-config.yaml": (FIXTURES / "plugin-config.yaml").read_text()}
PATCH = {"devicePlugin": {"config": {"name": "plugin-config", "default": "plugin-config.yaml"}}}
PRODUCT = "NVIDIA-L4"  #: what GFD labels the simulated node's GPUs (upstream's CI node: Tesla-T4)


def _daemonsets(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The DaemonSets of ``spec`` in NVIDIA's per-operand layout, whose check this replays."""
    policy = parse_policy({"nodeAgent": {"enabled": False}, **spec})
    assert isinstance(policy, ClusterPolicySpec), policy
    objs = desired(policy, Facts(namespace="gpu-operator", policy_name="cluster-policy"))
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == "DaemonSet"}


def _run_container(ds: dict[str, Any], tmp_path: Path, extra: list[str]) -> dict[str, Any] | list[Any]:
    """Run the DaemonSet's main container on a simulated node: the ConfigMap volume's keys appear
    as files at its mount path, the NVML backend is the simulated one."""
    pod = ds["spec"]["template"]["spec"]
    container = pod["containers"][0]
    config_maps = {v["name"]: v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v}
    paths: dict[str, str] = {}
    for mount in container.get("volumeMounts", []):
        if config_maps.get(mount["name"]) == "plugin-config":
            where = tmp_path / ds["metadata"]["name"]
            where.mkdir()
            for key, text in CONFIG_MAP.items():
                (where / key).write_text(text)
            paths[mount["mountPath"]] = str(where)
    args = [paths.get(a, a) for a in container["args"]]
    args = ["sim" if a == "nvml" and i and args[i - 1] == "--backend" else a for i, a in enumerate(args)]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    result = runner.invoke(app, [*container["command"][1:], *args, "--preset", "l4-x2", *extra], env=env)
    assert result.exit_code == 0, result.output
    out: dict[str, Any] | list[Any] = json.loads(result.stdout)
    return out


def test_gfd_gets_the_device_plugins_config_map_and_labels_the_sharing_as_nvidias_e2e_expects(
    tmp_path: Path,
) -> None:
    gfd = _daemonsets(PATCH)["gpu-feature-discovery"]
    labels = _run_container(gfd, tmp_path, ["--oneshot", "--output-file", "", "--no-timestamp", "-o", "json"])
    assert isinstance(labels, dict)
    assert labels["nvidia.com/gpu.replicas"] == "10"
    assert labels["nvidia.com/gpu.product"] == f"{PRODUCT}-SHARED"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    # The test workload's nodeSelector, with the product name put in as upstream's script does.
    test = yaml.safe_load((FIXTURES / "plugin-test.yaml").read_text().replace("Tesla-T4-SHARED", f"{PRODUCT}-SHARED"))
    selector = test["spec"]["template"]["spec"]["nodeSelector"]
    assert selector.items() <= labels.items()


def test_the_device_plugin_serves_the_replicas_the_test_workload_needs(tmp_path: Path) -> None:
    plugin = _daemonsets(PATCH)["nvidia-device-plugin-daemonset"]
    resources = _run_container(plugin, tmp_path, ["--list", "-o", "json"])
    assert isinstance(resources, list)
    test = yaml.safe_load((FIXTURES / "plugin-test.yaml").read_text())
    wanted = (
        test["spec"]["replicas"]
        * test["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    )
    (gpu,) = [r for r in resources if r["resource"] == "nvidia.com/gpu"]
    assert (gpu["devices"], gpu["units"], gpu["replicas"]) == (20, 2, 10)
    assert gpu["devices"] >= wanted > gpu["units"], "the 5 pods fit only because the 2 GPUs are shared"


def test_without_the_config_neither_operand_mounts_a_config_map() -> None:
    for name in ("gpu-feature-discovery", "nvidia-device-plugin-daemonset"):
        pod = _daemonsets({})[name]["spec"]["template"]["spec"]
        assert not [v for v in pod["volumes"] if "configMap" in v], name
        assert "--config-dir" not in pod["containers"][0]["args"], name
