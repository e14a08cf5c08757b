"""gpuchain.gpu.cuda through real ctypes and dlopen: a fake libcuda.so.1 written in C
(tests/fakes/fake_libcuda.c), compiled here, receives the calls exactly as the NVIDIA driver
library would (cuda.h's C signatures, the argtypes ``load_libcuda`` binds, kernelParams as an
array of pointers). This checks the marshalling the Python fake cannot: argument widths,
out-pointers, the PTX handed over as a NUL-terminated string. It still is not a GPU: the PTX is
not compiled here, so whether a real driver accepts it is checked only on GPU machines
(scripts/hardware-check --cuda)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.fake_pynvml import FakeNvml

from gpuchain.gpu import cuda
from gpuchain.gpu.burnin import BurnInConfig
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.sim import SimBackend

SOURCE = Path(__file__).parents[1] / "fakes" / "fake_libcuda.c"
BUS = "00000000:17:00.0"
SMALL = cuda.CudaCheckConfig(arith_elements=1 << 16, min_memory_bytes=4096, memory_cap_bytes=8 << 20)


@pytest.fixture(scope="module")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        if os.environ.get("GPUCHAIN_REQUIRE_PEERS") == "1":
            pytest.fail("no C compiler in CI: scripts/setup --test installs gcc")
        pytest.skip("no C compiler to build the fake libcuda.so.1")
    out = tmp_path_factory.mktemp("libcuda")
    subprocess.run(
        [compiler, "-std=c11", "-D_ISOC11_SOURCE", "-Wall", "-Werror", "-O1", "-shared", "-fPIC",
         "-o", str(out / "libcuda.so.1"), str(SOURCE)],
        check=True,
        capture_output=True,
        timeout=120,
    )  # fmt: skip
    return out


@pytest.fixture
def env() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in ("FAKE_CUDA_BUS_IDS", "FAKE_CUDA_STUCK", "FAKE_CUDA_NO_DEVICE")}
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_the_checks_pass_through_the_real_binding(libdir: Path, env: None) -> None:
    driver = cuda.load_libcuda(str(libdir / "libcuda.so.1"))
    result = cuda.run_checks(driver, bus_id=BUS, config=SMALL)
    assert [(n, ok) for n, ok, _ in result.checks] == [("cuda", True), ("memory", True)], result.checks
    assert result.checks[0][2] == "65536 results right" and "4 patterns over" in result.checks[1][2]


def test_a_stuck_bit_and_a_missing_device_are_seen_through_the_real_binding(libdir: Path, env: None) -> None:
    driver = cuda.load_libcuda(str(libdir / "libcuda.so.1"))
    os.environ["FAKE_CUDA_STUCK"] = "4097:40"
    name, ok, detail = cuda.run_checks(driver, bus_id=BUS, config=SMALL).checks[1]
    assert (name, ok) == ("memory", False) and "1 of 1048576 words read back wrong" in detail
    os.environ["FAKE_CUDA_BUS_IDS"] = "0000:3b:00.0"
    [(name, ok, detail)] = cuda.run_checks(driver, bus_id=BUS, config=SMALL).checks
    assert (name, ok) == ("cuda", False) and "CUDA_ERROR_INVALID_DEVICE" in detail


def test_the_child_process_finds_libcuda_by_its_soname(libdir: Path) -> None:
    child_env = dict(os.environ, LD_LIBRARY_PATH=str(libdir), CUDA_VISIBLE_DEVICES="7")
    done = subprocess.run(
        [sys.executable, "-m", "gpuchain.gpu.cuda", "--bus-id", BUS, "--memory-cap-mib", "16"],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=120,
        check=False,
    )
    report = json.loads(done.stdout)
    assert [(c["name"], c["passed"]) for c in report["checks"]] == [("cuda", True), ("memory", True)], report
    assert "over 0.02 GiB" in report["checks"][1]["detail"]  # 16 MiB of the fake's 256 MiB free


def test_nvml_burn_in_runs_the_real_child_on_the_gpu_nvml_names(
    libdir: Path, h100_sim: SimBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole burn-in path with nothing stubbed but NVML and the driver library."""
    bus_ids = ",".join(g.pci_bus_id for g in h100_sim.inventory().gpus)
    monkeypatch.setenv("FAKE_CUDA_BUS_IDS", bus_ids)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(libdir))
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")  # no dcgmi in tmp_path
    monkeypatch.delenv("FAKE_CUDA_STUCK", raising=False)
    config = BurnInConfig(memory_cap_mib=32)
    result = NvmlBackend(nvml=FakeNvml(h100_sim), burn_in_config=config).burn_in(6)
    assert result.passed, result.summary()
    assert [c.name for c in result.checks] == ["nvml", "row-remap", "fabric", "cuda", "memory"]
    monkeypatch.setenv("FAKE_CUDA_STUCK", "99:0")
    broken = NvmlBackend(nvml=FakeNvml(h100_sim), burn_in_config=config).burn_in(6)
    assert not broken.passed and "words read back wrong" in broken.summary()
