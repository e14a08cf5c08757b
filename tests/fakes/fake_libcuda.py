"""A fake ``libcuda.so.1`` for driving gpuchain.gpu.cuda in tests, with no GPU.

It answers the same driver API calls with the same argument shapes the real library receives
through ctypes (out-parameters by reference, ``kernelParams`` as an array of pointers to each
argument) and runs the three kernels on simulated device memory. The kernels' parameter types
are read from the PTX text the code loads, so a host that marshals an argument with the wrong
width reads garbage here as it would on a GPU. Faults: no device, a bus id CUDA does not see, a
PTX the "JIT" rejects, a launch or synchronize error, an arithmetic unit that gets one answer
wrong, a stuck memory bit, too little memory. CUresult values are cuda.h's (CUDA 12.6).
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SUCCESS = 0
ERROR_NAMES = {
    0: "CUDA_SUCCESS",
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    201: "CUDA_ERROR_INVALID_CONTEXT",
    218: "CUDA_ERROR_INVALID_PTX",
    222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
    400: "CUDA_ERROR_INVALID_HANDLE",
    500: "CUDA_ERROR_NOT_FOUND",
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    719: "CUDA_ERROR_LAUNCH_FAILED",
}
_BUS_ID = re.compile(r"^(?:([0-9a-fA-F]+):)?([0-9a-fA-F]+):([0-9a-fA-F]+)(?:\.([0-9a-fA-F]+))?$")
_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\(([^)]*)\)")
_PARAM = re.compile(r"\.param\s+\.(u64|u32|s32|s64|b64|b32)\s+(\w+)")
_SIZES = {"u64": 8, "s64": 8, "b64": 8, "u32": 4, "s32": 4, "b32": 4}
MASK64 = (1 << 64) - 1
ARITH_MULTIPLIER = 0x9E3779B1


def _deref(ref: Any) -> Any:
    """What a ``ctypes.byref(x)`` argument points at (``x``), as the C side would write it."""
    return getattr(ref, "_obj", ref)


def parse_bus_id(text: str) -> tuple[int, int, int, int] | None:
    """cuda.h's accepted forms: [domain]:[bus]:[device].[function], [domain]:[bus]:[device],
    [bus]:[device].[function], all hex."""
    m = _BUS_ID.match(text)
    if m is None or (m.group(1) is None and m.group(4) is None):
        return None
    return int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4) or "0", 16)


@dataclass
class FakeCuda:
    """Build with the GPUs' NVML bus ids; attributes set before a run inject faults."""

    bus_ids: list[str]
    free_bytes: int = 8 << 20
    total_bytes: int = 16 << 20
    no_device: bool = False
    reject_ptx: int = 0
    """A CUresult cuModuleLoadData returns instead of loading (e.g. 218 invalid PTX)."""
    launch_error: int = 0
    sync_error: int = 0
    wrong_arith_at: int | None = None
    stuck_bit: tuple[int, int] | None = None
    """(word index into the memory-test buffer, bit of that 64-bit word) that always reads 0."""
    max_alloc: int | None = None
    calls: list[str] = field(default_factory=list)
    memory: dict[int, np.ndarray] = field(default_factory=dict)
    contexts: set[int] = field(default_factory=set)
    modules: dict[int, dict[str, list[str]]] = field(default_factory=dict)
    functions: dict[int, tuple[str, list[str]]] = field(default_factory=dict)
    launches: list[str] = field(default_factory=list)
    initialized: bool = False
    _next_handle: int = 0x1000
    _next_address: int = 0x7F00_0000_0000

    # ---- helpers -----------------------------------------------------------------------------

    def _handle(self) -> int:
        self._next_handle += 16
        return self._next_handle

    def _ready(self, name: str) -> int:
        self.calls.append(name)
        if not self.initialized:
            return 3
        if name not in ("cuDeviceGetByPCIBusId", "cuCtxCreate_v2") and not self.contexts:
            return 201
        return SUCCESS

    def _find(self, address: int, size: int) -> tuple[np.ndarray, int] | None:
        for base, mem in self.memory.items():
            if base <= address and address + size <= base + mem.size:
                return mem, address - base
        return None

    def _test_buffer(self) -> int:
        return max(self.memory, key=lambda b: self.memory[b].size)

    # ---- the driver API ----------------------------------------------------------------------

    def cuInit(self, flags: int) -> int:
        self.calls.append("cuInit")
        if self.no_device:
            return 100
        self.initialized = flags == 0
        return SUCCESS if flags == 0 else 1

    def cuGetErrorName(self, code: int, out: Any) -> int:
        if code not in ERROR_NAMES:
            return 1
        _deref(out).value = ERROR_NAMES[code].encode()
        return SUCCESS

    def cuDeviceGetByPCIBusId(self, dev: Any, bus_id: bytes) -> int:
        if (code := self._ready("cuDeviceGetByPCIBusId")) != SUCCESS:
            return code
        wanted = parse_bus_id(bus_id.decode())
        if wanted is None:
            return 1
        for ordinal, known in enumerate(self.bus_ids):
            if parse_bus_id(known) == wanted:
                _deref(dev).value = ordinal
                return SUCCESS
        return 101

    def cuCtxCreate_v2(self, ctx: Any, flags: int, dev: int) -> int:
        if (code := self._ready("cuCtxCreate_v2")) != SUCCESS:
            return code
        if not 0 <= int(dev) < len(self.bus_ids):
            return 101
        handle = self._handle()
        self.contexts.add(handle)
        _deref(ctx).value = handle
        return SUCCESS

    def cuCtxDestroy_v2(self, ctx: Any) -> int:
        self.calls.append("cuCtxDestroy_v2")
        handle = _deref(ctx).value if hasattr(_deref(ctx), "value") else ctx
        if handle not in self.contexts:
            return 201
        self.contexts.discard(handle)
        return SUCCESS

    def cuCtxSynchronize(self) -> int:
        if (code := self._ready("cuCtxSynchronize")) != SUCCESS:
            return code
        return self.sync_error

    def cuModuleLoadData(self, module: Any, image: bytes) -> int:
        if (code := self._ready("cuModuleLoadData")) != SUCCESS:
            return code
        if self.reject_ptx:
            return self.reject_ptx
        text = image.decode()
        if not text.startswith(".version") or ".target sm_" not in text or ".address_size 64" not in text:
            return 218
        entries = {name: [t for t, _ in _PARAM.findall(params)] for name, params in _ENTRY.findall(text)}
        handle = self._handle()
        self.modules[handle] = entries
        _deref(module).value = handle
        return SUCCESS

    def cuModuleGetFunction(self, function: Any, module: Any, name: bytes) -> int:
        if (code := self._ready("cuModuleGetFunction")) != SUCCESS:
            return code
        entries = self.modules.get(_value(module))
        if entries is None:
            return 400
        if name.decode() not in entries:
            return 500
        handle = self._handle()
        self.functions[handle] = (name.decode(), entries[name.decode()])
        _deref(function).value = handle
        return SUCCESS

    def cuModuleUnload(self, module: Any) -> int:
        self.calls.append("cuModuleUnload")
        return SUCCESS if self.modules.pop(_value(module), None) is not None else 400

    def cuMemGetInfo_v2(self, free: Any, total: Any) -> int:
        if (code := self._ready("cuMemGetInfo_v2")) != SUCCESS:
            return code
        _deref(free).value = self.free_bytes
        _deref(total).value = self.total_bytes
        return SUCCESS

    def cuMemAlloc_v2(self, dptr: Any, size: int) -> int:
        if (code := self._ready("cuMemAlloc_v2")) != SUCCESS:
            return code
        used = sum(m.size for m in self.memory.values())
        if size <= 0:
            return 1
        if used + size > self.free_bytes or (self.max_alloc is not None and size > self.max_alloc):
            return 2
        address = self._next_address
        self._next_address += (size + 511) // 512 * 512 + 512
        self.memory[address] = np.zeros(size, dtype=np.uint8)
        _deref(dptr).value = address
        return SUCCESS

    def cuMemFree_v2(self, dptr: int) -> int:
        self.calls.append("cuMemFree_v2")
        return SUCCESS if self.memory.pop(int(dptr), None) is not None else 1

    def cuMemsetD32_v2(self, dptr: int, value: int, count: int) -> int:
        if (code := self._ready("cuMemsetD32_v2")) != SUCCESS:
            return code
        found = self._find(int(dptr), 4 * int(count))
        if found is None:
            return 1
        mem, off = found
        mem[off : off + 4 * count].view(np.uint32)[:] = value
        return SUCCESS

    def cuMemcpyDtoH_v2(self, dst: Any, src: int, size: int) -> int:
        if (code := self._ready("cuMemcpyDtoH_v2")) != SUCCESS:
            return code
        found = self._find(int(src), int(size))
        if found is None:
            return 1
        mem, off = found
        ctypes.memmove(dst, mem[off : off + size].tobytes(), size)
        return SUCCESS

    def cuLaunchKernel(
        self,
        function: Any,
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
    ) -> int:
        if (code := self._ready("cuLaunchKernel")) != SUCCESS:
            return code
        found = self.functions.get(_value(function))
        if found is None:
            return 400
        if params is None or extra is not None or min(grid_x, grid_y, grid_z, block_x, block_y, block_z) < 1:
            return 1
        if self.launch_error:
            return self.launch_error
        name, types = found
        values = []
        for k, t in enumerate(types):
            pointer = params[k]
            ctype = ctypes.c_uint64 if _SIZES[t] == 8 else ctypes.c_uint32
            values.append(int(ctypes.cast(pointer, ctypes.POINTER(ctype)).contents.value))
        self.launches.append(name)
        threads = grid_x * grid_y * grid_z * block_x * block_y * block_z
        return getattr(self, f"_kernel_{name.removeprefix('gpuchain_')}")(threads, *values)

    # ---- the kernels, as the PTX defines them ------------------------------------------------

    def _kernel_arith(self, threads: int, out: int, n: int, seed: int) -> int:
        count = min(n, threads)
        found = self._find(out, 4 * count)
        if found is None:
            return 700
        mem, off = found
        i = np.arange(count, dtype=np.uint64)
        values = ((i * ARITH_MULTIPLIER + seed) & 0xFFFFFFFF).astype(np.uint32)
        if self.wrong_arith_at is not None and self.wrong_arith_at < count:
            values[self.wrong_arith_at] ^= 1
        mem[off : off + 4 * count].view(np.uint32)[:] = values
        return SUCCESS

    def _pattern(self, base: int, words: int, use_addr: int, xor: int) -> np.ndarray:
        i = np.arange(words, dtype=np.uint64)
        value = np.uint64(base) + i * np.uint64(8) if use_addr else np.left_shift(np.uint64(1), i & np.uint64(63))
        return value ^ np.uint64(xor & MASK64)

    def _kernel_fill(self, threads: int, buf: int, words: int, use_addr: int, xor: int) -> int:
        found = self._find(buf, 8 * words)
        if found is None:
            return 700
        mem, off = found
        cells = mem[off : off + 8 * words].view(np.uint64)
        cells[:] = self._pattern(buf, words, use_addr, xor)
        if self.stuck_bit is not None and buf == self._test_buffer():
            word, bit = self.stuck_bit
            cells[word] &= ~np.uint64(1 << bit)
        return SUCCESS

    def _kernel_check(self, threads: int, buf: int, words: int, use_addr: int, xor: int, errors: int) -> int:
        found, counter = self._find(buf, 8 * words), self._find(errors, 4)
        if found is None or counter is None:
            return 700
        mem, off = found
        cells = mem[off : off + 8 * words].view(np.uint64)
        bad = int(np.count_nonzero(cells != self._pattern(buf, words, use_addr, xor)))
        cmem, coff = counter
        cmem[coff : coff + 4].view(np.uint32)[0] += bad
        return SUCCESS


def _value(handle: Any) -> int:
    return int(handle.value if hasattr(handle, "value") else handle)
