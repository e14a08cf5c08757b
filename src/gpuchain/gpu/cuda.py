"""A CUDA kernel and a memory test on one GPU, through the CUDA driver API (``libcuda.so.1``).

The burn-in's "cuda" and "memory" checks, with no dependency beyond the driver's own library:
ctypes calls the driver API, and the kernels are PTX text that the driver JIT-compiles for
whatever GPU it finds (``cuModuleLoadData`` takes "a NULL-terminated PTX, either as output by
nvcc or hand-written", cuda.h). The GPU is opened by its PCI bus id, the one NVML reported, so
the GPU tested is the GPU being repaired whatever CUDA's own enumeration order is.

The library is behind the ``CudaDriver`` port: ``load_libcuda`` binds the real one, tests pass a
Python fake (tests/fakes/fake_libcuda.py) that runs the same kernels on simulated memory and can
fail any call. Facts relied on, from CUDA 12.6's cuda.h (a copy in zspace/system.cuda-12.6,
include/cuda.h @ b3d92c83):

- ``cuCtxCreate``, ``cuCtxDestroy``, ``cuMemGetInfo``, ``cuMemAlloc``, ``cuMemFree``,
  ``cuMemsetD32``, ``cuMemcpyDtoH`` are macros for their ``_v2`` symbols; the unsuffixed symbols
  are the old ABI with 32-bit sizes, so only the ``_v2`` names are bound here.
- ``cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)`` takes
  ``[domain]:[bus]:[device].[function]`` in hex.
- ``cuLaunchKernel(f, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedMemBytes, hStream,
  void **kernelParams, void **extra)``: ``kernelParams`` holds one pointer per kernel argument.
- ``CUdeviceptr`` is ``unsigned long long`` on 64-bit hosts; ``CUdevice`` is ``int``.

PTX facts: ``.target sm_50`` needs ``.version 4.0``, the PTX ISA release that added sm_50 (LLVM's
NVPTX test sm-version-50.ll checks that pair), shipped with CUDA 6.0 (the PTX-ISA-to-CUDA table
of NVIDIA's cuda-python, cuda/bindings/utils/_ptx_utils.py), so every driver since accepts it;
PTX for an older target is JIT-compiled for a newer GPU. ``cvta.to.global`` turns the generic
device pointer a kernel parameter carries into a global-space address for
``ld.global``/``st.global``; ``shl.b64`` takes its shift amount as ``.u32``; ``selp`` picks
between two values by a predicate; ``atom.global.add.u32`` counts errors from every thread
without losing any. NVIDIA's ptxas 12.9 assembles the three kernels for sm_50 to sm_120 with no
warning (tests/gpu/test_cuda.py, where ptxas is installed); they have not run on a GPU here.

Run as ``python -m gpuchain.gpu.cuda --bus-id ID`` it prints one JSON result: the burn-in runs
it in a child process so a hung kernel can be killed and no CUDA context outlives the check
(a process holding the device would make the next ``nvidia-smi --gpu-reset`` fail).
"""

from __future__ import annotations

import argparse
import array
import ctypes
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, cast

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_INVALID_DEVICE = 101
CUDA_ERROR_INVALID_PTX = 218
CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221
CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222
CUDA_ERROR_ILLEGAL_ADDRESS = 700
CUDA_ERROR_LAUNCH_FAILED = 719
"""CUresult values from cuda.h (CUDA 12.6), the ones this module tells apart."""

_CANNOT_BUILD = frozenset(
    {CUDA_ERROR_INVALID_PTX, CUDA_ERROR_JIT_COMPILER_NOT_FOUND, CUDA_ERROR_UNSUPPORTED_PTX_VERSION}
)
"""Module-load errors that say the driver cannot build gpuchain's PTX, not that the GPU is bad."""

LIBCUDA = "libcuda.so.1"
MASK64 = (1 << 64) - 1
ARITH_MULTIPLIER = 0x9E3779B1
BLOCK = 256
MAX_GRID = 1 << 16
SAMPLE_BYTES = 64 * 1024

