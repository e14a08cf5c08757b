"""The committed stubs are exactly what scripts/gen-protos produces, and they speak the kubelet's wire format."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from gpuchain.proto.deviceplugin.v1beta1 import api_pb2 as dp
from gpuchain.proto.podresources.v1 import api_pb2 as pr

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
#: The line of a gRPC stub that names the grpcio-tools release that wrote it, not anything of the .proto:
#: a patch release of the tools changes only it, so a fresh install must not make the stubs "stale".
TOOLS_RELEASE = re.compile(rb"^GRPC_GENERATED_VERSION = '([0-9.]+)'$", re.MULTILINE)


def _release(text: bytes) -> tuple[int, ...]:
    found = TOOLS_RELEASE.search(text)
    assert found is not None, "a gRPC stub without GRPC_GENERATED_VERSION"
    return tuple(int(part) for part in found.group(1).decode().split("."))


def test_regenerating_gives_identical_files() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as out:
        env_python = str(Path(sys.executable))
        subprocess.run(
            [str(ROOT / "scripts" / "gen-protos"), out],
            check=True,
            capture_output=True,
            env={"PYTHON": env_python, "PATH": "/usr/bin:/bin"},
        )
        fresh = sorted(p.relative_to(out) for p in Path(out).rglob("*") if p.is_file())
        committed = sorted(
            p.relative_to(ROOT / "src")
            for p in (ROOT / "src" / "gpuchain" / "proto").rglob("*")
            if p.is_file() and p.name.endswith(GENERATED)
        )
        assert fresh == committed
        for rel in fresh:
            new, old = (Path(out) / rel).read_bytes(), (ROOT / "src" / rel).read_bytes()
            assert TOOLS_RELEASE.sub(b"", new) == TOOLS_RELEASE.sub(b"", old), f"{rel} is stale"


def test_the_runtime_gpuchain_asks_for_is_one_the_stubs_accept() -> None:
    """A gRPC stub raises at import under a grpcio older than the tools that wrote it, so the grpcio
    requirement in pyproject.toml must be at least every committed stub's GRPC_GENERATED_VERSION."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = next(d for d in project["dependencies"] if re.match(r"grpcio\b(?!-)", d))
    floor = re.fullmatch(r"grpcio>=([0-9.]+)", wanted.split(";")[0].strip())
    assert floor is not None, f"pyproject.toml asks for {wanted!r}; give grpcio a >= floor"
    minimum = tuple(int(part) for part in floor.group(1).split("."))
    stubs = (ROOT / "src" / "gpuchain" / "proto").rglob("*_pb2_grpc.py")
    assert all(_release(stub.read_bytes()) <= minimum for stub in stubs)


def _fields(message: type) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]


def test_device_plugin_field_numbers_match_upstream() -> None:
    assert dp.DESCRIPTOR.package == "v1beta1"
    assert _fields(dp.RegisterRequest) == {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}
    assert _fields(dp.DevicePluginOptions) == {"pre_start_required": 1, "get_preferred_allocation_available": 2}
    assert _fields(dp.Device) == {"ID": 1, "health": 2, "topology": 3}
    assert _fields(dp.ContainerPreferredAllocationRequest) == {
        "available_deviceIDs": 1,
        "must_include_deviceIDs": 2,
        "allocation_size": 3,
    }
    assert _fields(dp.ContainerAllocateResponse) == {
        "envs": 1,
        "mounts": 2,
        "devices": 3,
        "annotations": 4,
        "cdi_devices": 5,
    }
    assert _fields(dp.DeviceSpec) == {"container_path": 1, "host_path": 2, "permissions": 3}
    services = {s.name: [m.name for m in s.methods] for s in dp.DESCRIPTOR.services_by_name.values()}
    assert services == {
        "Registration": ["Register"],
        "DevicePlugin": [
            "GetDevicePluginOptions",
            "ListAndWatch",
            "GetPreferredAllocation",
            "Allocate",
            "PreStartContainer",
        ],
    }


def test_pod_resources_field_numbers_match_upstream() -> None:
    assert pr.DESCRIPTOR.package == "v1"
    assert _fields(pr.ContainerResources) == {
        "name": 1,
        "devices": 2,
        "cpu_ids": 3,
        "memory": 4,
        "dynamic_resources": 5,
    }
    assert _fields(pr.ContainerDevices) == {"resource_name": 1, "device_ids": 2, "topology": 3}
    assert _fields(pr.DynamicResource) == {"claim_name": 2, "claim_namespace": 3, "claim_resources": 4}
    lister = pr.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert [m.name for m in lister.methods] == ["List", "GetAllocatableResources", "Get"]


def test_wire_bytes_are_the_kubelets() -> None:
    """A RegisterRequest encodes as the kubelet would decode it (field 3 = resource name)."""
    request = dp.RegisterRequest(version="v1beta1", endpoint="nvidia-gpu.sock", resource_name="nvidia.com/gpu")
    raw = request.SerializeToString()
    assert raw == b"\n\x07v1beta1\x12\x0fnvidia-gpu.sock\x1a\x0envidia.com/gpu"
