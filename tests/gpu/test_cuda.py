"""gpuchain.gpu.cuda against the fake libcuda (tests/fakes/fake_libcuda.py): the kernel and the
memory test pass on good "hardware", and each fault a GPU can show (a wrong result, a stuck
bit, a launch error, a device CUDA no longer sees) fails the right check; what cannot run is
skipped with its reason, never passed. Nothing here loads the real libcuda.so.1 or needs a GPU;
the same code has not been run on a GPU in this repository's CI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.fake_libcuda import FakeCuda, parse_bus_id

from gpuchain.gpu import cuda
from gpuchain.gpu.cuda import CudaCheckConfig, Pattern, pci_bus_id, run_checks

BUS = "00000000:17:00.0"
SMALL = CudaCheckConfig(arith_elements=4096, min_memory_bytes=4096)


def checks(fake: FakeCuda, bus: str = BUS, config: CudaCheckConfig = SMALL) -> dict[str, tuple[bool, str]]:
    result = run_checks(fake, bus_id=bus, config=config)  # type: ignore[arg-type]
    return {name: (ok, detail) for name, ok, detail in result.checks} | {
        name: (False, "skipped: " + why) for name, why in result.skipped.items()
    }


def assert_released(fake: FakeCuda) -> None:
    """Every allocation, the module and the context are gone: nothing holds the GPU afterwards."""
    assert fake.memory == {} and fake.modules == {} and fake.contexts == set()


def test_kernel_and_memory_pass_on_a_good_gpu_and_release_everything() -> None:
    fake = FakeCuda([BUS.replace("17", "0a"), BUS])
    result = run_checks(fake, bus_id=BUS, config=SMALL)  # type: ignore[arg-type]
    assert [(n, ok) for n, ok, _ in result.checks] == [("cuda", True), ("memory", True)] and not result.skipped
    assert "4 patterns over" in result.checks[1][2]
    assert fake.launches == ["gpuchain_arith"] + ["gpuchain_fill", "gpuchain_check"] * 4
    assert_released(fake)


def test_the_gpu_is_chosen_by_its_pci_bus_id_in_cudas_spelling() -> None:
    assert pci_bus_id("00000000:17:00.0") == b"0000:17:00.0"
    assert pci_bus_id("00000001:C1:1F.7") == b"0001:c1:1f.7"
    assert parse_bus_id(pci_bus_id("0000000A:3B:00.0").decode()) == (10, 0x3B, 0, 0)
    with pytest.raises(ValueError, match="not a PCI bus id"):
        pci_bus_id("GPU-1234")


def test_a_gpu_cuda_does_not_see_fails_the_cuda_check() -> None:
    fake = FakeCuda(["00000000:0A:00.0"])
    found = checks(fake)
    assert not found["cuda"][0] and "no device at PCI bus id 00000000:17:00.0" in found["cuda"][1]
    assert "CUDA_ERROR_INVALID_DEVICE" in found["cuda"][1]
    assert found["memory"][1].startswith("skipped: not run")
    assert_released(fake)


def test_no_gpu_visible_to_cuda_at_all_is_skipped_not_passed() -> None:
    found = checks(FakeCuda([BUS], no_device=True))
    assert found["cuda"][1].startswith("skipped: CUDA sees no GPU")
    assert found["memory"][1].startswith("skipped")


def test_a_wrong_result_from_the_kernel_fails_cuda_and_skips_memory() -> None:
    fake = FakeCuda([BUS], wrong_arith_at=1234)
    found = checks(fake)
    want = (1234 * 0x9E3779B1 + SMALL.seed) & 0xFFFFFFFF
    assert found["cuda"] == (False, f"1 of 4096 results wrong (element 1234: got {want ^ 1:#x}, want {want:#x})")
    assert found["memory"] == (False, "skipped: not run: the CUDA check failed")
    assert_released(fake)


@pytest.mark.parametrize(
    ("where", "code", "name"), [("launch_error", 719, "LAUNCH_FAILED"), ("sync_error", 700, "ILLEGAL_ADDRESS")]
)
def test_a_launch_or_execution_error_fails_the_cuda_check(where: str, code: int, name: str) -> None:
    fake = FakeCuda([BUS], **{where: code})  # type: ignore[arg-type]
    found = checks(fake)
    assert not found["cuda"][0] and f"CUDA_ERROR_{name} ({code})" in found["cuda"][1]
    assert_released(fake)


def test_a_stuck_memory_bit_fails_the_memory_check() -> None:
    fake = FakeCuda([BUS], stuck_bit=(1000, 29))
    found = checks(fake)
    assert found["cuda"][0]
    ok, detail = found["memory"]
    # Word 1000 holds its address, then its inverse: one of the two sets bit 29.
    assert not ok and "1 of 524288 words read back wrong" in detail
    assert_released(fake)


def test_walking_ones_reaches_the_top_bit_of_a_word() -> None:
    fake = FakeCuda([BUS], stuck_bit=(63, 63))  # walking ones sets bit 63 in word 63
    config = CudaCheckConfig(arith_elements=256, min_memory_bytes=4096, patterns=(Pattern("walking ones", False, 0),))
    assert checks(fake, config=config)["memory"] == (False, "walking ones: 1 of 524288 words read back wrong")


def test_memory_is_bounded_by_the_fraction_of_free_memory_and_retries_smaller_on_out_of_memory() -> None:
    fake = FakeCuda([BUS], free_bytes=8 << 20, max_alloc=1 << 20)
    config = CudaCheckConfig(arith_elements=256, memory_fraction=0.5, min_memory_bytes=4096)
    ok, detail = checks(fake, config=config)["memory"]
    assert ok and "over 0.00 GiB" in detail  # 4 MiB asked, 2 MiB refused, 1 MiB used
    assert fake.calls.count("cuMemAlloc_v2") == 1 + 3 + 1  # arith buffer, 4, 2, 1 MiB, the counter
    tiny = FakeCuda([BUS], free_bytes=8 << 20, max_alloc=1024)
    ok, detail = checks(tiny, config=config)["memory"]
    assert not ok and detail.startswith("could not allocate")


def test_the_time_budget_stops_starting_patterns_but_reports_what_ran() -> None:
    ticks = iter(range(0, 1000, 10))
    fake = FakeCuda([BUS])
    config = CudaCheckConfig(arith_elements=256, min_memory_bytes=4096, time_budget_s=5)
    result = run_checks(fake, bus_id=BUS, config=config, clock=lambda: float(next(ticks)))  # type: ignore[arg-type]
    name, ok, detail = result.checks[1]
    assert (name, ok) == ("memory", True) and detail.startswith("1 patterns") and "3 more not started" in detail


def test_a_driver_that_cannot_build_the_ptx_skips_rather_than_blames_the_gpu() -> None:
    found = checks(FakeCuda([BUS], reject_ptx=222))
    assert found["cuda"][1] == (
        "skipped: the driver cannot build gpuchain's test kernels (CUDA_ERROR_UNSUPPORTED_PTX_VERSION)"
    )


def test_the_ptx_declares_the_parameters_the_host_passes() -> None:
    """The fake decodes arguments by the PTX's own declarations; these are the declarations."""
    from fakes.fake_libcuda import _ENTRY, _PARAM

    entries = {n: [t for t, _ in _PARAM.findall(p)] for n, p in _ENTRY.findall(cuda.PTX.decode())}
    assert entries == {
        "gpuchain_arith": ["u64", "u32", "u32"],
        "gpuchain_fill": ["u64", "u64", "u32", "u64"],
        "gpuchain_check": ["u64", "u64", "u32", "u64", "u64"],
    }
    assert cuda.PTX.startswith(b".version 4.0\n.target sm_50\n.address_size 64\n")