PTX = b"""\
.version 4.0
.target sm_50
.address_size 64

// out[i] = i * 0x9E3779B1 + seed (mod 2^32), one thread per element
.visible .entry gpuchain_arith(
\t.param .u64 p_out,
\t.param .u32 p_n,
\t.param .u32 p_seed
)
{
\t.reg .pred %p<2>;
\t.reg .b32 %r<8>;
\t.reg .b64 %rd<4>;

\tld.param.u64 %rd1, [p_out];
\tld.param.u32 %r1, [p_n];
\tld.param.u32 %r2, [p_seed];
\tmov.u32 %r3, %ctaid.x;
\tmov.u32 %r4, %ntid.x;
\tmov.u32 %r5, %tid.x;
\tmad.lo.u32 %r6, %r3, %r4, %r5;
\tsetp.ge.u32 %p1, %r6, %r1;
\t@%p1 bra $arith_done;
\tmad.lo.u32 %r7, %r6, 0x9E3779B1, %r2;
\tcvta.to.global.u64 %rd2, %rd1;
\tmul.wide.u32 %rd3, %r6, 4;
\tadd.s64 %rd2, %rd2, %rd3;
\tst.global.u32 [%rd2], %r7;
$arith_done:
\tret;
}

// word i of buf = ((use_addr ? address of word i : 1 << (i % 64)) ^ xor), grid-stride
.visible .entry gpuchain_fill(
\t.param .u64 p_buf,
\t.param .u64 p_words,
\t.param .u32 p_use_addr,
\t.param .u64 p_xor
)
{
\t.reg .pred %p<3>;
\t.reg .b32 %r<8>;
\t.reg .b64 %rd<16>;

\tld.param.u64 %rd1, [p_buf];
\tld.param.u64 %rd2, [p_words];
\tld.param.u32 %r1, [p_use_addr];
\tld.param.u64 %rd3, [p_xor];
\tcvta.to.global.u64 %rd4, %rd1;
\tmov.u32 %r2, %ctaid.x;
\tmov.u32 %r3, %ntid.x;
\tmov.u32 %r4, %tid.x;
\tmov.u32 %r5, %nctaid.x;
\tmul.wide.u32 %rd5, %r2, %r3;
\tcvt.u64.u32 %rd6, %r4;
\tadd.s64 %rd5, %rd5, %rd6;
\tmul.wide.u32 %rd7, %r5, %r3;
\tsetp.ne.u32 %p2, %r1, 0;
\tmov.b64 %rd11, 1;
$fill_loop:
\tsetp.ge.u64 %p1, %rd5, %rd2;
\t@%p1 bra $fill_done;
\tshl.b64 %rd8, %rd5, 3;
\tadd.s64 %rd9, %rd1, %rd8;
\tcvt.u32.u64 %r6, %rd5;
\tand.b32 %r6, %r6, 63;
\tshl.b64 %rd10, %rd11, %r6;
\tselp.b64 %rd12, %rd9, %rd10, %p2;
\txor.b64 %rd12, %rd12, %rd3;
\tadd.s64 %rd13, %rd4, %rd8;
\tst.global.u64 [%rd13], %rd12;
\tadd.s64 %rd5, %rd5, %rd7;
\tbra.uni $fill_loop;
$fill_done:
\tret;
}

// count the words of buf that differ from what gpuchain_fill wrote, into *errors
.visible .entry gpuchain_check(
\t.param .u64 p_buf,
\t.param .u64 p_words,
\t.param .u32 p_use_addr,
\t.param .u64 p_xor,
\t.param .u64 p_errors
)
{
\t.reg .pred %p<4>;
\t.reg .b32 %r<8>;
\t.reg .b64 %rd<18>;

\tld.param.u64 %rd1, [p_buf];
\tld.param.u64 %rd2, [p_words];
\tld.param.u32 %r1, [p_use_addr];
\tld.param.u64 %rd3, [p_xor];
\tld.param.u64 %rd15, [p_errors];
\tcvta.to.global.u64 %rd4, %rd1;
\tcvta.to.global.u64 %rd16, %rd15;
\tmov.u32 %r2, %ctaid.x;
\tmov.u32 %r3, %ntid.x;
\tmov.u32 %r4, %tid.x;
\tmov.u32 %r5, %nctaid.x;
\tmul.wide.u32 %rd5, %r2, %r3;
\tcvt.u64.u32 %rd6, %r4;
\tadd.s64 %rd5, %rd5, %rd6;
\tmul.wide.u32 %rd7, %r5, %r3;
\tsetp.ne.u32 %p2, %r1, 0;
\tmov.b64 %rd11, 1;
$check_loop:
\tsetp.ge.u64 %p1, %rd5, %rd2;
\t@%p1 bra $check_done;
\tshl.b64 %rd8, %rd5, 3;
\tadd.s64 %rd9, %rd1, %rd8;
\tcvt.u32.u64 %r6, %rd5;
\tand.b32 %r6, %r6, 63;
\tshl.b64 %rd10, %rd11, %r6;
\tselp.b64 %rd12, %rd9, %rd10, %p2;
\txor.b64 %rd12, %rd12, %rd3;
\tadd.s64 %rd13, %rd4, %rd8;
\tld.global.u64 %rd14, [%rd13];
\tsetp.ne.b64 %p3, %rd14, %rd12;
\t@%p3 atom.global.add.u32 %r7, [%rd16], 1;
\tadd.s64 %rd5, %rd5, %rd7;
\tbra.uni $check_loop;
$check_done:
\tret;
}
"""
"""The three kernels, hand-written PTX (see the module docstring for the ISA facts used)."""


