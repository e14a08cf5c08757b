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
from typing import Any

from fakes.mps import daemon_pid, daemon_running, record

from gpuchain.common.labels import MIG_CONFIG, MIG_CONFIG_STATE, MIG_CONFIG_STATE_REASON
from gpuchain.dra.kinds import API_VERSION, DRIVER, WHOLE_GPU_CLASS_NAME, device_class, whole_gpu_class
from gpuchain.dra.taints import NO_EXECUTE, TAINT_KEY
from gpuchain.gpu.mps import HEALTH_INTERVAL
from gpuchain.gpu.quarantine import QUARANTINE_ANNOTATION, encode_quarantine
from gpuchain.kube.allocator import device_plugin_announces
from gpuchain.kube.gpu_resources import GPU as GPU_RESOURCE
from gpuchain.kube.mig_owner import DRA_MIG_GPUS
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


def start_plugin(node: RealNode, *flags: str) -> subprocess.Popen[bytes]:
    """``gpuchain dra-plugin`` on the node (simulated GPUs, stand-in device nodes), once the kubelet
    has registered it. The node has no device plugin: its GPUs are DRA's (``--unlabelled-nodes dra``)."""
    try:
        node.api.request("POST", f"{RESOURCE}/deviceclasses", device_class())
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise
    gpu_stand_ins(node)
    announced = device_plugin_announces(node.api.request("GET", f"/api/v1/nodes/{node.name}"))
    if announced:
        # A device plugin test before this one on the shared node: the kubelet keeps its resources in
        # the Node's capacity for the device manager's grace period (5 min) after the plugin went, and
        # the DRA driver publishes nothing while a device plugin announces GPUs (kube.allocator). A
        # kubelet restart zeroes the extended resources (kubelet reconcileExtendedResource) and brings
        # the checkpointed endpoints back with no device.
        node.restart_kubelet()
        wait_for(
            f"the Node's capacity to drop the device plugin's {sorted(announced)}",
            lambda: not device_plugin_announces(node.api.request("GET", f"/api/v1/nodes/{node.name}")),
            60,
        )
    kubelet_root = node.workdir / "kubelet"
    # The log file is the node's for the session (appended to): an earlier test's plugin already wrote
    # its registration line there, so only what this one writes counts.
    earlier = len(node.log("dra-plugin"))
    plugin = node.spawn(
        "dra-plugin",
        [GPUCHAIN, "dra-plugin", "--backend", "sim", "--preset", PRESET, "--node-name", node.name,
         "--registry-dir", str(kubelet_root / "plugins_registry"),
         "--plugin-dir", str(kubelet_root / "plugins" / DRIVER),
         "--state-dir", str(kubelet_root / "plugins" / DRIVER),
         "--cdi-dir", "/var/run/cdi", "--dev-root", DEV_ROOT, "--unlabelled-nodes", "dra", *flags],
        env={**os.environ, "KUBECONFIG": str(node.workdir / "kubelet.kubeconfig")},
    )  # fmt: skip

    def registered() -> bool:
        if plugin.poll() is not None:
            raise RuntimeError(f"dra-plugin exited {plugin.returncode}:\n{node.log('dra-plugin')[-3000:]}")
        return REGISTERED in node.log("dra-plugin")[earlier:]

    try:
        wait_for("the kubelet's registration of the DRA driver", registered, 60)
    except BaseException:
        stop_process(plugin)
        raise
    return plugin


def create_claim(
    node: RealNode, name: str, index: int, capacity: dict[str, str] | None = None, also: str = "true"
) -> str:
    """A ResourceClaim in namespace gpu for a device of the GPU with this index (``capacity``: the part
    of it the claim asks for, on a node publishing shares; ``also``: a CEL condition the device must
    meet as well); its UID."""
    claim: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "selectors": [
            # One GPU picked by an attribute the plugin publishes, evaluated by the real scheduler.
            {"cel": {"expression": f"device.attributes['{DRIVER}'].index == {index} && ({also})"}}
        ]}}]}},
    }  # fmt: skip
    if capacity:
        claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": capacity}
    return str(node.api.request("POST", f"{RESOURCE}/namespaces/gpu/resourceclaims", claim)["metadata"]["uid"])


