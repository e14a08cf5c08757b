"""`gpuchain node-agent` on a real kubelet (peers/node.py): a role crashing in a loop leaves the device
plugin serving. The kubelet registers the plugin, gives the Node its GPUs and runs a pod given one
through Allocate while another role of the same process fails again and again."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from peers.node import RealNode, stop_process, wait_for
from peers.test_real_node_device_plugin import GPU, REGISTERED, run_gpu_pod, visible

GPUCHAIN = str(Path(sys.executable).with_name("gpuchain"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metrics(node: RealNode, port: int) -> str:
    """The agent's /metrics, asked from inside the node's network namespace (where it listens)."""
    fetch = f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/metrics').read().decode())"
    return node.run([sys.executable, "-c", fetch])


def test_a_role_crashing_in_a_loop_leaves_the_device_plugin_serving_the_real_kubelet(node: RealNode) -> None:
    port = _free_port()
    before = node.log("kubelet").count(REGISTERED)
    argv = [GPUCHAIN, "node-agent", "--backend", "sim", "--memory-cluster", "--roles", "device-plugin,mig-manager"]
    argv += ["--default-mig-config", "no-such-layout", "--metrics-address", "127.0.0.1", "--metrics-port", str(port)]
    argv += ["--nvml-release-dir", ""]
    proc = node.spawn("node-agent", argv)
    try:
        wait_for("the plugin's registration", lambda: node.log("kubelet").count(REGISTERED) > before, 60)
        node.wait_allocatable(GPU, "8")
        in_a_row = "(failed 3 times in a row; the other roles keep serving)"
        wait_for("the MIG manager failing three times in a row", lambda: in_a_row in node.log("node-agent"), 60)
        # The plugin counts as up once it has seen the kubelet take its first list, which the
        # kubelet's log and the Node's allocatable do not wait for: read until both are shown.
        wanted = (
            'gpuchain_node_agent_role_failing{role="mig-manager"} 1.0',
            'gpuchain_node_agent_role_up{role="device-plugin"} 1.0',
        )

        def shown() -> bool:
            text = _metrics(node, port)
            return all(line in text for line in wanted)

        wait_for("the roles' state on /metrics", shown, 60, 0.5)
        assert proc.poll() is None, node.log("node-agent")[-3000:]

        got = visible(run_gpu_pod(node, "agent-gpu-pod"))  # Allocate, through the real kubelet
        assert len(got) == 1 and got[0].startswith("GPU-")
        assert node.allocatable(GPU) == "8"
        assert 'gpuchain_node_agent_role_failures_total{role="device-plugin"} 0\n' in _metrics(node, port)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, node.log("node-agent")[-3000:]
    assert "role mig-manager cannot start" in node.log("node-agent")