class CudaDriver(Protocol):
    """The driver API calls the checks make, with cuda.h's signatures; every call returns a CUresult."""

    def cuInit(self, flags: int) -> int: ...
    def cuDeviceGetByPCIBusId(self, dev: Any, bus_id: bytes) -> int: ...
    def cuCtxCreate_v2(self, ctx: Any, *, flags: int, dev: int) -> int: ...
    def cuCtxDestroy_v2(self, ctx: Any) -> int: ...
    def cuCtxSynchronize(self) -> int: ...
    def cuModuleLoadData(self, module: Any, image: bytes) -> int: ...
    def cuModuleGetFunction(self, function: Any, *, module: Any, name: bytes) -> int: ...
    def cuModuleUnload(self, module: Any) -> int: ...
    def cuMemGetInfo_v2(self, free: Any, total: Any) -> int: ...
    def cuMemAlloc_v2(self, dptr: Any, size: int) -> int: ...
    def cuMemFree_v2(self, dptr: int) -> int: ...
    def cuMemsetD32_v2(self, dptr: int, *, value: int, count: int) -> int: ...
    def cuMemcpyDtoH_v2(self, dst: Any, *, src: int, size: int) -> int: ...
    def cuLaunchKernel(
        self,
        function: Any,
        *,
        grid_x: int,
        grid_y: int,
        grid_z: int,
        block_x: int,
        block_y: int,
        block_z: int,
        shared_bytes: int,
        stream: Any,
        params: Any,
        extra: Any,
    ) -> int: ...
    def cuGetErrorName(self, code: int, name: Any) -> int: ...


class LibcudaMissingError(OSError):
    """libcuda.so.1 cannot be loaded: the container has no NVIDIA driver library."""