def listed_output(node: RealNode, *, pod: str, container: str = "main") -> str:
    """What a container of pod ``gpu/<pod>`` wrote, once it has printed ``LISTED``: the scripts here end
    what they show with that line, then sleep on, so their claims stay prepared while the test reads."""

    def listed() -> str | None:
        out = node.pod_log("gpu", pod, container)
        return out if "LISTED" in out.splitlines() else None

    return wait_for(f"the output of {pod}/{container}", listed, 30)


def claim_pod(name: str, claim: str, script: str) -> dict[str, Any]:
    """A busybox pod whose container uses the ResourceClaim ``claim``."""
    pod = busybox_pod(name, script)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return pod


def test_a_claim_is_allocated_prepared_injected_and_unprepared(node: RealNode) -> None:
    # The DRA API the 1.37 peers serve: resource.k8s.io/v1 (GA), and it is the preferred version.
    group = node.api.request("GET", "/apis/resource.k8s.io")
    assert group["preferredVersion"]["groupVersion"] == API_VERSION == "resource.k8s.io/v1"
    kubelet_root = node.workdir / "kubelet"
    plugin = start_plugin(node)
    claim_uid = ""
    try:
        claim_uid = create_claim(node, "one-gpu", WANTED)
        # kept running while the claim is read: once its pod is done, the ResourceClaim controller
        # takes the pod off the claim and deallocates it
        script = f"echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES; {LIST_DEVICES}; echo LISTED; sleep 3600"
        node.create_pod("gpu", claim_pod("dra", "one-gpu", script))
        running = node.wait_pod_phase("gpu", "dra", ("Running",))
        assert running["spec"]["nodeName"] == node.name
        listed_output(node, pod="dra")

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
        delete_resources(node, "/namespaces/gpu/resourceclaims/one-gpu")


def test_two_shares_of_one_gpu_run_side_by_side_each_with_its_limits(node: RealNode) -> None:
    """With --gpu-shares (DRAConsumableCapacity on in the peers, beta in 1.37), two claims for part
    of one GPU's memory are allocated the same GPU: the first pod still runs while the second is
    scheduled, prepared and run, each container sees the GPU with its own MPS limits, and each
    claim is unprepared when its pod goes."""
    index, memory = 4, 81559  # the preset's H100 80GB: 81559 MiB, 132 SMs
    uuid = gpu_uuids()[index]
    script = "echo LIMIT=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT THREADS=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
    plugin = start_plugin(node, "--gpu-shares")
    try:
        create_claim(node, "share-a", index, {"memory": f"{memory // 2}Mi"})
        node.create_pod("gpu", claim_pod("share-a", "share-a", f"{script}; sleep 3600"))
        node.wait_pod_phase("gpu", "share-a", ("Running",))
        b_uid = create_claim(node, "share-b", index, {"memory": "20Gi", "multiprocessors": "33"})
        visible = "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"
        # kept running while the claims are read: the ResourceClaim controller releases a done pod's claim
        node.create_pod("gpu", claim_pod("share-b", "share-b", f"{visible}; {script}; echo LISTED; sleep 3600"))
        node.wait_pod_phase("gpu", "share-b", ("Running",))
        listed_output(node, pod="share-b")
        assert node.get_pod("gpu", "share-a")["status"]["phase"] == "Running"  # side by side on one GPU

        results = {
            name: node.api.request("GET", f"{RESOURCE}/namespaces/gpu/resourceclaims/{name}")["status"]["allocation"][
                "devices"
            ]["results"][0]
            for name in ("share-a", "share-b")
        }
        assert {r["device"] for r in results.values()} == {f"gpu-{index}"}
        assert results["share-a"]["shareID"] != results["share-b"]["shareID"]
        assert f"LIMIT=0={memory // 2}M THREADS=" in node.pod_log("gpu", "share-a", "main").splitlines()
        out = node.pod_log("gpu", "share-b", "main").splitlines()
        assert f"NVIDIA_VISIBLE_DEVICES={uuid}" in out and "LIMIT=0=20480M THREADS=25" in out

        node.delete_pod("gpu", "share-b")
        spec = node.root / f"run/cdi/{DRIVER}-claim_{b_uid}.json"
        wait_for("NodeUnprepareResources of the second share", lambda: not spec.exists(), 60)
    finally:
        for pod in ("share-a", "share-b"):
            node.delete_pod("gpu", pod)
        stop_process(plugin)
        delete_resources(node, "/namespaces/gpu/resourceclaims/share-a", "/namespaces/gpu/resourceclaims/share-b")


