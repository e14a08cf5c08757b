"""The four link checks and the ready files, without a GPU."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fakes.fake_pynvml import FakeNvml

from gpuchain.gpu.errors import LibraryNotFoundError
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import MemoryCluster
from gpuchain.validator import ReadyFiles, check_cuda, check_driver, check_plugin, check_toolkit


def test_driver_ok_on_nvml(h100_sim: SimBackend) -> None:
    result = check_driver(NvmlBackend(nvml=FakeNvml(h100_sim)))  # type: ignore[arg-type]
    assert result.ok
    assert result.details["gpus"] == 8
    assert result.details["driverVersion"]


class NoDriver(SimBackend):
    """A backend on a node whose driver is gone: every question fails the way NVML does."""

    def inventory(self):  # type: ignore[no-untyped-def]
        raise LibraryNotFoundError("NVML library (libnvidia-ml.so.1) not found")


def test_driver_fails_without_library(h100_sim: SimBackend) -> None:
    result = check_driver(NoDriver(h100_sim.topology))
    assert not result.ok
    assert "NVML not usable" in result.message and "libnvidia-ml.so.1" in result.message


def test_toolkit_needs_injected_device_nodes(tmp_path: Path, h100_sim: SimBackend) -> None:
    missing = check_toolkit(h100_sim, tmp_path)
    assert not missing.ok
    assert "/dev/nvidiactl" in missing.message and "runtimeClassName nvidia" in missing.message
    (tmp_path / "nvidiactl").touch()
    (tmp_path / "nvidia0").touch()
    ok = check_toolkit(h100_sim, tmp_path)
    assert ok.ok and "1 GPU device" in ok.message


class FakeCuda:
    def __init__(self, rc: int = 0, count: int = 2) -> None:
        self.rc, self.count = rc, count

    def init(self) -> int:
        return self.rc

    def device_count(self) -> int:
        return self.count


def test_cuda_check() -> None:
    assert check_cuda(FakeCuda()).ok
    bad = check_cuda(FakeCuda(rc=100))
    assert not bad.ok and "CUDA error 100" in bad.message
    assert not check_cuda(FakeCuda(count=0)).ok


def test_cuda_check_without_libcuda() -> None:
    result = check_cuda()
    if result.ok:
        pytest.skip("this machine has a working libcuda")
    assert "libcuda.so.1" in result.message


def test_plugin_check_reads_node_capacity() -> None:
    cluster = MemoryCluster(
        [
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bare"}, "status": {"capacity": {"cpu": "8"}}},
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "mig"},
                "status": {"allocatable": {"nvidia.com/mig-1g.10gb": "7", "nvidia.com/gpu": "0"}},
            },
        ]
    )
    bad = check_plugin(cluster, "bare")
    assert not bad.ok and "bare" in bad.message and "device plugin" in bad.message
    ok = check_plugin(cluster, "mig")
    assert ok.ok and ok.details["resources"] == {"nvidia.com/mig-1g.10gb": 7}
    assert not check_plugin(cluster, "absent").ok


def test_plugin_check_passes_a_node_whose_gpus_are_the_dra_drivers() -> None:
    """``gpuchain.io/gpu.allocator=dra`` (kube.allocator): the device plugin announces none by design."""
    dra = {"name": "dra", "labels": {"gpuchain.io/gpu.allocator": "dra"}}
    cluster = MemoryCluster(
        [{"apiVersion": "v1", "kind": "Node", "metadata": dra, "status": {"capacity": {"nvidia.com/gpu": "0"}}}]
    )
    ok = check_plugin(cluster, "dra")
    assert ok.ok and "DRA driver" in ok.message


def test_ready_files(tmp_path: Path) -> None:
    files = ReadyFiles(tmp_path / "validations")
    assert not files.is_ready("driver")
    path = files.write("driver", {"driverVersion": "570"})
    assert path.name == "driver-ready" and files.is_ready("driver")
    assert not list(path.parent.glob(".driver-*")), "no temporary file left behind"
    with pytest.raises(ValueError, match="unknown link"):
        files.path("kernel")
    for link in ("toolkit", "cuda", "plugin"):
        files.write(link, {})
    files.clear("cuda")
    assert [files.is_ready(link) for link in ("driver", "toolkit", "cuda", "plugin")] == [True, True, False, False]
    files.clear()
    assert not files.is_ready("driver") and not files.is_ready("toolkit")


def test_wait_returns_when_the_file_appears(tmp_path: Path) -> None:
    files = ReadyFiles(tmp_path)
    timer = threading.Timer(0.05, lambda: files.write("toolkit", {}))
    timer.start()
    assert files.wait("toolkit", timeout=5, interval=0.01)
    timer.join()
    assert not files.wait("plugin", timeout=0.05, interval=0.01)
