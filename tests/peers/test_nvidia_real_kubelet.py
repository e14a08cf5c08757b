"""NVIDIA's device plugin v0.18.0 and `gpuchain device-plugin` on the same real kubelet.

The plugins take turns on the real node (peers/node.py: kubelet v1.37.2, containerd v2), NVIDIA's
on go-nvml's DGX A100 mock made to match gpuchain's `a100-40gb-x8` preset (peers/dgxa100.py), each
with the same config file. For each, the test records what the kubelet made of it: the Node's
capacity and allocatable, the devices the kubelet's device manager checkpointed as registered,
and for a pod asking for two devices, the ids the kubelet chose (it asks the plugin's
GetPreferredAllocation first), the Allocate answer it checkpointed with them (envs, mounts,
device specs, annotations) and what the container saw. The two records must be equal, with one
allowance: the kubelet offers the available devices in Go's map order, and among devices its
policy ranks equal NVIDIA's GetPreferredAllocation takes whichever comes first (on a DGX A100
GPUs 0-1, 2-3, 4-5 and 6-7 are equally good pairs), so the chosen devices are compared by their
number, the GPUs they spread over and, for whole GPUs, the links between them (for replicas
NVIDIA's policy weighs only how used each GPU is), and in every answer the chosen GPUs are named
by their rank among the chosen, by index, in any order (both list them in the order of the
kubelet's Allocate request, which is map order too). (test_nvidia_plugin_peer.py
makes the same comparison on more configs against the kubelet double, with sorted offers.)
"""

from __future__ import annotations

import base64
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuchain.gpu.model import GpuLink
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2 as pb
from peers.binaries import peer_or_skip
from peers.dgxa100 import PLUGIN, PRESET, inventory, needs_root, nvidia_env, on_dgxa100
from peers.node import RealNode, busybox_pod, stop_process, wait_for

GPUCHAIN = str(Path(sys.executable).with_name("gpuchain"))
CONFIGS = {
    "envvar": ("version: v1\n", "nvidia.com/gpu", 8),
    "volume-mounts": ("version: v1\nflags:\n  plugin:\n    deviceListStrategy: volume-mounts\n", "nvidia.com/gpu", 8),
    "time-slicing-renamed": (
        "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
        "      - name: nvidia.com/gpu\n        replicas: 2\n",
        "nvidia.com/gpu.shared",
        16,
    ),
}
"""Config file both plugins read, the resource it gives, and its count."""
SEEN = "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES; ls /var/run/nvidia-container-devices 2>/dev/null || true"
"""What the container prints: the env the runtime reads, and the device-list mounts."""


def _checkpoint(node: RealNode) -> dict[str, Any]:
    return json.loads((node.device_plugins / "kubelet_internal_checkpoint").read_text())["Data"]


def _observe(node: RealNode, name: str, resource: str) -> dict[str, object]:
    """What the kubelet made of the plugin now serving ``resource``, and of a pod asking for two."""
    seen: dict[str, object] = {"capacity": node.capacity(resource), "allocatable": node.allocatable(resource)}
    seen["registered"] = sorted(_checkpoint(node)["RegisteredDevices"][resource])
    pod = busybox_pod(name, SEEN, {resource: "2"})
    pod["spec"]["nodeName"] = node.name
    uid = node.create_pod("gpu", pod)["metadata"]["uid"]
    try:
        done = node.wait_pod_phase("gpu", name, ("Succeeded", "Failed"))
        assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"])
        output = node.pod_log("gpu", name, "main")
        (entry,) = [e for e in _checkpoint(node)["PodDeviceEntries"] if e["PodUID"] == uid]
    finally:
        node.delete_pod("gpu", name)
    chosen = [i for ids in entry["DeviceIDs"].values() for i in ids]
    index = {g.uuid: g.index for g in inventory().gpus}
    gpus = sorted({i.split("::")[0] for i in chosen}, key=index.__getitem__)
    inv = inventory()
    seen["chosen"] = {"ids": len(chosen), "GPUs": len(gpus)}
    if not any("::" in i for i in chosen):  # whole GPUs: NVIDIA's policy weighs their links (replicas: use only)
        seen["chosen"]["links between them"] = sorted(
            _link(inv.link(index[a], index[b])) for n, a in enumerate(gpus) for b in gpus[n + 1 :]
        )
    answer = pb.ContainerAllocateResponse.FromString(base64.b64decode(entry["AllocResp"]))
    allocated = {
        "envs": dict(answer.envs),
        "mounts": [(m.container_path, m.host_path, m.read_only) for m in answer.mounts],
        "devices": [(d.container_path, d.host_path, d.permissions) for d in answer.devices],
        "annotations": dict(answer.annotations),
        "container output": output,
    }
    text = json.dumps(allocated, sort_keys=True)
    for rank, gpu in enumerate(gpus):  # by GPU index
        text = text.replace(gpu, f"<chosen GPU {rank}>")
    named = json.loads(text)
    seen.update({k: sorted(v) if isinstance(v, list) else v for k, v in named.items()})
    # Both list the GPUs in the order of the Allocate request, which the kubelet makes in map order.
    seen["envs"] = {k: ",".join(sorted(v.split(","))) for k, v in named["envs"].items()}
    seen["container output"] = sorted(re.split(r"[\n,=]", named["container output"]))
    return seen


def _link(link: GpuLink | None) -> str:
    """How two chosen GPUs are connected, without which two they are."""
    return "none" if link is None else f"{link.level.name} with {link.nvlinks} NVLinks"


def _serve(node: RealNode, name: str, argv: list[str], env: dict[str, str] | None, resource: str, count: int) -> Any:
    """Start a plugin on the node and wait until the Node has its ``count`` devices allocatable."""
    proc = node.spawn(name, argv, env=env)

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited {proc.returncode}:\n{node.log(name)[-3000:]}")
        return node.allocatable(resource) == str(count)

    try:
        wait_for(f"{name}'s {count} {resource} allocatable", up, 60)
    except BaseException:
        stop_process(proc)
        raise
    return proc


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_the_real_kubelet_sees_the_same_from_both_plugins(node: RealNode, config: str, tmp_path: Path) -> None:
    binary = peer_or_skip(PLUGIN)
    needs_root()
    text, resource, count = CONFIGS[config]
    cfg = tmp_path / "config.yaml"
    cfg.write_text(text)
    nvidia_argv = on_dgxa100([str(binary), "--config-file", str(cfg)], tmp_path)
    ours_argv = [GPUCHAIN, "device-plugin", "--backend", "sim", "--preset", PRESET, "--config", str(cfg)]
    seen = {}
    for who, argv, env in (("nvidia", nvidia_argv, nvidia_env()), ("gpuchain", ours_argv, None)):
        proc = _serve(node, f"{who}-{config}", argv, env, resource, count)
        try:
            seen[who] = _observe(node, f"{who}-{config}", resource)
        finally:
            stop_process(proc)
        assert proc.returncode in (0, -15), node.log(f"{who}-{config}")[-3000:]
        # The next plugin must find the kubelet's view of this one gone: nothing allocatable.
        wait_for(f"{who}'s {resource} gone from allocatable", lambda: node.allocatable(resource) == "0", 60)
    # The comparison means something only if NVIDIA's answer reached the container.
    assert seen["nvidia"]["capacity"] == str(count)
    assert "<chosen GPU 0>" in seen["nvidia"]["container output"], seen["nvidia"]  # type: ignore[operator]
    assert seen["nvidia"] == seen["gpuchain"]