def delete_resources(node: RealNode, *paths: str) -> None:
    """DELETE each ``resource.k8s.io/v1`` path (a claim, a class) and this driver's slices; gone already is fine."""
    for path in (*paths, f"/resourceslices?fieldSelector=spec.driver%3D{DRIVER}"):
        try:
            node.api.request("DELETE", RESOURCE + path)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise


def test_a_mig_profile_claim_gets_a_mig_device_made_on_prepare_and_destroyed_after(node: RealNode) -> None:
    """With --partitionable-mig (the peers' API server takes the counter slices, DRAPartitionableDevices
    beta in 1.37), a claim for a 1g.10gb MIG device on a GPU whose MIG mode is off: the real scheduler
    allocates one of its placements by the counters, the kubelet's Prepare makes that MIG device, the
    container sees the GPU's node and the MIG device's UUID, and the pod's deletion destroys it."""
    index = 6
    kubelet_root = node.workdir / "kubelet"
    plugin = start_plugin(node, "--partitionable-mig")
    earlier = len(node.log("dra-plugin"))
    try:
        attrs = f"device.attributes['{DRIVER}']"
        uid = create_claim(node, "mig", index, also=f"{attrs}.type == 'mig' && {attrs}.migProfile == '1g.10gb'")
        visible = "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"
        # kept running, so the claim stays prepared (a finished pod's claim is unprepared at once)
        node.create_pod("gpu", claim_pod("mig", "mig", f"{visible}; {LIST_DEVICES}; echo LISTED; sleep 3600"))
        node.wait_pod_phase("gpu", "mig", ("Running",))
        out = listed_output(node, pod="mig")

        claim = node.api.request("GET", f"{RESOURCE}/namespaces/gpu/resourceclaims/mig")
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["pool"] == node.name and result["device"].startswith(f"gpu-{index}-mig-1g10gb-")
        checkpoint = kubelet_root / "plugins" / DRIVER / "checkpoint.json"
        (device,) = json.loads(checkpoint.read_text())["claims"][uid]["devices"]
        assert device["device"] == result["device"] and device["createdInstance"]["profile"] == "1g.10gb"
        mig_uuid = device["uuid"]
        assert mig_uuid.startswith("MIG-")
        assert f"created MIG device {mig_uuid} (1g.10gb)" in node.log("dra-plugin")[earlier:]
        assert f"NVIDIA_VISIBLE_DEVICES={mig_uuid}" in out.splitlines()
        assert devices_seen(out)[f"/dev/nvidia{index}"] == (NVIDIA_MAJOR, index)

        node.delete_pod("gpu", "mig")
        spec = node.root / f"run/cdi/{DRIVER}-claim_{uid}.json"
        wait_for("NodeUnprepareResources", lambda: not spec.exists() and uid not in checkpoint.read_text(), 60)
        destroyed = f"(1g.10gb at slice {device['createdInstance']['start']}) of GPU {index}"
        assert destroyed in node.log("dra-plugin")[earlier:]
    finally:
        node.delete_pod("gpu", "mig")
        stop_process(plugin)
        delete_resources(node, "/namespaces/gpu/resourceclaims/mig")


H100_PROFILES = ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
"""Every MIG profile of the H100 80GB (gpu/mig_catalog.yaml, from NVIDIA's MIG user guide), so every
profile of the node's preset."""


