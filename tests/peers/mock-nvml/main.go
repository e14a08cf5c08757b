// libnvidia-ml.so.1 for gpuchain's tests: the NVML C API that gpuchain's NvmlBackend calls through
// nvidia-ml-py (pynvml, ctypes), answered by go-nvml's mock of a DGX A100 (eight A100-SXM4-40GB,
// github.com/NVIDIA/go-nvml pkg/nvml/mock/dgxa100, the version go.mod pins: the one NVIDIA's
// device plugin v0.18.0 builds with). tests/peers/mock-nvml/build makes it with
// `go build -buildmode=c-shared`; tests/peers/test_nvidia_peers.py loads it by LD_LIBRARY_PATH.
//
// The C types are go-nvml's own nvml.h, so every struct has the layout the driver's library has,
// and so the one pynvml's ctypes structures declare.
//
// What each function answers:
//   - the mock's answer, where the mock defines one (a *Func field it sets). The bridge calls that
//     field, never the mock's method of the same name: the generated methods append every call's
//     arguments to a log that is never trimmed, so a process polling NVML would grow for ever;
//   - two answers the mock leaves out and that NvmlBackend cannot read an inventory without, filled
//     here from a DGX A100's facts: the PCI bus id inside nvmlPciInfo_t (the mock fills only the
//     device id; its own Device.PciBusID field holds the bus id) and the PCIe common ancestor of
//     two GPUs (the mock has none; nvidia-smi topo -m on a DGX A100 shows each pair of GPUs
//     behind one PCIe switch and four GPUs per CPU socket);
//   - NVML_ERROR_NOT_SUPPORTED for every other function nvml.h declares (nvml_stubs.c, written by
//     the build script from nvml.h), as a driver answers for a feature the GPU lacks: telemetry
//     counters, event sets, NVLink state, MIG device handles, field values.
package main

