"""Pod attribution: the pure id mapping, and the client against the kubelet peer over a unix socket."""

from __future__ import annotations

import asyncio
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from gpuchain.api.config.v1.config import parse_config
from gpuchain.deviceplugin.resources import REPLICA_SEPARATOR, map_resources
from gpuchain.dra.slices import gpu_device_name, mig_device_name
from gpuchain.exporter.collector import GpuMetricsCollector
from gpuchain.exporter.counters import load_collectors
from gpuchain.exporter.exposition import render
from gpuchain.exporter.podresources import (
    Assignment,
    PodRef,
    PodResourcesClient,
    PodResourcesError,
    assignments,
    attribute,
)
from gpuchain.gpu.sim import SimBackend
from gpuchain.kubelet.node import start_sim_node
from gpuchain.kubelet.peer import ContainerRequest
from gpuchain.proto.podresources.v1 import api_pb2, api_pb2_grpc


def _row(device_id: str, pod: str = "p", resource: str = "nvidia.com/gpu") -> Assignment:
    return Assignment(resource, device_id, PodRef("ns", pod, "c"))


def test_every_id_form_reaches_its_device(mig_sim: SimBackend) -> None:
    inv = mig_sim.inventory()
    whole = inv.gpus[7]
    mig = inv.gpus[4].mig_devices[3]
    rows = [
        _row(whole.uuid, "by-uuid"),
        _row(f"{whole.uuid}::3", "by-replica"),
        _row("7", "by-index"),
        _row(f"{mig.uuid}::1", "mig-replica", "nvidia.com/mig-1g.10gb"),
        _row(f"4:{mig.index}", "mig-index", "nvidia.com/mig-1g.10gb"),
        _row("GPU-not-on-this-node", "gone"),
    ]
    pods = attribute(rows, inv)
    assert pods == {
        whole.uuid: (PodRef("ns", "by-index", "c"), PodRef("ns", "by-replica", "c"), PodRef("ns", "by-uuid", "c")),
        mig.uuid: (PodRef("ns", "mig-index", "c"), PodRef("ns", "mig-replica", "c")),
    }


def test_two_replicas_of_one_gpu_in_one_container_count_once(h100_sim: SimBackend) -> None:
    uuid = h100_sim.inventory().gpus[0].uuid
    assert attribute([_row(f"{uuid}::0"), _row(f"{uuid}::1")], h100_sim.inventory()) == {
        uuid: (PodRef("ns", "p", "c"),)
    }


@pytest.mark.parametrize(
    "config_text",
    [
        "flags: {migStrategy: mixed}\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}",
        "flags: {migStrategy: mixed}\n"
        "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: nvidia.com/mig-1g.10gb, replicas: 2}]}}",
    ],
)
def test_every_id_the_device_plugin_announces_is_attributed(mig_sim: SimBackend, config_text: str) -> None:
    """Contract with the device plugin: whatever ids and resource names it announces, the exporter maps."""
    inv = mig_sim.inventory()
    resources = map_resources(inv, parse_config(config_text))
    rows = [_row(d.id, d.id, r.name) for r in resources for d in r.devices]
    assert any(REPLICA_SEPARATOR in row.device_id for row in rows)
    pods = attribute(rows, inv)
    for r in resources:
        for d in r.devices:
            unit = d.mig_uuid or d.gpu_uuid
            assert PodRef("ns", d.id, "c") in pods[unit], (r.name, d.id)


def test_missing_socket_is_a_clear_error(short_dir: Path) -> None:
    client = PodResourcesClient(str(short_dir / "kubelet.sock"), timeout=0.5)
    try:
        with pytest.raises(PodResourcesError, match=r"kubelet.sock failed \(UNAVAILABLE"):
            client.list()
    finally:
        client.close()


