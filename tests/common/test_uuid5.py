"""gpuchain.common.uuid5 gives uuid.uuid5's values byte for byte, and leaves hashlib unloaded."""

from __future__ import annotations

import subprocess
import sys
import uuid

from hypothesis import given
from hypothesis import strategies as st

from gpuchain.common.uuid5 import NAMESPACE_URL, uuid5
from gpuchain.deviceplugin.allocate import cdi_annotation_key
from gpuchain.deviceplugin.resources import Resource
from gpuchain.gpu.topology import stable_uuid


@given(name=st.text(), namespace=st.sampled_from([uuid.NAMESPACE_URL, uuid.NAMESPACE_DNS, uuid.NAMESPACE_OID]))
def test_the_same_uuid_as_the_standard_library(name: str, namespace: uuid.UUID) -> None:
    assert uuid5(namespace.bytes, name) == str(uuid.uuid5(namespace, name))


def test_the_url_namespace_is_the_standard_librarys() -> None:
    assert uuid.UUID(bytes=NAMESPACE_URL) == uuid.NAMESPACE_URL


def test_the_simulator_keeps_its_gpu_uuids() -> None:
    for seed in ("node-a/0", "node-a/7", "gpu-nöde/3", "GPU-x/1/2/1g.10gb/0"):
        assert stable_uuid("GPU", seed) == f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, 'gpuchain:' + seed)}"


def test_cdi_annotation_key_keeps_its_request_id() -> None:
    key = cdi_annotation_key(
        "cdi.k8s.io/", resource=Resource(name="nvidia.com/gpu", devices=()), visible=["GPU-a", "GPU-b"]
    )
    expected = uuid.uuid5(uuid.NAMESPACE_URL, "nvidia.com/gpu|GPU-a,GPU-b")
    assert key == f"cdi.k8s.io/nvidia-device-plugin_{expected}"


def test_hashlib_and_uuid_stay_unloaded() -> None:
    code = (
        "import sys; from gpuchain.gpu.topology import stable_uuid; stable_uuid('GPU', 'n/0'); "
        "print(*(m in sys.modules for m in ('hashlib', '_hashlib', 'uuid', 'platform')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"] * 4
