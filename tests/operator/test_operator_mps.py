"""The device plugin's DaemonSet when its config shares GPUs with MPS: what NVIDIA gives its MPS
control daemon pod (k8s-device-plugin v0.18.0 deployments/helm/.../daemonset-mps-control-daemon.yml,
gpu-operator assets/state-mps-control-daemon/0400_daemonset.yaml), and paths that meet the ones
the plugin's daemon and Allocate use."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
from operator_helpers import NS, PER_OPERAND, make_cluster

from gpuchain.deviceplugin.allocate import ContainerAllocation
from gpuchain.deviceplugin.mps import with_mps
from gpuchain.gpu.mps import MpsRoot
from gpuchain.kube import CONFIGMAP, DAEMONSET
from gpuchain.operator.desired import desired
from gpuchain.operator.operands import DEVICE_PLUGIN, GFD, Facts, config_uses_mps
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy
from gpuchain.operator.reconcile import reconcile

MPS_CONFIG = "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
TIME_SLICED = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"


def _policy(spec: dict[str, Any]) -> ClusterPolicySpec:
    """``spec`` in the per-operand layout (each operand's own DaemonSet is under test here)."""
    parsed = parse_policy({**PER_OPERAND, **spec})
    assert isinstance(parsed, ClusterPolicySpec), parsed
    return parsed


def _daemonset(objs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == "DaemonSet" and o["metadata"]["name"] == name)


def _plugin(spec: dict[str, Any], mps: bool) -> dict[str, Any]:
    ds = _daemonset(
        desired(_policy(spec), Facts(namespace=NS, policy_name="cluster-policy", mps=mps)), DEVICE_PLUGIN.name
    )
    pod: dict[str, Any] = ds["spec"]["template"]["spec"]
    return pod


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def _host_of(pod: dict[str, Any], container: dict[str, Any], path: str) -> str | None:
    """The host path a container path lands on through the container's hostPath mounts."""
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    best = None
    for m in container.get("volumeMounts", []):
        inside = PurePosixPath(m["mountPath"])
        fits = m["name"] in volumes and PurePosixPath(path).is_relative_to(inside)
        if fits and (best is None or len(inside.parts) > len(best[0].parts)):
            best = (inside, volumes[m["name"]])
    if best is None:
        return None
    return str(PurePosixPath(best[1], PurePosixPath(path).relative_to(best[0])))


@pytest.mark.parametrize("version", ("1.28.0", "1.36.0"))
@pytest.mark.parametrize("root", ("/run/nvidia/mps", "/var/run/mps/"))
def test_mps_plugin_daemonset_validates_and_has_what_the_daemon_needs(root: str, version: str) -> None:
    spec = {"devicePlugin": {"config": {"name": "dp"}, "mps": {"root": root}}}
    objs = desired(_policy(spec), Facts(namespace=NS, policy_name="cluster-policy", mps=True))
    for obj in objs:
        kubernetes_validate.validate(obj, version, strict=True)
    pod = _plugin(spec, mps=True)
    main = pod["containers"][0]
    clean = root.rstrip("/")
    assert pod["hostPID"] is True
    assert _env(main)["MPS_ROOT"] == clean
    # compute: the NVIDIA runtime injects nvidia-cuda-mps-control and -server (utility: nvidia-smi).
    assert _env(main)["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    volumes = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
    assert volumes["mps-root"] == {"path": clean, "type": "DirectoryOrCreate"}
    assert volumes["mps-shm"]["path"] == f"{clean}/shm"
    assert _host_of(pod, main, "/dev/shm") == f"{clean}/shm"
    shm_init = next(c for c in pod["initContainers"] if c["name"] == "mps-shm")
    assert shm_init["securityContext"] == {"privileged": True}
    assert shm_init["volumeMounts"] == [{"name": "mps-root", "mountPath": clean, "mountPropagation": "Bidirectional"}]
    # It runs after the wait for the toolkit, like NVIDIA's mounts init after its toolkit-validation.
    assert [c["name"] for c in pod["initContainers"]] == ["toolkit-validation", "mps-shm"]


def test_without_mps_the_plugin_gets_none_of_it() -> None:
    pod = _plugin({"devicePlugin": {"config": {"name": "dp"}}}, mps=False)
    main = pod["containers"][0]
    assert "hostPID" not in pod
    assert "MPS_ROOT" not in _env(main)
    assert _env(main)["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert not {"mps-root", "mps-shm"} & {v["name"] for v in pod["volumes"]}
    assert [c["name"] for c in pod["initContainers"]] == ["toolkit-validation"]


def test_only_the_device_plugin_runs_mps() -> None:
    objs = desired(
        _policy({"devicePlugin": {"config": {"name": "dp"}}}),
        Facts(namespace=NS, policy_name="cluster-policy", mps=True),
    )
    gfd = _daemonset(objs, GFD.name)["spec"]["template"]["spec"]
    assert "hostPID" not in gfd and "MPS_ROOT" not in _env(gfd["containers"][0])


def test_the_daemon_the_plugin_starts_and_the_containers_allocate_answers_meet_on_the_host() -> None:
    """The plugin keeps the daemon's pipe directory at ``MpsRoot(MPS_ROOT)`` inside its container and
    gives workloads ``with_mps(..., host_root=MPS_ROOT)``'s host paths: the mounts must make both the
    same host directories, and the plugin's /dev/shm the shm Allocate mounts."""
    pod = _plugin({"devicePlugin": {"config": {"name": "dp"}, "mps": {"root": "/srv/mps"}}}, mps=True)
    main = pod["containers"][0]
    root = _env(main)["MPS_ROOT"]
    resource = "nvidia.com/gpu"
    alloc = with_mps(ContainerAllocation(), resource=resource, host_root=root)
    given = {m.container_path: m.host_path for m in alloc.mounts}
    inside = MpsRoot(root)
    assert _host_of(pod, main, inside.pipe_dir(resource)) == given[MpsRoot("/mps").pipe_dir(resource)]
    assert _host_of(pod, main, "/dev/shm") == given["/dev/shm"]


@pytest.mark.parametrize("root", ["/run/nvidia/mps", "/run/my mps;touch x"])
def test_shm_init_mounts_a_tmpfs_of_half_the_memory(tmp_path: Path, root: str) -> None:
    """The init container's script, run with stand-ins for mount/umount that record their arguments
    (one line per argument: a root the shell split or ran would show)."""
    pod = _plugin({"devicePlugin": {"config": {"name": "dp"}, "mps": {"root": root}}}, mps=True)
    shm_init = next(c for c in pod["initContainers"] if c["name"] == "mps-shm")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for tool in ("mount", "umount", "mkdir"):
        stub = bin_dir / tool
        stub.write_text(f'#!/bin/sh\nprintf "%s|" {tool} "$@" >> {calls}\necho >> {calls}\n')
        stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run(shm_init["command"], env=env, check=True, timeout=30, cwd=tmp_path)
    meminfo = Path("/proc/meminfo").read_text()
    total_k = int(next(line.split()[1] for line in meminfo.splitlines() if line.startswith("MemTotal:")))
    shm = f"{root}/shm"
    assert calls.read_text().splitlines() == [
        f"umount|{shm}|",
        f"mkdir|-p|{shm}|",
        f"mount|-t|tmpfs|-o|rw,nosuid,nodev,noexec,relatime,size={total_k // 2}k|shm|{shm}|",
    ]
    assert not (tmp_path / "x").exists()


def test_config_uses_mps_reads_every_named_config() -> None:
    assert config_uses_mps({"ts": TIME_SLICED, "mps": MPS_CONFIG})
    assert not config_uses_mps({"ts": TIME_SLICED, "plain": "version: v1\n"})
    # A config the plugin would refuse counts as none (the plugin says why at start).
    assert not config_uses_mps({"bad": "sharing:\n  mps:\n    resources: []\n"})
    assert not config_uses_mps({})


def test_reconcile_follows_the_plugin_configmap() -> None:
    cluster = make_cluster(spec={"devicePlugin": {"config": {"name": "plugin-config", "default": "mps"}}})

    def plugin_pod() -> dict[str, Any]:
        spec: dict[str, Any] = cluster.get(DAEMONSET, name=DEVICE_PLUGIN.name, namespace=NS)["spec"]["template"]["spec"]
        return spec

    reconcile(cluster, name="cluster-policy", namespace=NS)
    assert "hostPID" not in plugin_pod(), "no ConfigMap yet: no MPS"
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "plugin-config", "namespace": NS},
        "data": {"mps": MPS_CONFIG},
    }
    cluster.create(cm)
    reconcile(cluster, name="cluster-policy", namespace=NS)
    assert plugin_pod()["hostPID"] is True
    assert _env(plugin_pod()["containers"][0])["MPS_ROOT"] == "/run/nvidia/mps"
    cluster.patch(CONFIGMAP, name="plugin-config", patch={"data": {"mps": TIME_SLICED}}, namespace=NS)
    reconcile(cluster, name="cluster-policy", namespace=NS)
    assert "MPS_ROOT" not in _env(plugin_pod()["containers"][0])
    assert not any(v["name"] == "mps-root" for v in plugin_pod()["volumes"])


def test_render_mps_flag() -> None:
    from typer.testing import CliRunner

    from gpuchain.cli import app

    out = CliRunner().invoke(app, ["operator", "render", "--mps", "-o", "json"])
    assert out.exit_code == 0, out.output
    assert "MPS_ROOT" in out.output and '"hostPID": true' in out.output


def test_a_relative_mps_root_is_a_problem_naming_the_field() -> None:
    problems = parse_policy({"devicePlugin": {"mps": {"root": "run/mps"}}})
    assert isinstance(problems, list)
    assert [p.field for p in problems] == ["devicePlugin.mps.root"]
    assert "not an absolute host path" in problems[0].reason