def test_the_child_process_reports_a_missing_libcuda_as_skipped() -> None:
    """This machine has no NVIDIA driver: the real entry point must say so, not pass."""
    try:
        cuda.load_libcuda()
    except cuda.LibcudaMissingError:
        pass
    else:  # pragma: no cover - a machine with a driver runs the real check instead
        pytest.skip("libcuda.so.1 is present here")
    done = subprocess.run(
        [sys.executable, "-m", "gpuchain.gpu.cuda", "--bus-id", BUS],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["checks"] == [] and set(report["skipped"]) == {"cuda", "memory"}
    assert "libcuda.so.1 cannot be loaded" in report["skipped"]["cuda"]


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="memory_fraction"):
        CudaCheckConfig(memory_fraction=0.95)


def _ptxas() -> str | None:
    """NVIDIA's PTX assembler: on PATH, or from the nvidia-cuda-nvcc-cu12 wheel if installed."""
    found = shutil.which("ptxas")
    if found:
        return found
    try:
        import nvidia.cuda_nvcc  # type: ignore[import-not-found]
    except ImportError:
        return None
    path = Path(next(iter(nvidia.cuda_nvcc.__path__))) / "bin" / "ptxas"
    return str(path) if path.exists() else None


@pytest.mark.parametrize("arch", ["sm_50", "sm_70", "sm_80", "sm_90", "sm_100", "sm_120"])
def test_nvidias_ptx_assembler_accepts_the_kernels(arch: str, tmp_path: Path) -> None:
    """What the driver's JIT does first, done by ptxas with warnings as errors (no GPU needed)."""
    ptxas = _ptxas()
    if ptxas is None:
        if os.environ.get("GPUCHAIN_REQUIRE_PEERS") == "1":
            pytest.fail("ptxas is missing in CI: the test extras install nvidia-cuda-nvcc-cu12")
        pytest.skip("ptxas not installed (pip install nvidia-cuda-nvcc-cu12)")
    source = tmp_path / "gpuchain.ptx"
    source.write_bytes(cuda.PTX)
    done = subprocess.run(
        [ptxas, f"-arch={arch}", "--warning-as-error", str(source), "-o", str(tmp_path / "out.cubin")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
