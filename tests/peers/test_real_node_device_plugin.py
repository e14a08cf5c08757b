"""gpuchain's device plugin on a real kubelet (v1.34.4, containerd v2, runc: peers/node.py).

Everything the kubelet double in src/gpuchain/kubelet/ stands in for, asked of the real one:
registration on its kubelet.sock, the Node's capacity and allocatable, a pod given a GPU through
Allocate (the container prints what it got), and registration again after the kubelet restarts
(it wipes the socket directory) and after the plugin restarts.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from peers.node import RealNode, busybox_pod, stop_process, wait_for

GPU = "nvidia.com/gpu"
PRESET = "h100-80gb-x8"
GPUCHAIN = str(Path(sys.executable).with_name("gpuchain"))
REGISTERED = "Got registration request from device plugin with resource"
"""The kubelet's log line for each Register call it receives (pkg/kubelet/cm/devicemanager)."""


def announced(*args: str) -> dict[str, list[str]]:
    """What ``gpuchain device-plugin --list`` says these arguments serve: resource -> device ids."""
    out = subprocess.run(
        [GPUCHAIN, "device-plugin", "--backend", "sim", "--preset", PRESET, *args, "--list", "-o", "json"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return {r["resource"]: r["ids"] for r in json.loads(out.stdout)}


def registrations(node: RealNode) -> int:
    return node.log("kubelet").count(REGISTERED)


class Plugin:
    """``gpuchain device-plugin --backend sim`` on the node, serving the node's default socket directory."""

    def __init__(self, node: RealNode, *args: str) -> None:
        self.node, self.args = node, args
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = self.node.spawn(
            "device-plugin", [GPUCHAIN, "device-plugin", "--backend", "sim", "--preset", PRESET, *self.args]
        )

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            assert self.proc.returncode == 0, self.node.log("device-plugin")[-3000:]
            self.proc = None


@pytest.fixture
def plugin(node: RealNode) -> Iterator[Plugin]:
    """The plugin registered and its 8 GPUs allocatable on the Node; stopped afterwards."""
    before = registrations(node)
    p = Plugin(node)
    p.start()
    wait_for("the plugin's registration", lambda: registrations(node) > before, 60)
    node.wait_allocatable(GPU, "8")
    yield p
    p.stop()


def run_gpu_pod(node: RealNode, name: str, gpus: int = 1, resource: str = GPU) -> str:
    """Run a pod asking for ``gpus`` of ``resource`` on the node; what its container printed."""
    pod = busybox_pod(name, "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES", {resource: str(gpus)})
    pod["spec"]["nodeName"] = node.name
    node.create_pod("gpu", pod)
    try:
        done = node.wait_pod_phase("gpu", name, ("Succeeded", "Failed"))
        assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"])
        return node.pod_log("gpu", name, "main")
    finally:
        node.delete_pod("gpu", name)


def visible(output: str) -> list[str]:
    match = re.search(r"^NVIDIA_VISIBLE_DEVICES=(.*)$", output, re.M)
    assert match, output
    return match.group(1).split(",")


def test_registration_gives_the_node_its_gpus(node: RealNode, plugin: Plugin) -> None:
    assert node.capacity(GPU) == "8"
    assert node.allocatable(GPU) == "8"
    assert (node.device_plugins / "nvidia-gpu.sock").is_socket()


def test_a_pod_gets_the_gpu_allocate_chose(node: RealNode, plugin: Plugin) -> None:
    ids = announced()[GPU]
    seen = visible(run_gpu_pod(node, "one-gpu"))
    assert len(seen) == 1 and seen[0] in ids
    two = visible(run_gpu_pod(node, "two-gpus", gpus=2))
    assert len(two) == 2 and set(two) <= set(ids)
    # The kubelet's device-manager checkpoint records what it allocated to whom (now released).
    checkpoint = json.loads((node.device_plugins / "kubelet_internal_checkpoint").read_text())
    assert sorted(checkpoint["Data"]["RegisteredDevices"][GPU]) == sorted(ids)


def test_the_plugin_registers_again_after_a_kubelet_restart(node: RealNode, plugin: Plugin) -> None:
    before = registrations(node)
    node.restart_kubelet()
    # The new kubelet deletes every socket in the directory, the plugin's too: it must see that,
    # serve again and register with the new kubelet.sock.
    wait_for("the plugin's registration with the new kubelet", lambda: registrations(node) > before, 60)
    wait_for("the plugin's socket served again", lambda: (node.device_plugins / "nvidia-gpu.sock").is_socket(), 30)
    node.wait_allocatable(GPU, "8")
    assert len(visible(run_gpu_pod(node, "after-kubelet-restart"))) == 1


def test_a_restarted_plugin_registers_again(node: RealNode, plugin: Plugin) -> None:
    plugin.stop()
    assert not (node.device_plugins / "nvidia-gpu.sock").exists()
    before = registrations(node)
    plugin.start()
    wait_for("the restarted plugin's registration", lambda: registrations(node) > before, 60)
    node.wait_allocatable(GPU, "8")
    assert len(visible(run_gpu_pod(node, "after-plugin-restart"))) == 1
