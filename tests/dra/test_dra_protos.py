"""The DRA and plugin-registration stubs speak the kubelet's wire format and coexist with the other APIs."""

from __future__ import annotations

import importlib

from gpuchain.proto.dra.v1 import api_pb2 as v1
from gpuchain.proto.dra.v1beta1 import api_pb2 as v1beta1
from gpuchain.proto.pluginregistration.v1 import api_pb2 as reg

MODULES = [
    "gpuchain.proto.deviceplugin.v1beta1.api_pb2",
    "gpuchain.proto.deviceplugin.v1beta1.api_pb2_grpc",
    "gpuchain.proto.podresources.v1.api_pb2",
    "gpuchain.proto.podresources.v1.api_pb2_grpc",
    "gpuchain.proto.pluginregistration.v1.api_pb2_grpc",
    "gpuchain.proto.dra.v1.api_pb2_grpc",
    "gpuchain.proto.dra.v1beta1.api_pb2_grpc",
]


def _fields(message: type) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]


def test_all_kubelet_apis_import_in_one_process() -> None:
    """The descriptor pool is global: a clash of fully-qualified names would fail the import."""
    for name in MODULES:
        importlib.import_module(name)
    packages = {reg.DESCRIPTOR.package, v1.DESCRIPTOR.package, v1beta1.DESCRIPTOR.package}
    assert packages == {"pluginregistration", "k8s.io.kubelet.pkg.apis.dra.v1", "k8s.io.kubelet.pkg.apis.dra.v1beta1"}


def test_registration_matches_upstream() -> None:
    assert _fields(reg.PluginInfo) == {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}
    assert _fields(reg.RegistrationStatus) == {"plugin_registered": 1, "error": 2}
    service = reg.DESCRIPTOR.services_by_name["Registration"]
    assert service.full_name == "pluginregistration.Registration"
    assert [m.name for m in service.methods] == ["GetInfo", "NotifyRegistrationStatus"]


def test_dra_node_api_matches_upstream_in_both_versions() -> None:
    for pb in (v1, v1beta1):
        assert _fields(pb.Claim) == {"namespace": 1, "uid": 2, "name": 3}
        assert _fields(pb.Device) == {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4}
        assert _fields(pb.NodePrepareResourceResponse) == {"devices": 1, "error": 2}
        assert _fields(pb.NodeUnprepareResourceResponse) == {"error": 1}
        assert _fields(pb.NodePrepareResourcesRequest) == {"claims": 1}
        assert _fields(pb.NodePrepareResourcesResponse) == {"claims": 1}
        service = pb.DESCRIPTOR.services_by_name["DRAPlugin"]
        assert service.full_name == f"{pb.DESCRIPTOR.package}.DRAPlugin"
        assert [m.name for m in service.methods] == ["NodePrepareResources", "NodeUnprepareResources"]


def test_claim_wire_bytes() -> None:
    raw = v1.Claim(namespace="ns", uid="u1", name="c").SerializeToString()
    assert raw == b"\n\x02ns\x12\x02u1\x1a\x01c"
