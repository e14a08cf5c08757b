/*
 * A fake libcuda.so.1 in C, for testing gpuchain.gpu.cuda through real ctypes and dlopen (the
 * Python fake in fake_libcuda.py bypasses ctypes' argument conversion; this one does not).
 *
 * It exports the driver API symbols gpuchain binds, with cuda.h's C signatures, and runs the
 * three kernels on host memory: a "device pointer" is a host address. Kernel parameters are read
 * from kernelParams exactly as the driver reads them (one pointer per argument), with the widths
 * the PTX declares. Faults come from the environment, read on each call:
 *   FAKE_CUDA_BUS_IDS   comma-separated bus ids of the GPUs CUDA sees (default 0000:17:00.0)
 *   FAKE_CUDA_NO_DEVICE cuInit answers CUDA_ERROR_NO_DEVICE
 *   FAKE_CUDA_STUCK     "WORD:BIT": that bit of that word of the largest buffer reads 0
 * Built by tests/gpu/test_cuda_ctypes.py with the system C compiler; not shipped.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

#define MAX_ALLOCS 64
static int initialized;
static int contexts;
static const char *module_ptx;
static struct { CUdeviceptr ptr; size_t size; } allocs[MAX_ALLOCS];

static const size_t FREE_BYTES = 256u << 20, TOTAL_BYTES = 512u << 20;

static int parse_bus(const char *text, unsigned v[4]) {
    v[3] = 0;
    if (sscanf(text, "%x:%x:%x.%x", &v[0], &v[1], &v[2], &v[3]) >= 3) return 1;
    return 0;
}

CUresult cuGetErrorName(CUresult error, const char **name) {
    switch (error) {
    case 0: *name = "CUDA_SUCCESS"; return 0;
    case 1: *name = "CUDA_ERROR_INVALID_VALUE"; return 0;
    case 2: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
    case 3: *name = "CUDA_ERROR_NOT_INITIALIZED"; return 0;
    case 100: *name = "CUDA_ERROR_NO_DEVICE"; return 0;
    case 101: *name = "CUDA_ERROR_INVALID_DEVICE"; return 0;
    case 218: *name = "CUDA_ERROR_INVALID_PTX"; return 0;
    case 500: *name = "CUDA_ERROR_NOT_FOUND"; return 0;
    default: return 1;
    }
}

CUresult cuInit(unsigned int flags) {
    if (getenv("FAKE_CUDA_NO_DEVICE")) return 100;
    if (flags != 0) return 1;
    initialized = 1;
    return 0;
}

CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *bus_id) {
    if (!initialized) return 3;
    unsigned want[4], have[4];
    if (!parse_bus(bus_id, want)) return 1;
    const char *list = getenv("FAKE_CUDA_BUS_IDS");
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", list ? list : "0000:17:00.0");
    int ordinal = 0;
    for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ","), ordinal++) {
        if (parse_bus(tok, have) && memcmp(want, have, sizeof want) == 0) {
            *dev = ordinal;
            return 0;
        }
    }
    return 101;
}

CUresult cuCtxCreate_v2(void **ctx, unsigned int flags, CUdevice dev) {
    if (!initialized) return 3;
    if (dev < 0 || flags != 0) return 1;
    contexts++;
    *ctx = (void *)(uintptr_t)(0x1000 + contexts);
    return 0;
}

CUresult cuCtxDestroy_v2(void *ctx) {
    if (!ctx || contexts == 0) return 201;
    contexts--;
    return 0;
}

CUresult cuCtxSynchronize(void) { return contexts ? 0 : 201; }

CUresult cuModuleLoadData(void **module, const void *image) {
    if (!contexts) return 201;
    const char *ptx = image;
    if (strncmp(ptx, ".version ", 9) != 0 || !strstr(ptx, ".target sm_") || !strstr(ptx, ".address_size 64"))
        return 218;
    module_ptx = ptx;
    *module = (void *)ptx;
    return 0;
}

CUresult cuModuleUnload(void *module) {
    if (!module || module != (void *)module_ptx) return 400;
    module_ptx = NULL;
    return 0;
}

static const char *KERNELS[] = {"gpuchain_arith", "gpuchain_fill", "gpuchain_check"};

CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
    if (!module || module != (void *)module_ptx) return 400;
    char entry[128];
    snprintf(entry, sizeof entry, ".entry %s(", name);
    if (!strstr(module_ptx, entry)) return 500;
    for (uintptr_t k = 0; k < 3; k++) {
        if (strcmp(name, KERNELS[k]) == 0) {
            *function = (void *)(k + 1);
            return 0;
        }
    }
    return 500;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    if (!contexts) return 201;
    *free_bytes = FREE_BYTES;
    *total = TOTAL_BYTES;
    return 0;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    if (!contexts) return 201;
    size_t used = 0;
    int slot = -1;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        used += allocs[i].size;
        if (!allocs[i].ptr && slot < 0) slot = i;
    }
    if (size == 0) return 1;
    if (slot < 0 || used + size > FREE_BYTES) return 2;
    void *p = aligned_alloc(512, (size + 511) / 512 * 512);
    if (!p) return 2;
    allocs[slot].ptr = (CUdeviceptr)(uintptr_t)p;
    allocs[slot].size = size;
    *dptr = allocs[slot].ptr;
    return 0;
}

static int find(CUdeviceptr p, size_t size) {
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].ptr && allocs[i].ptr <= p && p + size <= allocs[i].ptr + allocs[i].size) return i;
    return -1;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].ptr == dptr && dptr) {
            free((void *)(uintptr_t)dptr);
            allocs[i].ptr = 0;
            allocs[i].size = 0;
            return 0;
        }
    }
    return 1;
}

CUresult cuMemsetD32_v2(CUdeviceptr dptr, unsigned int value, size_t count) {
    if (find(dptr, 4 * count) < 0) return 1;
    uint32_t *p = (uint32_t *)(uintptr_t)dptr;
    for (size_t i = 0; i < count; i++) p[i] = value;
    return 0;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t size) {
    if (find(src, size) < 0) return 1;
    memcpy(dst, (void *)(uintptr_t)src, size);
    return 0;
}

static uint64_t pattern(uint64_t base, uint64_t i, uint32_t use_addr, uint64_t xor_mask) {
    uint64_t value = use_addr ? base + 8 * i : (uint64_t)1 << (i & 63);
    return value ^ xor_mask;
}

static int largest(void) {
    int best = -1;
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].ptr && (best < 0 || allocs[i].size > allocs[best].size)) best = i;
    return best;
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
    (void)shared;
    (void)stream;
    if (!contexts) return 201;
    if (!params || extra || !gx || !gy || !gz || !bx || !by || !bz) return 1;
    uint64_t threads = (uint64_t)gx * gy * gz * bx * by * bz;
    switch ((uintptr_t)f) {
    case 1: { /* gpuchain_arith(.u64 out, .u32 n, .u32 seed) */
        CUdeviceptr out = *(uint64_t *)params[0];
        uint32_t n = *(uint32_t *)params[1], seed = *(uint32_t *)params[2];
        uint64_t count = n < threads ? n : threads;
        if (find(out, 4 * count) < 0) return 700;
        for (uint64_t i = 0; i < count; i++) ((uint32_t *)(uintptr_t)out)[i] = (uint32_t)i * 0x9E3779B1u + seed;
        return 0;
    }
    case 2:   /* gpuchain_fill(.u64 buf, .u64 words, .u32 use_addr, .u64 xor) */
    case 3: { /* gpuchain_check(..., .u64 errors) */
        CUdeviceptr buf = *(uint64_t *)params[0];
        uint64_t words = *(uint64_t *)params[1];
        uint32_t use_addr = *(uint32_t *)params[2];
        uint64_t xor_mask = *(uint64_t *)params[3];
        if (find(buf, 8 * words) < 0) return 700;
        uint64_t *cells = (uint64_t *)(uintptr_t)buf;
        if ((uintptr_t)f == 2) {
            for (uint64_t i = 0; i < words; i++) cells[i] = pattern(buf, i, use_addr, xor_mask);
            const char *stuck = getenv("FAKE_CUDA_STUCK");
            unsigned long long word, bit;
            int big = largest();
            if (stuck && sscanf(stuck, "%llu:%llu", &word, &bit) == 2 && big >= 0 && allocs[big].ptr == buf &&
                word < words)
                cells[word] &= ~((uint64_t)1 << bit);
            return 0;
        }
        CUdeviceptr errors = *(uint64_t *)params[4];
        if (find(errors, 4) < 0) return 700;
        uint32_t bad = 0;
        for (uint64_t i = 0; i < words; i++) bad += cells[i] != pattern(buf, i, use_addr, xor_mask);
        *(uint32_t *)(uintptr_t)errors += bad;
        return 0;
    }
    default:
        return 400;
    }
}
