"""What the kubelet peer's device manager holds, as the pod-resources API reads it.

The types live here, below both ``peer`` (which keeps the state) and ``podresources`` (which
serves it), so that neither imports the other's module to name them: ``peer`` serves
pod-resources, and pod-resources only needs the state's shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gpuchain.proto.deviceplugin.v1beta1 import api_pb2 as pb


@dataclass
class DeviceInfo:
    id: str
    healthy: bool
    numa_nodes: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ContainerAssignment:
    """What a container got: device ids per resource and the merged Allocate answers."""

    name: str
    devices: Mapping[str, tuple[str, ...]]
    envs: Mapping[str, str]
    mounts: tuple[pb.Mount, ...]
    device_specs: tuple[pb.DeviceSpec, ...]
    annotations: Mapping[str, str]
    cdi_devices: tuple[str, ...]


@dataclass(frozen=True)
class PodAssignment:
    namespace: str
    name: str
    containers: tuple[ContainerAssignment, ...]


class AnnouncedDevices(Protocol):
    """One registered plugin as pod-resources sees it: the devices it last announced, by id."""

    @property
    def devices(self) -> Mapping[str, DeviceInfo]: ...


class DeviceManagerState(Protocol):
    """The device manager's state: announced devices per resource, assignments per pod."""

    @property
    def endpoints(self) -> Mapping[str, AnnouncedDevices]: ...

    @property
    def pods(self) -> Mapping[tuple[str, str], PodAssignment]: ...