/*
#cgo CFLAGS: -DNVML_NO_UNVERSIONED_FUNC_DEFS=1
#include <stdint.h>
#include <string.h>
// nvml.h declares these two with const pointers, which an exported Go function cannot spell: its
// declarations are renamed away, and the export's own (same ABI, no const) is the only one.
#define nvmlDeviceGetHandleByUUID gpuchain_nvml_h_nvmlDeviceGetHandleByUUID
#define nvmlErrorString gpuchain_nvml_h_nvmlErrorString
#include "nvml.h"
#undef nvmlDeviceGetHandleByUUID
#undef nvmlErrorString

// A device handle is the GPU's index + 1 (never NULL), not a Go pointer: C may not keep those.
// go-nvml's nvml.h wraps the driver's handle pointer in a one-member struct, which the C ABI passes
// and stores exactly as the bare pointer that nvidia-ml-py hands over.
static nvmlDevice_t gpuchain_handle(uintptr_t n) { nvmlDevice_t d = {(struct nvmlDevice_st *)n}; return d; }
static uintptr_t gpuchain_handle_number(nvmlDevice_t d) { return (uintptr_t)d.handle; }
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

var server = dgxa100.New()

func main() {}

func ret(r nvml.Return) C.nvmlReturn_t { return C.nvmlReturn_t(r) }

var notSupported = ret(nvml.ERROR_NOT_SUPPORTED)

// device is the mock's GPU behind a handle, or nil for a handle this library never gave out.
func device(h C.nvmlDevice_t) *dgxa100.Device {
	n := int(C.gpuchain_handle_number(h))
	if n < 1 || n > len(server.Devices) {
		return nil
	}
	return server.Devices[n-1].(*dgxa100.Device)
}

func handle(d *dgxa100.Device) C.nvmlDevice_t { return C.gpuchain_handle(C.uintptr_t(d.Index + 1)) }

// putString copies s into the caller's buffer of length bytes, NUL-terminated, as NVML does.
func putString(s string, r nvml.Return, out *C.char, length C.uint) C.nvmlReturn_t {
	if r != nvml.SUCCESS {
		return ret(r)
	}
	if out == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	if len(s)+1 > int(length) {
		return ret(nvml.ERROR_INSUFFICIENT_SIZE)
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(out)), int(length))
	buf[copy(buf, s)] = 0
	return ret(nvml.SUCCESS)
}

// putChars copies s into a fixed char array of a struct, NUL-terminated.
func putChars(dst []C.char, s string) {
	n := copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), len(dst)-1), s)
	dst[n] = 0
}

//export nvmlInitWithFlags
func nvmlInitWithFlags(C.uint) C.nvmlReturn_t { return ret(server.InitFunc()) }

//export nvmlInit_v2
func nvmlInit_v2() C.nvmlReturn_t { return ret(server.InitFunc()) }

//export nvmlShutdown
func nvmlShutdown() C.nvmlReturn_t { return ret(server.ShutdownFunc()) }

// errorStrings holds one C string per return code asked about: made once, never freed (the caller
// keeps the pointer), so at most one per code.
var errorStrings sync.Map

//export nvmlErrorString
func nvmlErrorString(r C.nvmlReturn_t) *C.char {
	if s, ok := errorStrings.Load(r); ok {
		return s.(*C.char)
	}
	s, _ := errorStrings.LoadOrStore(r, C.CString(nvml.Return(r).Error()))
	return s.(*C.char)
}

//export nvmlSystemGetDriverVersion
func nvmlSystemGetDriverVersion(version *C.char, length C.uint) C.nvmlReturn_t {
	v, r := server.SystemGetDriverVersionFunc()
	return putString(v, r, version, length)
}

//export nvmlSystemGetCudaDriverVersion
func nvmlSystemGetCudaDriverVersion(version *C.int) C.nvmlReturn_t {
	v, r := server.SystemGetCudaDriverVersionFunc()
	if r == nvml.SUCCESS {
		*version = C.int(v)
	}
	return ret(r)
}

//export nvmlDeviceGetCount_v2
func nvmlDeviceGetCount_v2(count *C.uint) C.nvmlReturn_t {
	n, r := server.DeviceGetCountFunc()
	if r == nvml.SUCCESS {
		*count = C.uint(n)
	}
	return ret(r)
}

//export nvmlDeviceGetHandleByIndex_v2
func nvmlDeviceGetHandleByIndex_v2(index C.uint, out *C.nvmlDevice_t) C.nvmlReturn_t {
	d, r := server.DeviceGetHandleByIndexFunc(int(index))
	if r == nvml.SUCCESS {
		*out = handle(d.(*dgxa100.Device))
	}
	return ret(r)
}

//export nvmlDeviceGetHandleByUUID
func nvmlDeviceGetHandleByUUID(uuid *C.char, out *C.nvmlDevice_t) C.nvmlReturn_t {
	d, r := server.DeviceGetHandleByUUIDFunc(C.GoString(uuid))
	if r == nvml.SUCCESS {
		*out = handle(d.(*dgxa100.Device))
	}
	return ret(r)
}

//export nvmlDeviceGetUUID
func nvmlDeviceGetUUID(h C.nvmlDevice_t, uuid *C.char, length C.uint) C.nvmlReturn_t {
	d := device(h)
	if d == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	v, r := d.GetUUIDFunc()
	return putString(v, r, uuid, length)
}

//export nvmlDeviceGetName
func nvmlDeviceGetName(h C.nvmlDevice_t, name *C.char, length C.uint) C.nvmlReturn_t {
	d := device(h)
	if d == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	v, r := d.GetNameFunc()
	return putString(v, r, name, length)
}

//export nvmlDeviceGetMinorNumber
func nvmlDeviceGetMinorNumber(h C.nvmlDevice_t, minor *C.uint) C.nvmlReturn_t {
	d := device(h)
	if d == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	v, r := d.GetMinorNumberFunc()
	if r == nvml.SUCCESS {
		*minor = C.uint(v)
	}
	return ret(r)
}

//export nvmlDeviceGetCudaComputeCapability
func nvmlDeviceGetCudaComputeCapability(h C.nvmlDevice_t, major, minor *C.int) C.nvmlReturn_t {
	d := device(h)
	if d == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	ma, mi, r := d.GetCudaComputeCapabilityFunc()
	if r == nvml.SUCCESS {
		*major, *minor = C.int(ma), C.int(mi)
	}
	return ret(r)
}

//export nvmlDeviceGetMemoryInfo
func nvmlDeviceGetMemoryInfo(h C.nvmlDevice_t, memory *C.nvmlMemory_t) C.nvmlReturn_t {
	d := device(h)
	if d == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	m, r := d.GetMemoryInfoFunc()
	if r == nvml.SUCCESS {
		memory.total, memory.free, memory.used = C.ulonglong(m.Total), C.ulonglong(m.Free), C.ulonglong(m.Used)
	}
	return ret(r)
}

//export nvmlDeviceGetMigMode
func nvmlDeviceGetMigMode(h C.nvmlDevice_t, current, pending *C.uint) C.nvmlReturn_t {
	d := device(h)
	if d == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	c, p, r := d.GetMigModeFunc()
	if r == nvml.SUCCESS {
		*current, *pending = C.uint(c), C.uint(p)
	}
	return ret(r)
}

// nvmlDeviceGetPciInfo_v3 is the mock's PCI info (the device id) with the bus id the mock keeps in
// Device.PciBusID ("0000:03:00.0") written as NVML writes it: busId with an eight-digit domain,
// busIdLegacy with four, and the domain, bus and device numbers.
//
//export nvmlDeviceGetPciInfo_v3
func nvmlDeviceGetPciInfo_v3(h C.nvmlDevice_t, pci *C.nvmlPciInfo_t) C.nvmlReturn_t {
	d := device(h)
	if d == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	p, r := d.GetPciInfoFunc()
	if r != nvml.SUCCESS {
		return ret(r)
	}
	var domain, bus, dev, fn uint32
	if _, err := fmt.Sscanf(d.PciBusID, "%x:%x:%x.%x", &domain, &bus, &dev, &fn); err != nil {
		return ret(nvml.ERROR_UNKNOWN)
	}
	*pci = C.nvmlPciInfo_t{}
	pci.domain, pci.bus, pci.device = C.uint(domain), C.uint(bus), C.uint(dev)
	pci.pciDeviceId, pci.pciSubSystemId = C.uint(p.PciDeviceId), C.uint(p.PciSubSystemId)
	putChars(pci.busId[:], fmt.Sprintf("%08X:%02X:%02X.%X", domain, bus, dev, fn))
	putChars(pci.busIdLegacy[:], fmt.Sprintf("%04X:%02X:%02X.%X", domain, bus, dev, fn))
	return ret(nvml.SUCCESS)
}

// nvmlDeviceGetTopologyCommonAncestor: as on a DGX A100, GPUs 2k and 2k+1 share a PCIe switch
// (MULTIPLE), GPUs 0-3 and 4-7 a CPU socket (NODE), and two GPUs across the sockets meet at the
// system level (SYSTEM).
//
//export nvmlDeviceGetTopologyCommonAncestor
func nvmlDeviceGetTopologyCommonAncestor(h1, h2 C.nvmlDevice_t, level *C.nvmlGpuTopologyLevel_t) C.nvmlReturn_t {
	a, b := device(h1), device(h2)
	if a == nil || b == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	switch {
	case a.Index == b.Index:
		*level = C.NVML_TOPOLOGY_INTERNAL
	case a.Index/2 == b.Index/2:
		*level = C.NVML_TOPOLOGY_MULTIPLE
	case a.Index/4 == b.Index/4:
		*level = C.NVML_TOPOLOGY_NODE
	default:
		*level = C.NVML_TOPOLOGY_SYSTEM
	}
	return ret(nvml.SUCCESS)
}

// nvmlDeviceGetGpuInstanceProfileInfoV answers from the mock's profile (its
// GetGpuInstanceProfileInfo): the v2 structure is the v1 one with a version and a name, which the
// mock does not have.
//
//export nvmlDeviceGetGpuInstanceProfileInfoV
func nvmlDeviceGetGpuInstanceProfileInfoV(h C.nvmlDevice_t, profile C.uint, info *C.nvmlGpuInstanceProfileInfo_v2_t) C.nvmlReturn_t {
	d := device(h)
	if d == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	p, r := d.GetGpuInstanceProfileInfoFunc(int(profile))
	if r != nvml.SUCCESS {
		return ret(r)
	}
	version := info.version
	*info = C.nvmlGpuInstanceProfileInfo_v2_t{
		version:             version,
		id:                  C.uint(p.Id),
		isP2pSupported:      C.uint(p.IsP2pSupported),
		sliceCount:          C.uint(p.SliceCount),
		instanceCount:       C.uint(p.InstanceCount),
		multiprocessorCount: C.uint(p.MultiprocessorCount),
		copyEngineCount:     C.uint(p.CopyEngineCount),
		decoderCount:        C.uint(p.DecoderCount),
		encoderCount:        C.uint(p.EncoderCount),
		jpegCount:           C.uint(p.JpegCount),
		ofaCount:            C.uint(p.OfaCount),
		memorySizeMB:        C.ulonglong(p.MemorySizeMB),
	}
	return ret(nvml.SUCCESS)
}

// nvmlDeviceGetGpuInstances lists the mock's GPU instances of one profile. Nothing here creates
// one (nvmlDeviceCreateGpuInstance* answer NOT_SUPPORTED), so the list is empty; were it not,
// instance handles would be needed that this library does not make, so it says NOT_SUPPORTED
// rather than a count without handles.
//
//export nvmlDeviceGetGpuInstances
func nvmlDeviceGetGpuInstances(h C.nvmlDevice_t, profileID C.uint, _ *C.nvmlGpuInstance_t, count *C.uint) C.nvmlReturn_t {
	d := device(h)
	if d == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	gis, r := d.GetGpuInstancesFunc(&nvml.GpuInstanceProfileInfo{Id: uint32(profileID)})
	if r != nvml.SUCCESS {
		return ret(r)
	}
	if len(gis) > 0 {
		return notSupported
	}
	*count = 0
	return ret(nvml.SUCCESS)
}