async def test_attribution_through_the_kubelet_peer() -> None:
    config = parse_config(
        "flags: {migStrategy: mixed}\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}"
    )
    node = await start_sim_node("h100-80gb-x8-mig-mixed", config=config)
    client = PodResourcesClient(str(node.pod_resources_socket))
    try:
        await node.kubelet.admit("ml", name="train", containers=[ContainerRequest("main", {"nvidia.com/gpu": 1})])
        await node.kubelet.admit(
            "ml",
            name="infer",
            containers=[
                ContainerRequest("model", {"nvidia.com/mig-1g.10gb": 2}),
                ContainerRequest("sidecar", {"nvidia.com/mig-3g.40gb": 1}),
            ],
        )
        rows = await asyncio.to_thread(client.list)
        inv = node.backend.inventory()
        pods = attribute(rows, inv)

        gpu_rows = [r for r in rows if r.resource == "nvidia.com/gpu"]
        assert len(gpu_rows) == 1 and "::" in gpu_rows[0].device_id
        whole = {g.uuid for g in inv.gpus if not g.mig_enabled}
        migs = {m.uuid: m.profile for m in inv.mig_devices}
        train = [u for u, refs in pods.items() if PodRef("ml", "train", "main") in refs]
        assert len(train) == 1 and train[0] in whole
        model = [u for u, refs in pods.items() if PodRef("ml", "infer", "model") in refs]
        assert sorted(migs[u] for u in model) == ["1g.10gb", "1g.10gb"]
        sidecar = [u for u, refs in pods.items() if PodRef("ml", "infer", "sidecar") in refs]
        assert [migs[u] for u in sidecar] == ["3g.40gb"]

        collector = GpuMetricsCollector(
            node.backend, counters=load_collectors(), hostname="node-1", pod_lister=client.list
        )
        assert await asyncio.to_thread(collector.collect_once)
        text = render(collector.registry).decode()
        util = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
        assert sum('pod="train"' in line for line in util) == 1
        assert not [line for line in util if 'pod="infer"' in line], "MIG devices carry no whole-GPU utilisation"
        fb = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_FB_USED{")]
        assert sum('container="model",namespace="ml",pod="infer"' in line for line in fb) == 2
        sidecar_line = next(line for line in fb if 'container="sidecar"' in line)
        assert 'GPU_I_PROFILE="3g.40gb"' in sidecar_line
        assert 'namespace="ml"' in sidecar_line
    finally:
        client.close()
        await node.stop()


class _ManyPods(api_pb2_grpc.PodResourcesListerServicer):
    """A List answer as a kubelet with ``pods`` pods gives it (a Deployment's pod names, an app
    container and a mesh sidecar each; pod 0 holds GPU ``uuid``); while ``failing`` it answers
    UNAVAILABLE, as a kubelet that went away."""

    def __init__(self, pods: int, uuid: str) -> None:
        self.response = api_pb2.ListPodResourcesResponse()
        for i in range(pods):
            pod = self.response.pod_resources.add(
                name=f"inference-server-7f9c8d6b5-{i:05d}", namespace="ml-serving-production"
            )
            container = pod.containers.add(name="inference-server")
            pod.containers.add(name="istio-proxy")
            if i == 0:
                container.devices.add(resource_name="nvidia.com/gpu", device_ids=[uuid])
        self.failing = False

    def List(self, request: object, context: grpc.ServicerContext) -> api_pb2.ListPodResourcesResponse:
        if self.failing:
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet restarting")
        return self.response


def test_a_node_with_50000_pods_is_attributed_and_a_failed_list_is_visible(
    h100_sim: SimBackend, short_dir: Path
) -> None:
    """gRPC's 4 MiB default refused the answer of a node with 50,000 pods and the exporter kept
    serving its old pod map without a sign; the client reads it, and a List that fails shows in
    the scrape (up 0, the answer's age, the error counter)."""
    uuid = h100_sim.inventory().gpus[0].uuid
    lister = _ManyPods(50_000, uuid)
    assert lister.response.ByteSize() > 4 * 1024 * 1024
    sock = short_dir / "kubelet.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(lister, server)
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    client = PodResourcesClient(str(sock), timeout=30)
    try:
        collector = GpuMetricsCollector(
            h100_sim, counters=load_collectors(), hostname="node-1", pod_lister=client.list, call_timeout=30
        )
        assert collector.collect_once()
        text = render(collector.registry).decode()
        assert any(
            'pod="inference-server-7f9c8d6b5-00000"' in line
            for line in text.splitlines()
            if line.startswith("DCGM_FI_DEV_GPU_UTIL{")
        )
        assert "gpuchain_exporter_pod_attribution_up 1.0" in text
        assert 'gpuchain_exporter_scrape_errors_total{operation="pod_resources"} 0.0' in text
        lister.failing = True
        assert collector.collect_once()
        text = render(collector.registry).decode()
        assert "gpuchain_exporter_pod_attribution_up 0.0" in text
        assert 'gpuchain_exporter_scrape_errors_total{operation="pod_resources"} 1.0' in text
        assert any(
            line.startswith("gpuchain_exporter_pod_attribution_timestamp_seconds 1") for line in text.splitlines()
        )
    finally:
        client.close()
        server.stop(None)


def test_a_list_that_keeps_failing_is_one_warning_until_it_answers(
    h100_sim: SimBackend, caplog: pytest.LogCaptureFixture
) -> None:
    """Every failed List counts in the scrape, but a kubelet away for many cycles is one warning,
    a line when it answers again, and a new warning if it fails again."""
    answers: list[bool] = [False, False, False, True, False]

    def lister() -> list[Assignment]:
        if not answers.pop(0):
            raise PodResourcesError("pod-resources List on /x failed (UNAVAILABLE: kubelet restarting)")
        return []

    collector = GpuMetricsCollector(h100_sim, counters=load_collectors(), hostname="node-1", pod_lister=lister)
    caplog.set_level("INFO", logger="gpuchain.exporter.collector")
    for _ in range(5):
        assert collector.collect_once()
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "pod_resources" in r.getMessage()]
    warning = (
        "WARNING",
        "pod_resources: failed: pod-resources List on /x failed (UNAVAILABLE: kubelet restarting); "
        "serving the last good value until it answers",
    )
    assert said == [warning, ("INFO", "pod_resources answers again"), warning]
    text = render(collector.registry).decode()
    assert 'gpuchain_exporter_scrape_errors_total{operation="pod_resources"} 4.0' in text


def test_dra_claims_in_the_list_answer_reach_their_gpu_and_mig_device(mig_sim: SimBackend) -> None:
    """A container's DRA claims (pod-resources v1 ``dynamic_resources``) carry the ResourceSlice
    device names; devices of other drivers (a NIC's) are not GPUs and are left out."""
    inv = mig_sim.inventory()
    whole, mig = inv.gpus[7], inv.gpus[4].mig_devices[3]
    response = api_pb2.ListPodResourcesResponse()
    pod = response.pod_resources.add(name="trainer", namespace="ml")
    container = pod.containers.add(name="main")
    claim = container.dynamic_resources.add(claim_name="gpus", claim_namespace="ml")
    claim.claim_resources.add(driver_name="gpu.nvidia.com", pool_name="n", device_name=gpu_device_name(whole))
    claim.claim_resources.add(driver_name="gpu.gpuchain.io", pool_name="n", device_name=mig_device_name(mig))
    claim.claim_resources.add(driver_name="rdma.example.com", pool_name="n", device_name="gpu-7")
    ref = PodRef("ml", "trainer", "main")
    assert attribute(assignments(response), inv) == {whole.uuid: (ref,), mig.uuid: (ref,)}
