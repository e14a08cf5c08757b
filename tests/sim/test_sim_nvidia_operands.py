"""The simulated GPU Operator's DaemonSets carry what NVIDIA's operator renders from the ClusterPolicy
(`gpuchain.sim.nvidia_operands`), so the doctor reads the same policy back from a dump of them; gpuchain's own
stack keeps its operator's specs."""

from __future__ import annotations

from typing import Any

import yaml

from gpuchain.doctor.stacks import gpu_operator as op_stack
from gpuchain.doctor.stacks.inferred_policy import infer_policy
from gpuchain.doctor.structs import Snapshot
from gpuchain.kube import DAEMONSET
from gpuchain.kube.objects import Obj, name_of
from gpuchain.sim import build, parse_scenario
from gpuchain.sim.nvidia_operands import nvidia_rendered

DRIVER: Obj = {
    "metadata": {"name": "nvidia-driver-daemonset"},
    "spec": {"template": {"spec": {"containers": [{"name": "nvidia-driver-ctr", "image": "nvcr.io/nvidia/driver:1"}]}}},
}


def _pod(ds: Obj) -> dict[str, Any]:
    return ds["spec"]["template"]["spec"]


def _env(container: dict[str, Any]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def _daemonsets(stack: str, policy: dict[str, Any] | None = None) -> dict[str, Obj]:
    doc = {"name": "t", "stack": stack, "nodes": [{"name": "n1", "preset": "h100-80gb-x8"}], "policy": policy or {}}
    sim = build(parse_scenario(yaml.safe_dump(doc), "t"))
    return {name_of(d): d for d in sim.cluster.list(DAEMONSET)}


def test_driver_gets_the_manager_and_only_the_enabled_sidecars():
    spec = {
        "driver": {"rdma": {"enabled": True, "useHostMofed": True}, "manager": {"version": "v0.9.0"}},
        "gdrcopy": {"enabled": True, "version": "v2.4.4"},
        "gds": {"enabled": False},
    }
    pod = _pod(nvidia_rendered(DRIVER, state="driver", spec=spec))
    manager = pod["initContainers"][0]
    assert manager["name"] == "k8s-driver-manager"
    assert manager["image"] == "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.9.0"
    assert _env(manager)["GPU_DIRECT_RDMA_ENABLED"] == "true" and _env(manager)["USE_HOST_MOFED"] == "true"
    containers = {c["name"]: c["image"] for c in pod["containers"]}
    assert containers == {
        "nvidia-driver-ctr": "nvcr.io/nvidia/driver:1",
        "nvidia-peermem-ctr": "nvcr.io/nvidia/driver:1",
        "nvidia-gdrcopy-ctr": "nvcr.io/nvidia/cloud-native/gdrdrv:v2.4.4",
    }
    assert "initContainers" not in _pod(DRIVER), "the given DaemonSet is left as it was"


def test_toolkit_gets_cdi_and_the_policy_env_but_not_gpuchains_default_runtime_switch():
    ds = _daemonsets("gpu-operator", {"cdi": {"enabled": True, "default": True}})
    toolkit = _env(_pod(ds["nvidia-container-toolkit-daemonset"])["containers"][0])
    assert toolkit["CDI_ENABLED"] == "true" and toolkit["NVIDIA_CONTAINER_RUNTIME_MODE"] == "cdi"
    assert "NVIDIA_RUNTIME_SET_AS_DEFAULT" not in toolkit
    env = [{"name": "CONTAINERD_CONFIG", "value": "/etc/k0s/containerd.d/nvidia.toml"}]
    ds = _daemonsets("gpu-operator", {"cdi": {"enabled": False}, "toolkit": {"env": env}})
    toolkit = _env(_pod(ds["nvidia-container-toolkit-daemonset"])["containers"][0])
    assert toolkit["CONTAINERD_CONFIG"] == "/etc/k0s/containerd.d/nvidia.toml" and "CDI_ENABLED" not in toolkit


def test_the_policy_read_back_from_the_daemonsets_is_the_one_rendered():
    env = [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}]
    ds = _daemonsets("gpu-operator", {"cdi": {"enabled": True}, "devicePlugin": {"env": env}})
    lists: dict[str, list[Obj]] = {k: [] for k in ("policies", "nodes", "pods", "configmaps", "runtime_classes")}
    snapshot = Snapshot(namespace="", daemonsets=list(ds.values()), events=[], **lists)
    namespace = (next(iter(ds.values()))["metadata"]).get("namespace", "")
    inferred = infer_policy(snapshot, namespace, op_stack.DAEMONSETS, op_stack.CONTAINERS, {})
    assert inferred is not None
    spec = inferred[0]["spec"]
    assert spec["devicePlugin"]["env"] == env
    assert spec["driver"]["manager"]["image"] == "k8s-driver-manager"
    assert spec["gdrcopy"] == {"enabled": False}


def test_gpuchains_own_stack_keeps_its_operators_specs():
    ds = _daemonsets("gpuchain")
    assert all(c["name"] != "k8s-driver-manager" for d in ds.values() for c in _pod(d).get("initContainers") or [])