def test_every_mig_profile_of_the_gpu_is_allocated_made_seen_and_destroyed(node: RealNode) -> None:
    """One claim per MIG profile of the H100 (each on its own GPU, each in its own container of one
    pod): the real scheduler allocates a placement of each from the counters, the kubelet's Prepare
    makes a MIG device of exactly that profile, each container sees its own MIG device and its GPU's
    node and no other GPU's, and the pod's deletion destroys all of them."""
    plugin = start_plugin(node, "--partitionable-mig")
    earlier = len(node.log("dra-plugin"))
    kubelet_root = node.workdir / "kubelet"
    checkpoint = kubelet_root / "plugins" / DRIVER / "checkpoint.json"
    attrs = f"device.attributes['{DRIVER}']"
    visible = "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"
    claims = {f"p{index}": profile for index, profile in enumerate(H100_PROFILES)}
    try:
        uids = {
            name: create_claim(node, name, index, also=f"{attrs}.type == 'mig' && {attrs}.migProfile == '{profile}'")
            for index, (name, profile) in enumerate(claims.items())
        }
        pod = busybox_pod("profiles", "true")
        main = pod["spec"]["containers"][0]
        pod["spec"]["resourceClaims"] = [{"name": name, "resourceClaimName": name} for name in claims]
        # kept running, so the claims stay prepared (a finished pod's claims are unprepared at once)
        pod["spec"]["containers"] = [
            {**main, "name": name, "resources": {"claims": [{"name": name}]},
             "command": ["/bin/sh", "-c", f"{visible}; {LIST_DEVICES}; echo LISTED; sleep 3600"]}
            for name in claims
        ]  # fmt: skip
        node.create_pod("gpu", pod)
        node.wait_pod_phase("gpu", "profiles", ("Running",))
        prepared = json.loads(checkpoint.read_text())["claims"]
        made: dict[int, tuple[str, int]] = {}

        for index, (name, profile) in enumerate(claims.items()):
            out = listed_output(node, pod="profiles", container=name)
            claim = node.api.request("GET", f"{RESOURCE}/namespaces/gpu/resourceclaims/{name}")
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            (device,) = prepared[uids[name]]["devices"]
            assert device["device"] == result["device"] and result["device"].startswith(f"gpu-{index}-mig-")
            assert device["createdInstance"]["profile"] == profile, (name, device)
            assert f"created MIG device {device['uuid']} ({profile})" in node.log("dra-plugin")[earlier:]
            assert f"NVIDIA_VISIBLE_DEVICES={device['uuid']}" in out.splitlines()
            gpus = {path for path in devices_seen(out) if path.removeprefix("/dev/nvidia").isdigit()}
            assert gpus == {f"/dev/nvidia{index}"}, (name, gpus)
            made[index] = (profile, device["createdInstance"]["start"])

        node.delete_pod("gpu", "profiles")
        wait_for(
            "NodeUnprepareResources of every claim",
            lambda: not any(uid in checkpoint.read_text() for uid in uids.values()),
            60,
        )
        log = node.log("dra-plugin")[earlier:]
        for index, (profile, start) in made.items():
            assert f"({profile} at slice {start}) of GPU {index}" in log, profile
    finally:
        node.delete_pod("gpu", "profiles")
        stop_process(plugin)
        delete_resources(node, *(f"/namespaces/gpu/resourceclaims/{name}" for name in claims))


