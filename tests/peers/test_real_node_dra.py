"""``gpuchain dra-plugin`` on the real node (peers/node.py): the real kube-scheduler allocates a
ResourceClaim from the plugin's ResourceSlice, the real kubelet calls NodePrepareResources,
containerd injects the claim's CDI devices (stand-in device nodes, peers/stand_ins.py) and the
container sees its GPU; deleting the pod makes the kubelet call NodeUnprepareResources.

Two things the order of the steps here is for: a pod bound before the kubelet has registered the
driver fails its first try and is retried seconds later, so the test waits for the kubelet's
registration (its NotifyRegistrationStatus), not for the ResourceSlice; and the scheduler places
the pod, so it tolerates the node's not-ready taint (``busybox_pod`` does).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
from pathlib import Path

from gpuchain.dra.kinds import API_VERSION, DRIVER, device_class
from peers.node import RealNode, busybox_pod, stop_process, wait_for
from peers.stand_ins import DEV_ROOT, LIST_DEVICES, NVIDIA_MAJOR, devices_seen, gpu_stand_ins

GPUCHAIN = str(Path(sys.executable).with_name("gpuchain"))
PRESET = "h100-80gb-x8"
WANTED = 5
"""The GPU the claim selects (by its published index attribute)."""
RESOURCE = "/apis/resource.k8s.io/v1"
REGISTERED = f"registered with the kubelet as DRA driver {DRIVER}"
"""The plugin's log line when the kubelet's NotifyRegistrationStatus says it is registered."""


def gpu_uuids() -> list[str]:
    """The simulated node's GPU UUIDs by index, as ``gpuchain gpus`` reports them."""
    out = subprocess.run(
        [GPUCHAIN, "gpus", "--backend", "sim", "--preset", PRESET, "-o", "json"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return [g["uuid"] for g in json.loads(out.stdout)["gpus"]]


def test_a_claim_is_allocated_prepared_injected_and_unprepared(node: RealNode) -> None:
    # The DRA API the 1.34 peers serve: resource.k8s.io/v1 (GA), and it is the preferred version.
    group = node.api.request("GET", "/apis/resource.k8s.io")
    assert group["preferredVersion"]["groupVersion"] == API_VERSION == "resource.k8s.io/v1"
    try:
        node.api.request("POST", f"{RESOURCE}/deviceclasses", device_class())
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise
    gpu_stand_ins(node)
    kubelet_root = node.workdir / "kubelet"
    plugin = node.spawn(
        "dra-plugin",
        [GPUCHAIN, "dra-plugin", "--backend", "sim", "--preset", PRESET, "--node-name", node.name,
         "--registry-dir", str(kubelet_root / "plugins_registry"),
         "--plugin-dir", str(kubelet_root / "plugins" / DRIVER),
         "--state-dir", str(kubelet_root / "plugins" / DRIVER),
         "--cdi-dir", "/var/run/cdi", "--dev-root", DEV_ROOT, "--unlabelled-nodes", "dra"],
        env={**os.environ, "KUBECONFIG": str(node.workdir / "kubelet.kubeconfig")},
    )  # fmt: skip
    claim_uid = ""
    try:

        def registered() -> bool:
            if plugin.poll() is not None:
                raise RuntimeError(f"dra-plugin exited {plugin.returncode}:\n{node.log('dra-plugin')[-3000:]}")
            return REGISTERED in node.log("dra-plugin")

        wait_for("the kubelet's registration of the DRA driver", registered, 60)
        claim = {
            "apiVersion": API_VERSION,
            "kind": "ResourceClaim",
            "metadata": {"name": "one-gpu"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "selectors": [
                # One GPU picked by an attribute the plugin publishes, evaluated by the real scheduler.
                {"cel": {"expression": f"device.attributes['{DRIVER}'].index == {WANTED}"}}
            ]}}]}},
        }  # fmt: skip
        claim_uid = node.api.request("POST", f"{RESOURCE}/namespaces/gpu/resourceclaims", claim)["metadata"]["uid"]
        pod = busybox_pod("dra", f"echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES; {LIST_DEVICES}")
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "one-gpu"}]
        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
        node.create_pod("gpu", pod)
        done = node.wait_pod_phase("gpu", "dra", ("Succeeded", "Failed"))
        assert done["spec"]["nodeName"] == node.name and done["status"]["phase"] == "Succeeded", done["status"]

        # The scheduler's allocation: one device of our driver from this node's pool.
        allocation = node.api.request("GET", f"{RESOURCE}/namespaces/gpu/resourceclaims/one-gpu")["status"][
            "allocation"
        ]
        (result,) = allocation["devices"]["results"]
        assert (result["driver"], result["pool"], result["request"]) == (DRIVER, node.name, "gpu")
        assert result["device"] == f"gpu-{WANTED}"
        index = WANTED
        # What the container saw: that GPU's node and the control devices, and its UUID for NVIDIA's hook.
        out = node.pod_log("gpu", "dra", "main")
        assert f"NVIDIA_VISIBLE_DEVICES={gpu_uuids()[index]}" in out.splitlines()
        seen = devices_seen(out)
        assert seen[f"/dev/nvidia{index}"] == (NVIDIA_MAJOR, index)
        assert set(seen) == {f"/dev/nvidia{index}", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

        # The pod goes: the kubelet unprepares the claim, and its CDI spec and checkpoint entry go with it.
        node.delete_pod("gpu", "dra")
        spec = node.root / f"run/cdi/{DRIVER}-claim_{claim_uid}.json"  # /var/run links to /run
        checkpoint = kubelet_root / "plugins" / DRIVER / "checkpoint.json"
        wait_for(
            "NodeUnprepareResources",
            lambda: not spec.exists() and claim_uid not in checkpoint.read_text(),
            60,
        )
    finally:
        node.delete_pod("gpu", "dra")
        stop_process(plugin)
        for path in ("/namespaces/gpu/resourceclaims/one-gpu", f"/resourceslices?fieldSelector=spec.driver%3D{DRIVER}"):
            try:
                node.api.request("DELETE", RESOURCE + path)
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise
