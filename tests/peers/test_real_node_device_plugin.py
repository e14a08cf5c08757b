"""gpuchain's device plugin on a real kubelet (v1.37.2, containerd v2, runc: peers/node.py).

Everything the kubelet double in src/gpuchain/kubelet/ stands in for, asked of the real one:
registration on its kubelet.sock, the Node's capacity and allocatable, a pod given a GPU through
Allocate (the container prints what it got), the device manager's checkpoint, registration again
after the kubelet restarts (it wipes the socket directory) and after the plugin restarts, a GPU an
XID made unhealthy leaving allocatable and coming back, time-slicing's shared resource, the
real scheduler placing a GPU pod by the Node's allocatable (and refusing one that does not fit),
each device list strategy (envvar, volume-mounts, and CDI by CRI field and by annotation, with
containerd injecting what the plugin's CDI spec names into the container: stand-in device nodes,
peers/stand_ins.py), and MIG's mixed strategy (a resource per profile, a pod given a MIG device).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuchain.deviceplugin.allocate import VOLUME_MOUNT_ROOT
from peers.node import RealNode, busybox_pod, stop_process, wait_for
from peers.stand_ins import DEV_ROOT, LIST_DEVICES, NVIDIA_MAJOR, devices_seen, gpu_stand_ins, make_stand_ins, minor_of

GPU = "nvidia.com/gpu"
PRESET = "h100-80gb-x8"
GPUCHAIN = str(Path(sys.executable).with_name("gpuchain"))
FAULTY = str(Path(__file__).with_name("device_plugin_with_faults.py"))
REGISTERED = "Got registration request from device plugin with resource"
"""The kubelet's log line for each Register call it receives (pkg/kubelet/cm/devicemanager)."""