def test_a_plain_nvidia_gpu_pod_is_served_by_the_dra_driver_through_the_class(node: RealNode) -> None:
    """The ``nvidia.com/gpu`` bridge (the chart's ``dra.extendedResource`` DeviceClass; DRAExtendedResource
    GA in 1.37) on the real kubelet: a pod asking ``nvidia.com/gpu: 1`` the device plugin way, on a node
    with no device plugin, gets a claim the scheduler makes, the kubelet prepares it through the
    driver, and the container sees the GPU; the claim goes with the pod."""
    plugin = start_plugin(node)
    created = node.api.request("POST", f"{RESOURCE}/deviceclasses", whole_gpu_class())
    try:
        assert created["spec"]["extendedResourceName"] == GPU_RESOURCE
        visible = "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"
        # kept running while its claim is read: the ResourceClaim controller releases a done pod's claim
        script = f"{visible}; {LIST_DEVICES}; echo LISTED; sleep 3600"
        node.create_pod("gpu", busybox_pod("plain", script, {GPU_RESOURCE: "1"}))
        running = node.wait_pod_phase("gpu", "plain", ("Running",))
        listed_output(node, pod="plain")
        name = running["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
        claim = node.api.request("GET", f"{RESOURCE}/namespaces/gpu/resourceclaims/{name}")
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["driver"] == DRIVER and result["device"].startswith("gpu-")
        index = int(result["device"].removeprefix("gpu-"))
        out = node.pod_log("gpu", "plain", "main")
        assert f"NVIDIA_VISIBLE_DEVICES={gpu_uuids()[index]}" in out.splitlines()
        assert devices_seen(out)[f"/dev/nvidia{index}"] == (NVIDIA_MAJOR, index)

        node.delete_pod("gpu", "plain")
        spec = node.root / f"run/cdi/{DRIVER}-claim_{claim['metadata']['uid']}.json"
        wait_for("NodeUnprepareResources of the scheduler's claim", lambda: not spec.exists(), 60)
    finally:
        node.delete_pod("gpu", "plain")
        stop_process(plugin)
        # cluster-wide: left behind, it would send the device plugin tests' nvidia.com/gpu pods to DRA
        delete_resources(node, f"/deviceclasses/{WHOLE_GPU_CLASS_NAME}")


def quarantine(node: RealNode, uuids: list[str]) -> None:
    """Set the Node's repair loop quarantine list, as gpu-health does."""

    def edit(current: dict[str, Any]) -> None:
        annotations = current["metadata"].setdefault("annotations", {})
        value = encode_quarantine(uuids)
        if value is None:
            annotations.pop(QUARANTINE_ANNOTATION, None)
        else:
            annotations[QUARANTINE_ANNOTATION] = value

    node.edit_node(edit, "the Node's quarantine annotation")


def device_taints(node: RealNode, device: str) -> list[dict[str, Any]]:
    """The taints of one device of the plugin's live ResourceSlice, as the API server keeps them."""
    live = node.api.request("GET", f"{RESOURCE}/resourceslices/{node.name}-{DRIVER}")
    return list(next(d for d in live["spec"]["devices"] if d["name"] == device).get("taints") or [])


def test_a_tainted_device_is_not_allocated_its_pods_are_evicted_and_readmission_lifts_it(node: RealNode) -> None:
    """With --device-taints, a GPU the repair loop quarantines is tainted NoExecute in the slice (the
    API server keeps the taint: DRADeviceTaints is on in the peers, GA in 1.37): the controller
    manager evicts the pod already running on it, the real scheduler allocates it to no new claim,
    and when the loop gives the GPU back the taint goes and the waiting pod gets it."""
    uuids = gpu_uuids()
    held, wanted = 3, 2
    plugin = start_plugin(node, "--device-taints")
    try:
        create_claim(node, "held", held)
        node.create_pod("gpu", claim_pod("holder", "held", "sleep 3600"))
        node.wait_pod_phase("gpu", "holder", ("Running",))

        quarantine(node, [uuids[held], uuids[wanted]])
        taint = wait_for("the quarantined GPUs tainted", lambda: device_taints(node, f"gpu-{wanted}") or None, 60)
        assert [(t["key"], t["value"], t["effect"]) for t in taint] == [(TAINT_KEY, "quarantined", NO_EXECUTE)]
        assert taint[0]["timeAdded"]  # added by the API server: the field is served, not dropped
        assert device_taints(node, f"gpu-{held}") and not device_taints(node, "gpu-0")

        def evicted() -> bool:
            try:
                pod = node.get_pod("gpu", "holder")
            except urllib.error.HTTPError as exc:
                return exc.code == 404
            return bool(pod["metadata"].get("deletionTimestamp"))

        wait_for("the holder's eviction by the device taint eviction controller", evicted, 60)

        create_claim(node, "waiting", wanted)
        # kept running once it gets its GPU: the ResourceClaim controller releases a done pod's claim
        node.create_pod("gpu", claim_pod("waiter", "waiting", "echo got it; sleep 3600"))

        def unschedulable() -> bool:
            conditions = node.get_pod("gpu", "waiter").get("status", {}).get("conditions") or []
            return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions)

        wait_for("the scheduler finding no untainted device", unschedulable, 60)
        waiting = node.api.request("GET", f"{RESOURCE}/namespaces/gpu/resourceclaims/waiting")
        assert not waiting.get("status", {}).get("allocation")

        quarantine(node, [])  # the repair loop gives both GPUs back
        wait_for("the taint lifted", lambda: not device_taints(node, f"gpu-{wanted}"), 60)
        node.wait_pod_phase("gpu", "waiter", ("Running",))
        allocation = node.api.request("GET", f"{RESOURCE}/namespaces/gpu/resourceclaims/waiting")["status"][
            "allocation"
        ]
        assert [r["device"] for r in allocation["devices"]["results"]] == [f"gpu-{wanted}"]
    finally:
        for pod in ("holder", "waiter"):
            node.delete_pod("gpu", pod)
        quarantine(node, [])
        stop_process(plugin)
        delete_resources(node, "/namespaces/gpu/resourceclaims/held", "/namespaces/gpu/resourceclaims/waiting")


