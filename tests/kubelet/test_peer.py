"""The kubelet peer on its own terms: registration checks, admission, restart, pod-resources API v1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from gpuchain.api.config.v1.config import parse_config
from gpuchain.kubelet.node import SimNode, start_sim_node
from gpuchain.kubelet.peer import AdmissionError, ContainerRequest
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2 as pb
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from gpuchain.proto.podresources.v1 import api_pb2 as pr
from gpuchain.proto.podresources.v1 import api_pb2_grpc as pr_grpc

GPU = "nvidia.com/gpu"


@pytest.fixture
async def node() -> AsyncIterator[SimNode]:
    n = await start_sim_node()
    yield n
    await n.stop()


async def _register(node: SimNode, request: pb.RegisterRequest) -> None:
    async with grpc.aio.insecure_channel(f"unix://{node.socket_dir / 'kubelet.sock'}") as channel:
        await pb_grpc.RegistrationStub(channel).Register(request, timeout=5)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (pb.RegisterRequest(version="v1alpha", endpoint="nvidia-gpu.sock", resource_name=GPU), "unsupported"),
        (pb.RegisterRequest(version="v1beta1", endpoint="nvidia-gpu.sock", resource_name="gpu"), "needs a domain"),
        (pb.RegisterRequest(version="v1beta1", endpoint="nope.sock", resource_name=GPU), "does not exist"),
    ],
)
async def test_bad_registration_is_refused(node: SimNode, request_: pb.RegisterRequest, message: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _register(node, request_)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert message in (err.value.details() or "")


async def test_insufficient_devices(node: SimNode) -> None:
    with pytest.raises(AdmissionError, match=r"Insufficient nvidia.com/gpu \(requested 9, 8 free"):
        await node.kubelet.admit("default", name="big", containers=[ContainerRequest("c", {GPU: 9})])
    with pytest.raises(AdmissionError, match="Insufficient nvidia.com/foo"):
        await node.kubelet.admit("default", name="foo", containers=[ContainerRequest("c", {"nvidia.com/foo": 1})])


async def test_admission_is_all_or_nothing_and_devices_are_not_shared(node: SimNode) -> None:
    await node.kubelet.admit("default", name="a", containers=[ContainerRequest("c", {GPU: 6})])
    with pytest.raises(AdmissionError):
        await node.kubelet.admit(
            "default", name="b", containers=[ContainerRequest("x", {GPU: 1}), ContainerRequest("y", {GPU: 2})]
        )
    assert list(node.kubelet.pods) == [("default", "a")]
    assert len(node.kubelet.free_ids(GPU)) == 2
    b = await node.kubelet.admit(
        "default", name="b", containers=[ContainerRequest("x", {GPU: 1}), ContainerRequest("y", {GPU: 1})]
    )
    assert set(b.containers[0].devices[GPU]).isdisjoint(b.containers[1].devices[GPU])
    node.kubelet.remove_pod("default", "a")
    assert len(node.kubelet.free_ids(GPU)) == 6


async def test_pod_resources_api(node: SimNode) -> None:
    pod = await node.kubelet.admit("ml", name="train", containers=[ContainerRequest("main", {GPU: 2})])
    node.backend.inject_xid(pod.containers[0].devices[GPU][0], xid=79)
    await node.kubelet.wait_for(lambda: node.kubelet.allocatable()[GPU] == 7)
    async with grpc.aio.insecure_channel(f"unix://{node.pod_resources_socket}") as channel:
        stub = pr_grpc.PodResourcesListerStub(channel)
        listed = await stub.List(pr.ListPodResourcesRequest())
        alloc = await stub.GetAllocatableResources(pr.AllocatableResourcesRequest())
        got = await stub.Get(pr.GetPodResourcesRequest(pod_name="train", pod_namespace="ml"))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Get(pr.GetPodResourcesRequest(pod_name="ghost", pod_namespace="ml"))
    (p,) = listed.pod_resources
    assert (p.namespace, p.name, p.containers[0].name) == ("ml", "train", "main")
    devices = p.containers[0].devices[0]
    assert devices.resource_name == GPU and tuple(devices.device_ids) == pod.containers[0].devices[GPU]
    assert [n.ID for n in devices.topology.nodes] == [0]
    assert len(alloc.devices) == 7 and all(d.resource_name == GPU for d in alloc.devices)
    assert got.pod_resources == p
    assert err.value.code() is grpc.StatusCode.NOT_FOUND


async def test_pod_resources_report_replica_ids() -> None:
    node = await start_sim_node(config=parse_config("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}"))
    try:
        await node.kubelet.admit("default", name="p", containers=[ContainerRequest("c", {GPU: 1})])
        async with grpc.aio.insecure_channel(f"unix://{node.pod_resources_socket}") as channel:
            listed = await pr_grpc.PodResourcesListerStub(channel).List(pr.ListPodResourcesRequest())
        (device_id,) = listed.pod_resources[0].containers[0].devices[0].device_ids
        assert "::" in device_id
    finally:
        await node.stop()


async def test_stop_removes_the_temporary_directory() -> None:
    node = await start_sim_node()
    root = node.root
    assert (root / "dp" / "kubelet.sock").exists()
    await node.stop()
    assert not root.exists()


async def test_a_started_node_sees_a_fault_injected_at_once(node: SimNode) -> None:
    """start_sim_node returns with the plugin subscribed to the GPUs' health events, not only
    registered: the kubelet can have the first device list before the plugin's health task has
    run, and an XID injected then was never delivered (as with NVML), so the test that injected
    one waited its whole timeout for the device to go."""
    assert node.backend.subscribers == 1
    node.backend.inject_xid(0, xid=79)
    await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 7})