def load_libcuda(path: str = LIBCUDA) -> CudaDriver:
    """The real driver library with cuda.h's argument types bound (so ints and sizes are 64-bit)."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise LibcudaMissingError(f"{path} cannot be loaded ({exc})") from None
    p = ctypes.POINTER
    u, u64, vp = ctypes.c_uint, ctypes.c_uint64, ctypes.c_void_p
    signatures: dict[str, list[Any]] = {
        "cuInit": [u],
        "cuDeviceGetByPCIBusId": [p(ctypes.c_int), ctypes.c_char_p],
        "cuCtxCreate_v2": [p(vp), u, ctypes.c_int],
        "cuCtxDestroy_v2": [vp],
        "cuCtxSynchronize": [],
        "cuModuleLoadData": [p(vp), ctypes.c_char_p],
        "cuModuleGetFunction": [p(vp), vp, ctypes.c_char_p],
        "cuModuleUnload": [vp],
        "cuMemGetInfo_v2": [p(ctypes.c_size_t), p(ctypes.c_size_t)],
        "cuMemAlloc_v2": [p(u64), ctypes.c_size_t],
        "cuMemFree_v2": [u64],
        "cuMemsetD32_v2": [u64, u, ctypes.c_size_t],
        "cuMemcpyDtoH_v2": [vp, u64, ctypes.c_size_t],
        "cuLaunchKernel": [vp, u, u, u, u, u, u, u, vp, p(vp), p(vp)],
        "cuGetErrorName": [ctypes.c_int, p(ctypes.c_char_p)],
    }
    for name, argtypes in signatures.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise LibcudaMissingError(f"{path} has no {name}: the driver is older than CUDA 6.0") from None
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
    return cast(CudaDriver, lib)


class CudaError(Exception):
    """A driver call returned an error; ``code`` is the CUresult."""

    def __init__(self, call: str, *, code: int, name: str) -> None:
        super().__init__(f"{call} returned {name} ({code})")
        self.call = call
        self.code = code


@dataclass(frozen=True)
class Pattern:
    """One memory-test pattern: word i holds ``(address of word i if use_addr else 1 << (i % 64)) ^ xor``."""

    name: str
    use_addr: bool
    xor: int

    def word(self, base: int, index: int) -> int:
        value = base + 8 * index if self.use_addr else 1 << (index & 63)
        return (value ^ self.xor) & MASK64


PATTERNS = (
    Pattern("address-in-address", True, 0),
    Pattern("inverted address", True, MASK64),
    Pattern("walking ones", False, 0),
    Pattern("walking zeros", False, MASK64),
)
"""Address-in-address finds address-line faults (two words aliasing), its inverse flips every
bit the first left alone, walking ones and zeros put each bit position high and low in turn."""


@dataclass(frozen=True, kw_only=True)
class CudaCheckConfig:
    """How much the checks do. The memory test covers ``memory_fraction`` of the free memory (at
    most ``memory_cap_bytes``) and stops starting patterns once ``time_budget_s`` is spent."""

    arith_elements: int = 1 << 18
    memory_fraction: float = 0.5
    memory_cap_bytes: int = 256 << 30
    min_memory_bytes: int = 64 << 20
    time_budget_s: float = 60.0
    patterns: tuple[Pattern, ...] = PATTERNS
    seed: int = 0x5EED

    def __post_init__(self) -> None:
        if not 0 < self.memory_fraction <= 0.9:
            raise ValueError(f"memory_fraction {self.memory_fraction}: must be in (0, 0.9]")
        if self.arith_elements < 1 or self.min_memory_bytes < 8 or self.time_budget_s <= 0 or not self.patterns:
            raise ValueError("arith_elements, min_memory_bytes, time_budget_s and patterns must be positive")


@dataclass
class CudaResult:
    """What the checks found: each check that ran, and each that did not, with why."""

    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "checks": [{"name": n, "passed": ok, "detail": d} for n, ok, d in self.checks],
            "skipped": dict(self.skipped),
        }


def pci_bus_id(nvml_bus_id: str) -> bytes:
    """NVML's ``00000000:17:00.0`` as CUDA writes bus ids (``0000:17:00.0``): domain, bus, device,
    function in hex. Raises ValueError on anything else."""
    try:
        domain, bus, rest = nvml_bus_id.strip().split(":")
        device, function = rest.split(".")
        parts = int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        raise ValueError(f"{nvml_bus_id!r} is not a PCI bus id (domain:bus:device.function)") from None
    return f"{parts[0]:04x}:{parts[1]:02x}:{parts[2]:02x}.{parts[3]:x}".encode()


class _Session:
    """One CUDA context on one GPU, with everything it allocated, freed on ``close``."""

    def __init__(self, driver: CudaDriver) -> None:
        self.driver = driver
        self.context = ctypes.c_void_p()
        self.module = ctypes.c_void_p()
        self.allocations: list[int] = []

    def call(self, name: str, *args: Any) -> None:
        code = int(getattr(self.driver, name)(*args))
        if code != CUDA_SUCCESS:
            raise CudaError(name, code=code, name=self.error_name(code))

    def error_name(self, code: int) -> str:
        out = ctypes.c_char_p()
        if self.driver.cuGetErrorName(code, ctypes.byref(out)) == CUDA_SUCCESS and out.value:
            return out.value.decode(errors="replace")
        return "CUDA_ERROR_UNKNOWN"

    def alloc(self, size: int) -> int:
        ptr = ctypes.c_uint64()
        self.call("cuMemAlloc_v2", ctypes.byref(ptr), size)
        self.allocations.append(int(ptr.value))
        return int(ptr.value)

    def free(self, ptr: int) -> None:
        self.allocations.remove(ptr)
        self.call("cuMemFree_v2", ptr)

    def function(self, name: bytes) -> ctypes.c_void_p:
        fn = ctypes.c_void_p()
        self.call("cuModuleGetFunction", ctypes.byref(fn), self.module, name)
        return fn

    def launch(self, fn: ctypes.c_void_p, grid: int, *args: ctypes.c_uint32 | ctypes.c_uint64) -> None:
        """Launch ``fn`` on ``grid`` blocks of BLOCK threads and wait for it; ``args`` in PTX order."""
        params = (ctypes.c_void_p * len(args))(*(ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args))
        self.call("cuLaunchKernel", fn, grid, 1, 1, BLOCK, 1, 1, 0, None, params, None)
        self.call("cuCtxSynchronize")

    def read(self, src: int, size: int) -> bytes:
        buf = ctypes.create_string_buffer(size)
        self.call("cuMemcpyDtoH_v2", buf, src, size)
        return buf.raw

    def close(self) -> None:
        """Free in reverse order; errors here change nothing (the context goes with the process)."""
        for ptr in reversed(self.allocations):
            self.driver.cuMemFree_v2(ptr)
        self.allocations.clear()
        if self.module.value:
            self.driver.cuModuleUnload(self.module)
        if self.context.value:
            self.driver.cuCtxDestroy_v2(self.context)


def run_checks(
    driver: CudaDriver,
    *,
    bus_id: str,
    config: CudaCheckConfig = CudaCheckConfig(),
    clock: Callable[[], float] = time.monotonic,
) -> CudaResult:
    """The "cuda" check (a kernel computes a known sequence, compared on the host) then the
    "memory" check (patterns written and verified on the GPU, a sample read back) on the GPU at
    ``bus_id``. A check that cannot run is in ``skipped`` with the reason, never passed."""
    result = CudaResult()
    session = _Session(driver)
    try:
        _open(session, bus_id, result)
        if result.skipped or any(not ok for _, ok, _ in result.checks):
            result.skipped.setdefault("memory", "not run: the CUDA check could not run or failed")
            return result
        result.checks.append(_arith(session, config))
        if not result.checks[-1][1]:
            result.skipped["memory"] = "not run: the CUDA check failed"
            return result
        result.checks.append(_memory(session, config, clock))
    except CudaError as exc:
        name = "memory" if any(n == "cuda" for n, _, _ in result.checks) else "cuda"
        result.checks.append((name, False, str(exc)))
        if name == "cuda":
            result.skipped["memory"] = "not run: the CUDA check failed"
    finally:
        session.close()
    return result


def _open(session: _Session, bus_id: str, result: CudaResult) -> None:
    """cuInit, the device at ``bus_id``, a context, the module. Failures land in ``result``."""
    code = session.driver.cuInit(0)
    if code == CUDA_ERROR_NO_DEVICE:
        result.skipped["cuda"] = "CUDA sees no GPU in this container (is it run with the NVIDIA runtime?)"
        return
    if code != CUDA_SUCCESS:
        result.checks.append(("cuda", False, f"cuInit returned {session.error_name(code)} ({code})"))
        return
    device = ctypes.c_int()
    code = session.driver.cuDeviceGetByPCIBusId(ctypes.byref(device), pci_bus_id(bus_id))
    if code != CUDA_SUCCESS:
        result.checks.append(
            (
                "cuda",
                False,
                f"CUDA has no device at PCI bus id {bus_id} that NVML reports "
                f"({session.error_name(code)}); it did not come back from the reset",
            )
        )
        return
    session.call("cuCtxCreate_v2", ctypes.byref(session.context), 0, device.value)
    code = session.driver.cuModuleLoadData(ctypes.byref(session.module), PTX)
    if code in _CANNOT_BUILD:
        result.skipped["cuda"] = f"the driver cannot build gpuchain's test kernels ({session.error_name(code)})"
    elif code != CUDA_SUCCESS:
        result.checks.append(("cuda", False, f"cuModuleLoadData returned {session.error_name(code)} ({code})"))


def _grid(items: int) -> int:
    return max(1, min(math.ceil(items / BLOCK), MAX_GRID))


def _arith(session: _Session, config: CudaCheckConfig) -> tuple[str, bool, str]:
    n = config.arith_elements
    out = session.alloc(4 * n)
    session.launch(
        session.function(b"gpuchain_arith"),
        math.ceil(n / BLOCK),
        ctypes.c_uint64(out),
        ctypes.c_uint32(n),
        ctypes.c_uint32(config.seed),
    )
    got = array.array("I", session.read(out, 4 * n))
    session.free(out)
    wrong = [i for i, v in enumerate(got) if v != (i * ARITH_MULTIPLIER + config.seed) & 0xFFFFFFFF]
    if wrong:
        i = wrong[0]
        want = (i * ARITH_MULTIPLIER + config.seed) & 0xFFFFFFFF
        return "cuda", False, f"{len(wrong)} of {n} results wrong (element {i}: got {got[i]:#x}, want {want:#x})"
    return "cuda", True, f"{n} results right"


def _memory(session: _Session, config: CudaCheckConfig, clock: Callable[[], float]) -> tuple[str, bool, str]:
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    session.call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
    size = min(int(free.value * config.memory_fraction), config.memory_cap_bytes) // 8 * 8
    buf = None
    while size >= config.min_memory_bytes:
        try:
            buf = session.alloc(size)
            break
        except CudaError as exc:
            if exc.code != CUDA_ERROR_OUT_OF_MEMORY:
                raise
            size = size // 2 // 8 * 8
    if buf is None:
        return "memory", False, f"could not allocate {config.min_memory_bytes >> 20} MiB of {free.value >> 20} MiB free"
    errors = session.alloc(4)
    fill, check = session.function(b"gpuchain_fill"), session.function(b"gpuchain_check")
    words = size // 8
    started = clock()
    done: list[str] = []
    for pattern in config.patterns:
        if done and clock() - started > config.time_budget_s:
            break
        session.call("cuMemsetD32_v2", errors, 0, 1)
        args = (
            ctypes.c_uint64(buf),
            ctypes.c_uint64(words),
            ctypes.c_uint32(pattern.use_addr),
            ctypes.c_uint64(pattern.xor),
        )
        session.launch(fill, _grid(words), *args)
        session.launch(check, _grid(words), *args, ctypes.c_uint64(errors))
        bad = int(array.array("I", session.read(errors, 4))[0])
        if bad:
            return "memory", False, f"{pattern.name}: {bad} of {words} words read back wrong"
        sample = _sample_mismatch(session, buf, words, pattern)
        if sample:
            return "memory", False, f"{pattern.name}: {sample}"
        done.append(pattern.name)
    seconds = clock() - started
    left = len(config.patterns) - len(done)
    note = f"; {left} more not started within {config.time_budget_s:g} s" if left else ""
    return "memory", True, f"{len(done)} patterns over {size / (1 << 30):.2f} GiB in {seconds:.1f} s{note}"


def _sample_mismatch(session: _Session, buf: int, words: int, pattern: Pattern) -> str:
    """Read the first and last words back to the host and compare them with the pattern: the GPU
    judging its own memory is checked once against the host's arithmetic."""
    count = min(words, SAMPLE_BYTES // 8)
    for first in sorted({0, words - count}):
        got = array.array("Q", session.read(buf + 8 * first, 8 * count))
        for k, value in enumerate(got):
            want = pattern.word(buf, first + k)
            if value != want:
                return f"word {first + k} read back {value:#x} on the host, want {want:#x}"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run both checks on one GPU and print the JSON result; exit 0 whenever it printed one."""
    parser = argparse.ArgumentParser(description="gpuchain's CUDA and memory check on one GPU (read-write, small)")
    parser.add_argument("--bus-id", required=True, help="the GPU's PCI bus id as NVML reports it")
    parser.add_argument("--memory-fraction", type=float, default=CudaCheckConfig.memory_fraction)
    parser.add_argument("--time-budget", type=float, default=CudaCheckConfig.time_budget_s)
    parser.add_argument("--memory-cap-mib", type=int, default=None, help="test at most this much memory")
    args = parser.parse_args(argv)
    # The GPU is chosen by bus id: a CUDA_VISIBLE_DEVICES inherited from the pod must not hide it.
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    try:
        config = CudaCheckConfig(memory_fraction=args.memory_fraction, time_budget_s=args.time_budget)
        if args.memory_cap_mib is not None:
            cap = args.memory_cap_mib << 20
            config = replace(config, memory_cap_bytes=cap, min_memory_bytes=min(cap, config.min_memory_bytes))
        driver = load_libcuda()
    except LibcudaMissingError as exc:
        result = CudaResult(skipped={"cuda": str(exc), "memory": str(exc)})
    except ValueError as exc:
        print(f"gpuchain.gpu.cuda: {exc}", file=sys.stderr)
        return 2
    else:
        result = run_checks(driver, bus_id=args.bus_id, config=config)
    print(json.dumps(result.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