def test_shares_of_a_gpu_run_under_one_mps_daemon_whose_pipe_and_memory_their_containers_mount(
    node: RealNode, node_mps_stand_ins: Path, tmp_path: Path
) -> None:
    """With --gpu-shares --mps-root (NVIDIA's control program and nvidia-smi as the recording
    stand-ins of fakes.mps, on the plugin's PATH), the real kubelet's Prepare of the first share of
    a GPU starts that GPU's MPS control daemon; containerd gives the container, from the claim's CDI
    spec, the daemon's pipe directory at /tmp/nvidia-mps, the daemons' shared memory as its
    /dev/shm (in place of the pod's own) and the CUDA_MPS_* environment; a second share of the GPU
    is served by the same daemon, and the daemon is stopped when the last share's pod goes."""
    index = 7
    uuid = gpu_uuids()[index]
    root = node_mps_stand_ins
    started, smi = root / uuid / ".started", tmp_path / "smi"

    def script(pod: str) -> str:
        """What each container shows: its MPS environment, the pipe directory it got and the daemon
        it names; and it leaves its name in the shared memory, for the test to find on the node."""
        return (
            "env | grep ^CUDA_MPS_ | sort; ls /tmp/nvidia-mps | sed 's/^/PIPE /'; "
            "echo DAEMON $(cat /tmp/nvidia-mps/daemon.pid) $(cat /tmp/nvidia-mps/visible); "
            f"echo {pod} > /dev/shm/{pod}; echo LISTED"
        )

    def output(pod: str) -> list[str]:
        return listed_output(node, pod=pod).splitlines()

    def spec_gone(uid: str) -> bool:
        return not (node.root / f"run/cdi/{DRIVER}-claim_{uid}.json").exists()

    plugin = start_plugin(node, "--gpu-shares", "--mps-root", str(root))
    try:
        a_uid = create_claim(node, "mps-a", index, {"memory": "40Gi"})
        node.create_pod("gpu", claim_pod("mps-a", "mps-a", f"{script('mps-a')}; sleep 3600"))
        node.wait_pod_phase("gpu", "mps-a", ("Running",))
        out = output("mps-a")
        pid = daemon_pid(root, uuid)
        assert record(root, uuid)[0] == "-d" and daemon_running(pid, node.root / "proc") and started.exists()
        assert smi.read_text().splitlines() == [f"-i {uuid} -c EXCLUSIVE_PROCESS"]
        mps_env = [line for line in out if line.startswith("CUDA_MPS_")]
        assert mps_env == ["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40960M", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"]
        assert {"PIPE daemon.pid", "PIPE record", "PIPE visible"} <= set(out)  # the daemon's own directory
        assert f"DAEMON {pid} {uuid}" in out  # the daemon of the claim's GPU
        assert (root / "shm" / "mps-a").read_text() == "mps-a\n"  # its /dev/shm is the daemons'

        b_uid = create_claim(node, "mps-b", index, {"memory": "20Gi", "multiprocessors": "33"})
        node.create_pod("gpu", claim_pod("mps-b", "mps-b", script("mps-b")))
        done = node.wait_pod_phase("gpu", "mps-b", ("Succeeded", "Failed"))
        assert done["status"]["phase"] == "Succeeded", done["status"]
        out = output("mps-b")
        assert [line for line in out if line.startswith("CUDA_MPS_")] == [
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M",
            "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
        ]
        assert f"DAEMON {pid} {uuid}" in out and (root / "shm" / "mps-b").read_text() == "mps-b\n"
        assert record(root, uuid).count("-d") == 1  # the same daemon: none started for the second share

        # The second pod finished: its claim is unprepared (its spec goes first, then the daemons are
        # settled), and the first share still needs the daemon: it is asked its health again after.
        wait_for("NodeUnprepareResources of the second share", lambda: spec_gone(b_uid), 60)
        told = len(record(root, uuid))
        wait_for("the daemon's next health question", lambda: len(record(root, uuid)) > told, 3 * HEALTH_INTERVAL)
        assert "quit" not in record(root, uuid) and daemon_running(pid, node.root / "proc")

        node.delete_pod("gpu", "mps-a")
        wait_for("NodeUnprepareResources of the last share", lambda: spec_gone(a_uid), 60)
        wait_for("the daemon stopped", lambda: not started.exists(), 30)
        assert record(root, uuid)[-1] == "quit" and record(root, uuid).count("-d") == 1
        assert not daemon_running(pid, node.root / "proc")
        assert smi.read_text().splitlines() == [f"-i {uuid} -c EXCLUSIVE_PROCESS", f"-i {uuid} -c DEFAULT"]
    finally:
        for pod in ("mps-a", "mps-b"):
            node.delete_pod("gpu", pod)
        stop_process(plugin)
        delete_resources(node, "/namespaces/gpu/resourceclaims/mps-a", "/namespaces/gpu/resourceclaims/mps-b")


def mig_node_state(node: RealNode) -> tuple[dict[str, str], dict[str, str]]:
    """The Node's labels and annotations."""
    meta = node.get_node()["metadata"]
    return dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})