def announced(*args: str, preset: str = PRESET) -> dict[str, list[str]]:
    """What ``gpuchain device-plugin --list`` says these arguments serve: resource -> device ids."""
    out = subprocess.run(
        [GPUCHAIN, "device-plugin", "--backend", "sim", "--preset", preset, *args, "--list", "-o", "json"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return {r["resource"]: r["ids"] for r in json.loads(out.stdout)}


def registrations(node: RealNode) -> int:
    return node.log("kubelet").count(REGISTERED)


class Plugin:
    """``gpuchain device-plugin --backend sim`` on the node, serving the node's default socket directory.

    With ``faults``, the same command through peers/device_plugin_with_faults.py, and ``fault()``
    injects into its simulated GPUs.
    """

    def __init__(self, node: RealNode, *args: str, faults: bool = False, preset: str = PRESET) -> None:
        self.node, self.args, self.preset = node, args, preset
        self.proc: subprocess.Popen | None = None
        self.fifo: Path | None = None
        if faults:
            self.fifo = node.workdir / f"faults-{os.getpid()}-{id(self)}"
            os.mkfifo(self.fifo)

    def start(self, resource: str = GPU, count: str = "8") -> None:
        """Start it and wait for its registration and ``count`` of ``resource`` allocatable on the Node."""
        before = registrations(self.node)
        args = ["--backend", "sim", "--preset", self.preset, *self.args]
        if self.fifo is not None:
            argv = [sys.executable, FAULTY, str(self.fifo), *args]
        else:
            argv = [GPUCHAIN, "device-plugin", *args]
        self.proc = self.node.spawn("device-plugin", argv)
        try:
            wait_for("the plugin's registration", lambda: registrations(self.node) > before or self._exited(), 60)
            self.node.wait_allocatable(resource, count)
        except BaseException:
            stop_process(self.proc)  # the next test's plugin must not meet this one on the socket
            self.proc = None
            raise

    def _exited(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(
                f"the device plugin exited with {self.proc.returncode}:\n{self.node.log('device-plugin')[-3000:]}"
            )
        return False

    def fault(self, line: str) -> None:
        assert self.fifo is not None
        fifo = self.fifo
        # A FIFO opens for writing once its reader has it open (ENXIO before): poll, never block.
        fd = wait_for(
            "the plugin's fault reader", lambda: os.open(fifo, os.O_WRONLY | os.O_NONBLOCK) or self._exited(), 30
        )
        with os.fdopen(fd, "w") as out:
            out.write(line + "\n")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            assert self.proc.returncode == 0, self.node.log("device-plugin")[-3000:]
            self.proc = None


@pytest.fixture
def plugin(node: RealNode) -> Iterator[Plugin]:
    """The plugin registered and its 8 GPUs allocatable on the Node; stopped afterwards."""
    p = Plugin(node)
    p.start()
    yield p
    p.stop()


def run_gpu_pod(node: RealNode, name: str, gpus: int = 1, resource: str = GPU, script: str = "") -> str:
    """Run a pod asking for ``gpus`` of ``resource`` on the node; what its container printed
    (``NVIDIA_VISIBLE_DEVICES``, then what ``script`` prints)."""
    pod = busybox_pod(
        name, f"echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES; {script or 'true'}", {resource: str(gpus)}
    )
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
    # The kubelet's device-manager checkpoint holds the devices the plugin registered.
    checkpoint = json.loads((node.device_plugins / "kubelet_internal_checkpoint").read_text())
    assert sorted(checkpoint["Data"]["RegisteredDevices"][GPU]) == sorted(ids)


def test_the_plugin_registers_again_after_a_kubelet_restart(node: RealNode, plugin: Plugin) -> None:
    # A socket of someone else's in the directory: the starting kubelet deletes every socket there
    # (why the node has its own mount namespace), the plugin's included.
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(str(node.device_plugins / "someone-else.sock"))
        before = registrations(node)
        node.restart_kubelet()
        wait_for("the new kubelet's sweep", lambda: not (node.device_plugins / "someone-else.sock").exists(), 60)
    # The plugin must see its socket go, serve again and register with the new kubelet.sock.
    wait_for("the plugin's registration with the new kubelet", lambda: registrations(node) > before, 60)
    wait_for("the plugin's socket served again", lambda: (node.device_plugins / "nvidia-gpu.sock").is_socket(), 30)
    node.wait_allocatable(GPU, "8")
    assert len(visible(run_gpu_pod(node, "after-kubelet-restart"))) == 1


def test_a_restarted_plugin_registers_again(node: RealNode, plugin: Plugin) -> None:
    plugin.stop()
    assert not (node.device_plugins / "nvidia-gpu.sock").exists()
    # The kubelet keeps the resource in capacity for a grace period, with nothing allocatable.
    node.wait_allocatable(GPU, "0")
    assert node.capacity(GPU) == "8"
    plugin.start()
    assert len(visible(run_gpu_pod(node, "after-plugin-restart"))) == 1


def test_an_unhealthy_gpu_leaves_allocatable_and_comes_back(node: RealNode) -> None:
    plugin = Plugin(node, faults=True)
    plugin.start()
    try:
        ids = announced()[GPU]
        plugin.fault("xid 2 79")  # fallen off the bus: unhealthy
        node.wait_allocatable(GPU, "7")
        assert node.capacity(GPU) == "8"
        # Every GPU a pod can get now is a healthy one: ask for all seven.
        seven = visible(run_gpu_pod(node, "seven-healthy", gpus=7))
        assert sorted(seven) == sorted(set(ids) - {ids[2]})
        plugin.fault("recover 2")
        node.wait_allocatable(GPU, "8")
    finally:
        plugin.stop()


def test_time_slicing_shares_each_gpu_under_the_renamed_resource(node: RealNode, tmp_path: Path) -> None:
    config = tmp_path / "time-slicing.yaml"
    config.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
        "    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
    )
    shared = "nvidia.com/gpu.shared"
    replicas = announced("--config", str(config))[shared]
    plugin = Plugin(node, "--config", str(config))
    plugin.start(shared, "32")
    try:
        seen = visible(run_gpu_pod(node, "one-replica", resource=shared))
        # The container is given the GPU itself: a replica's id (UUID::N) names no device.
        assert len(seen) == 1 and f"{seen[0]}::0" in replicas
    finally:
        plugin.stop()


def test_the_real_scheduler_places_a_gpu_pod_by_the_nodes_allocatable(node: RealNode, plugin: Plugin) -> None:
    pod = busybox_pod("scheduled", "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES", {GPU: "1"})
    node.create_pod("gpu", pod)
    too_big = busybox_pod("too-big", "true", {GPU: "9"})
    node.create_pod("gpu", too_big)
    try:
        done = node.wait_pod_phase("gpu", "scheduled", ("Succeeded", "Failed"))
        assert done["spec"]["nodeName"] == node.name and done["status"]["phase"] == "Succeeded"
        assert len(visible(node.pod_log("gpu", "scheduled", "main"))) == 1

        def unschedulable() -> str | None:
            for c in node.get_pod("gpu", "too-big").get("status", {}).get("conditions", []):
                if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable":
                    return str(c.get("message", ""))
            return None

        # The symptom of a broken link 3 (DESIGN.md), as the real scheduler words it.
        assert "Insufficient nvidia.com/gpu" in wait_for("the 9-GPU pod refused", unschedulable, 60)
    finally:
        node.delete_pod("gpu", "scheduled")
        node.delete_pod("gpu", "too-big")


def strategy_config(tmp_path: Path, strategy: str, **flags: str) -> Path:
    """A config file selecting ``deviceListStrategy`` (and further top-level ``flags``) with the
    driver's /dev at the stand-ins' root (peers/stand_ins.py)."""
    config = tmp_path / f"{strategy}.yaml"
    config.write_text(
        json.dumps({"flags": {**flags, "nvidiaDevRoot": DEV_ROOT, "plugin": {"deviceListStrategy": strategy}}})
    )
    return config


PLUGIN_SPEC = "run/cdi/k8s.device-plugin.nvidia.com-gpu.json"
"""The plugin's spec in the node's /var/run/cdi, under ``node.root``: /var/run is a link to /run, and
an absolute link read through /proc/PID/root leads to the machine's /run, not the node's."""

CONTROL = {p: (NVIDIA_MAJOR, minor_of(p)) for p in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")}


def test_volume_mounts_name_the_gpu_by_mounted_file(node: RealNode, tmp_path: Path) -> None:
    plugin = Plugin(node, "--config", str(strategy_config(tmp_path, "volume-mounts")))
    plugin.start()
    try:
        out = run_gpu_pod(node, "volume-mounts", script=f"ls {VOLUME_MOUNT_ROOT}; {LIST_DEVICES}")
    finally:
        plugin.stop()
    assert visible(out) == [VOLUME_MOUNT_ROOT]
    listed = [line for line in out.splitlines()[1:] if not line.startswith("DEVICE")]
    assert len(listed) == 1 and listed[0] in announced()[GPU]
    # The runtime's NVIDIA hook reads those names to inject the GPU; runc alone injects nothing.
    assert devices_seen(out) == {}


@pytest.mark.parametrize(("strategy", "gpus"), [("cdi-cri", 1), ("cdi-annotations", 2)])
def test_containerd_injects_the_gpus_the_cdi_names_refer_to(
    node: RealNode, tmp_path: Path, strategy: str, gpus: int
) -> None:
    gpu_stand_ins(node)
    plugin = Plugin(node, "--config", str(strategy_config(tmp_path, strategy)))
    plugin.start()
    try:
        # The spec the plugin wrote, in the directory containerd reads (enable_cdi, cdi_spec_dirs).
        spec = json.loads((node.root / PLUGIN_SPEC).read_text())
        assert spec["kind"] == "k8s.device-plugin.nvidia.com/gpu"
        out = run_gpu_pod(node, strategy, gpus=gpus, script=LIST_DEVICES)
    finally:
        plugin.stop()
    assert visible(out) == ["void"]  # the spec's: NVIDIA's runtime hook must add nothing more
    seen = devices_seen(out)
    gpu_nodes = {p: n for p, n in seen.items() if p not in CONTROL}
    assert {p: n for p, n in seen.items() if p in CONTROL} == CONTROL
    assert len(gpu_nodes) == gpus
    assert all(n == (NVIDIA_MAJOR, int(p.removeprefix("/dev/nvidia"))) for p, n in gpu_nodes.items()), seen


MIG_PRESET = "h100-80gb-x8-mig-mixed"


def test_mig_mixed_announces_each_profile_and_a_pod_gets_its_mig_device(node: RealNode, tmp_path: Path) -> None:
    config = strategy_config(tmp_path, "cdi-cri", migStrategy="mixed")
    expected = announced("--config", str(config), preset=MIG_PRESET)
    assert set(expected) == {GPU, "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"}
    plugin = Plugin(node, "--config", str(config), preset=MIG_PRESET)
    plugin.start("nvidia.com/mig-1g.10gb", str(len(expected["nvidia.com/mig-1g.10gb"])))
    try:
        for resource, ids in expected.items():
            node.wait_allocatable(resource, str(len(ids)))
            assert (node.device_plugins / f"nvidia-{resource.split('/')[1]}.sock").is_socket()
        spec = json.loads((node.root / PLUGIN_SPEC).read_text())
        nodes = {d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]}
        make_stand_ins(node, [*nodes["all"], *CONTROL])
        out = run_gpu_pod(node, "mig-slice", resource="nvidia.com/mig-2g.20gb", script=LIST_DEVICES)
    finally:
        plugin.stop()
    seen = devices_seen(out)
    (mig,) = [name for name in nodes if name != "all" and set(nodes[name]) <= set(seen)]
    assert mig in expected["nvidia.com/mig-2g.20gb"]
    # Its parent GPU's node and its GPU-instance and compute-instance capability devices, nothing else.
    assert set(seen) == {*nodes[mig], *CONTROL}
    assert len(nodes[mig]) == 3 and nodes[mig][0].startswith("/dev/nvidia")
