"""ListAndWatch's message, joined from per-unit runs of frames serialized once, equals the message
built device by device, and a health change touches only the changed unit's run."""

from __future__ import annotations

import pytest

from gpuchain.api.config.v1.config import parse_config
from gpuchain.deviceplugin.resources import map_resources
from gpuchain.deviceplugin.server import HEALTHY, UNHEALTHY, device_frames, device_list_bytes
from gpuchain.gpu.health import HealthState
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.sim import SimBackend
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2 as pb


@pytest.mark.parametrize(
    ("preset", "config"),
    [
        ("h100-80gb-x8", "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 3}]}}"),
        ("h100-80gb-x8-mig-mixed", "flags: {migStrategy: mixed}"),
        ("l4-x2", ""),
    ],
)
def test_joined_frames_equal_the_message_built_per_device(preset: str, config: str) -> None:
    sim = SimBackend.from_preset(preset)
    inventory = sim.inventory()
    health = HealthState(quiet_seconds=0)
    health.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=inventory.gpus[-1].uuid, xid=79), 0)
    for resource in map_resources(inventory, parse_config(config)):
        expected = pb.ListAndWatchResponse(
            devices=[
                pb.Device(
                    ID=d.id,
                    health=HEALTHY if health.healthy(d.gpu_uuid, d.mig_uuid) else UNHEALTHY,
                    topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=d.numa_node)]) if d.numa_node is not None else None,
                )
                for d in resource.devices
            ]
        )
        got = pb.ListAndWatchResponse.FromString(device_list_bytes(device_frames(resource), health))
        assert got == expected
        assert got.SerializeToString() == expected.SerializeToString()
        assert any(d.health == UNHEALTHY for d in got.devices) == any(
            d.gpu_uuid == inventory.gpus[-1].uuid for d in resource.devices
        )


def test_one_run_per_unit_and_only_the_changed_gpus_replicas_flip() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    inventory = sim.inventory()
    (resource,) = map_resources(
        inventory, parse_config("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 256}]}}")
    )
    frames = device_frames(resource)
    assert [gpu for gpu, _, _, _ in frames.runs] == [g.uuid for g in inventory.gpus]
    health = HealthState(quiet_seconds=0)
    before = pb.ListAndWatchResponse.FromString(device_list_bytes(frames, health))
    health.apply(HealthEvent(kind=EventKind.XID, gpu_uuid=inventory.gpus[3].uuid, xid=79), 0)
    after = pb.ListAndWatchResponse.FromString(device_list_bytes(frames, health))
    flipped = [b.ID for b, a in zip(before.devices, after.devices, strict=True) if a.health != b.health]
    assert flipped == [f"{inventory.gpus[3].uuid}::{n}" for n in range(256)]
    assert [d.ID for d in after.devices] == [d.id for d in resource.devices]