def forget_mig_change(node: RealNode) -> None:
    """Take the MIG manager's labels and reason and the DRA plugin's announcement off the Node, as
    a test found it."""

    def edit(current: dict[str, Any]) -> None:
        for key in (MIG_CONFIG, MIG_CONFIG_STATE):
            current["metadata"].setdefault("labels", {}).pop(key, None)
        for key in (MIG_CONFIG_STATE_REASON, DRA_MIG_GPUS):
            current["metadata"].setdefault("annotations", {}).pop(key, None)

    node.edit_node(edit, "the Node without its MIG change")


def test_the_mig_manager_refuses_a_layout_that_would_change_the_gpus_the_dra_plugin_announced(
    node: RealNode,
) -> None:
    """With --partitionable-mig the DRA plugin names its GPUs on the real Node (gpuchain.io/dra-mig-gpus);
    ``gpuchain mig-manager`` on the node, asked by the Node's nvidia.com/mig.config label for a layout
    that changes them, sets nvidia.com/mig.config.state=failed with the reason and a Warning Event."""
    plugin = start_plugin(node, "--partitionable-mig")
    manager = None
    try:
        announced = wait_for(
            "the DRA plugin's MIG GPUs on the Node", lambda: mig_node_state(node)[1].get(DRA_MIG_GPUS), 30
        )
        assert announced == "0,1,2,3,4,5,6,7"
        manager = node.spawn(
            "mig-manager",
            [GPUCHAIN, "mig-manager", "--node", node.name, "--backend", "sim", "--preset", PRESET],
            env={**os.environ, "KUBECONFIG": str(node.workdir / "kubelet.kubeconfig")},
        )
        node.edit_node(lambda n: n["metadata"].setdefault("labels", {}).update({MIG_CONFIG: "all-1g.10gb"}))

        def finished() -> tuple[dict[str, str], dict[str, str]] | None:
            if manager.poll() is not None:
                raise RuntimeError(f"mig-manager exited {manager.returncode}:\n{node.log('mig-manager')[-3000:]}")
            labels, annotations = mig_node_state(node)
            return (labels, annotations) if labels.get(MIG_CONFIG_STATE) not in (None, "pending") else None

        labels, annotations = wait_for("the MIG manager's verdict", finished, 45)
        assert labels[MIG_CONFIG_STATE] == "failed"
        reason = annotations[MIG_CONFIG_STATE_REASON]
        assert "layout 'all-1g.10gb' would change GPU 0, 1, 2, 3, 4, 5, 6, 7" in reason
        assert f"the DRA driver {DRIVER}" in reason and "--partitionable-mig" in reason

        def failed_events() -> list[dict[str, Any]]:  # written after the state, in its own request
            events = node.api.request(
                "GET", f"/api/v1/events?fieldSelector=involvedObject.kind%3DNode,involvedObject.name%3D{node.name}"
            )["items"]
            return [e for e in events if e["reason"] == "MigConfigFailed"]

        failed = wait_for("the MIG manager's Event", failed_events, 30)
        assert [e["type"] for e in failed] == ["Warning"] and reason in failed[0]["message"]
    finally:
        if manager is not None:
            stop_process(manager)
        stop_process(plugin)
        forget_mig_change(node)
        delete_resources(node)


def test_a_partitionable_claim_is_not_prepared_while_a_mig_change_is_pending(node: RealNode) -> None:
    """While the Node's nvidia.com/mig.config.state is pending (the MIG manager's first write of a
    change), the real kubelet's NodePrepareResources of a MIG placement is refused: the pod's
    FailedPrepareDynamicResources Event says why, no MIG device is made and the pod waits; once the
    change is over, the kubelet's retry (at its next sync of the pod) prepares the claim and the pod runs."""
    index = 1
    plugin = start_plugin(node, "--partitionable-mig")
    earlier = len(node.log("dra-plugin"))
    try:
        node.edit_node(lambda n: n["metadata"].setdefault("labels", {}).update({MIG_CONFIG_STATE: "pending"}))
        attrs = f"device.attributes['{DRIVER}']"
        uid = create_claim(node, "mig-wait", index, also=f"{attrs}.type == 'mig' && {attrs}.migProfile == '1g.10gb'")
        node.create_pod("gpu", claim_pod("mig-wait", "mig-wait", "echo PREPARED"))

        def refusal() -> str | None:
            events = node.api.request(
                "GET", "/api/v1/namespaces/gpu/events?fieldSelector=involvedObject.name%3Dmig-wait"
            )["items"]
            return next((e["message"] for e in events if e["reason"] == "FailedPrepareDynamicResources"), None)

        message = wait_for("the kubelet's Event of the refused Prepare", refusal, 45)
        assert "NodePrepareResources failed for ResourceClaim mig-wait" in message
        assert "the MIG manager is changing this node's MIG layout (nvidia.com/mig.config.state=pending)" in message
        assert node.get_pod("gpu", "mig-wait")["status"]["phase"] == "Pending"
        assert "created MIG device" not in node.log("dra-plugin")[earlier:]
        checkpoint = node.workdir / "kubelet" / "plugins" / DRIVER / "checkpoint.json"
        assert uid not in checkpoint.read_text()

        node.edit_node(lambda n: n["metadata"]["labels"].update({MIG_CONFIG_STATE: "success"}))  # the change is over
        done = node.wait_pod_phase("gpu", "mig-wait", ("Succeeded", "Failed"))
        assert done["status"]["phase"] == "Succeeded", done["status"]
        assert "created MIG device" in node.log("dra-plugin")[earlier:]
        wait_for("NodeUnprepareResources", lambda: uid not in checkpoint.read_text(), 60)
    finally:
        node.delete_pod("gpu", "mig-wait")
        stop_process(plugin)
        forget_mig_change(node)
        delete_resources(node, "/namespaces/gpu/resourceclaims/mig-wait")
