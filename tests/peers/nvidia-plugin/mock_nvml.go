// NVML for NVIDIA's device plugin and GFD when they run as gpuchain's test peers: go-nvml's DGX
// A100 mock (eight A100-SXM4-40GB), copied into cmd/nvidia-device-plugin and
// cmd/gpu-feature-discovery by tests/peers/nvidia-plugin/prepare and wired in place of the real
// library. Three things are added around the mock:
//   - the methods the plugin calls are answered here from the mock's data, not through its
//     generated methods, which append every call's arguments to a log that is never trimmed (one
//     GetPreferredAllocation makes over a thousand NVML calls, so the peer's memory would grow for
//     as long as a test drives it);
//   - the methods the plugin calls that the mock leaves nil (and would panic on) are filled: PCI
//     bus ids, the PCIe topology between GPUs, NVLinks to the NVSwitches, MIG device slots (all
//     empty), GPU fabric info (an A100 has none to report), and health event sets on which no
//     event ever arrives;
//   - GPUCHAIN_MOCK_NODE, a JSON object, replaces what the mock makes up (random UUIDs, "Mock"
//     names, bus ids 0000:0N:00.0, driver 550.54.15) with what gpuchain's simulated node reports:
//     {"driverVersion": "570.86.15", "cudaDriverVersion": 12080,
//      "gpus": [{"uuid": "GPU-...", "name": "NVIDIA A100-SXM4-40GB", "pciBusId": "00000000:18:00.0"}, ...]}
//     so a test gives NVIDIA's components and gpuchain's the same node and compares their answers.
//     Bus ids are NVML's (an eight-digit domain), as the plugin and GFD trim them for sysfs.

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	nvinfo "github.com/NVIDIA/go-nvlib/pkg/nvlib/info"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

type mockServer struct {
	*dgxa100.Server
	devices []*mockDevice
}

type mockDevice struct {
	*dgxa100.Device
}

type mockEventSet struct{}

// mockInfo says NVML is present: the plugin looks for libnvidia-ml.so.1 on disk otherwise.
type mockInfo struct {
	nvinfo.Interface
}

func (mockInfo) HasNvml() (bool, string)          { return true, "go-nvml's DGX A100 mock" }
func (mockInfo) ResolvePlatform() nvinfo.Platform { return nvinfo.PlatformNVML }

// mockNode is GPUCHAIN_MOCK_NODE: the simulated node the mock is made to match.
type mockNode struct {
	DriverVersion     string `json:"driverVersion"`
	CudaDriverVersion int    `json:"cudaDriverVersion"`
	Gpus              []struct {
		UUID     string `json:"uuid"`
		Name     string `json:"name"`
		PciBusID string `json:"pciBusId"`
	} `json:"gpus"`
}

func newMockNVML() *mockServer {
	server := dgxa100.New()
	var node mockNode
	if v := os.Getenv("GPUCHAIN_MOCK_NODE"); v != "" {
		if err := json.Unmarshal([]byte(v), &node); err != nil {
			panic(fmt.Sprintf("GPUCHAIN_MOCK_NODE: %v", err))
		}
		if len(node.Gpus) != len(server.Devices) {
			panic(fmt.Sprintf("GPUCHAIN_MOCK_NODE names %d GPUs; the DGX A100 mock has %d", len(node.Gpus), len(server.Devices)))
		}
		server.DriverVersion, server.CudaDriverVersion = node.DriverVersion, node.CudaDriverVersion
	}
	s := &mockServer{Server: server}
	for i, d := range server.Devices {
		dev := d.(*dgxa100.Device)
		if node.Gpus != nil {
			dev.UUID, dev.Name, dev.PciBusID = node.Gpus[i].UUID, node.Gpus[i].Name, node.Gpus[i].PciBusID
		}
		s.devices = append(s.devices, &mockDevice{dev})
	}
	return s
}

func (s *mockServer) Init() nvml.Return                  { return nvml.SUCCESS }
func (s *mockServer) InitWithFlags(uint32) nvml.Return   { return nvml.SUCCESS }
func (s *mockServer) Shutdown() nvml.Return              { return nvml.SUCCESS }
func (s *mockServer) Extensions() nvml.ExtendedInterface { return s }
func (s *mockServer) LookupSymbol(string) error          { return nil }
func (s *mockServer) SystemGetDriverVersion() (string, nvml.Return) {
	return s.DriverVersion, nvml.SUCCESS
}
func (s *mockServer) SystemGetNVMLVersion() (string, nvml.Return) { return s.NvmlVersion, nvml.SUCCESS }
func (s *mockServer) SystemGetCudaDriverVersion() (int, nvml.Return) {
	return s.CudaDriverVersion, nvml.SUCCESS
}
func (s *mockServer) SystemGetCudaDriverVersion_v2() (int, nvml.Return) {
	return s.CudaDriverVersion, nvml.SUCCESS
}
func (s *mockServer) DeviceGetCount() (int, nvml.Return) { return len(s.devices), nvml.SUCCESS }
func (s *mockServer) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if i < 0 || i >= len(s.devices) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return s.devices[i], nvml.SUCCESS
}
func (s *mockServer) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	for _, d := range s.devices {
		if d.UUID == uuid {
			return d, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}
func (s *mockServer) DeviceGetHandleByPciBusId(busID string) (nvml.Device, nvml.Return) {
	want := pciInfo(busID, 0).BusId
	for _, d := range s.devices {
		if pciInfo(d.PciBusID, 0).BusId == want {
			return d, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}
func (s *mockServer) EventSetCreate() (nvml.EventSet, nvml.Return) {
	return mockEventSet{}, nvml.SUCCESS
}

// Wait sleeps out its timeout: the simulated GPUs never raise an XID or ECC event.
func (mockEventSet) Wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	time.Sleep(time.Duration(timeoutMs) * time.Millisecond)
	return nvml.EventData{}, nvml.ERROR_TIMEOUT
}
func (mockEventSet) Free() nvml.Return { return nvml.SUCCESS }

func (d *mockDevice) GetUUID() (string, nvml.Return)          { return d.UUID, nvml.SUCCESS }
func (d *mockDevice) GetIndex() (int, nvml.Return)            { return d.Index, nvml.SUCCESS }
func (d *mockDevice) GetMinorNumber() (int, nvml.Return)      { return d.Minor, nvml.SUCCESS }
func (d *mockDevice) GetName() (string, nvml.Return)          { return d.Name, nvml.SUCCESS }
func (d *mockDevice) GetBrand() (nvml.BrandType, nvml.Return) { return d.Brand, nvml.SUCCESS }
func (d *mockDevice) GetArchitecture() (nvml.DeviceArchitecture, nvml.Return) {
	return d.Architecture, nvml.SUCCESS
}
func (d *mockDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) { return d.MemoryInfo, nvml.SUCCESS }
func (d *mockDevice) GetCudaComputeCapability() (int, int, nvml.Return) {
	return d.CudaComputeCapability.Major, d.CudaComputeCapability.Minor, nvml.SUCCESS
}
func (d *mockDevice) GetMigMode() (int, int, nvml.Return)    { return d.MigMode, d.MigMode, nvml.SUCCESS }
func (d *mockDevice) IsMigDeviceHandle() (bool, nvml.Return) { return false, nvml.SUCCESS }

// GetPciInfo adds the bus id the mock leaves empty (the plugin and its allocator key devices by it).
func (d *mockDevice) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	return pciInfo(d.PciBusID, 0x20B010DE), nvml.SUCCESS
}

// pciInfo as NVML fills it: busId with an eight-digit domain, busIdLegacy with a four-digit one.
func pciInfo(busID string, deviceID uint32) nvml.PciInfo {
	var domain, bus, dev, fn uint32
	if _, err := fmt.Sscanf(busID, "%x:%x:%x.%x", &domain, &bus, &dev, &fn); err != nil {
		panic(fmt.Sprintf("PCI bus id %q: %v", busID, err))
	}
	p := nvml.PciInfo{Domain: domain, Bus: bus, Device: dev, PciDeviceId: deviceID}
	copy(p.BusId[:], fmt.Sprintf("%08X:%02X:%02X.%X", domain, bus, dev, fn))
	copy(p.BusIdLegacy[:], fmt.Sprintf("%04X:%02X:%02X.%X", domain, bus, dev, fn))
	return p
}

// GetTopologyCommonAncestor: as on a DGX A100, GPUs 2k and 2k+1 share a PCIe switch, GPUs 0-3
// and 4-7 share a CPU socket, and a pair across the sockets meets at the system level.
func (d *mockDevice) GetTopologyCommonAncestor(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
	o, ret := other.GetIndex() // other comes wrapped by go-nvlib, so it is no *mockDevice
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	switch {
	case o == d.Index:
		return nvml.TOPOLOGY_INTERNAL, nvml.SUCCESS
	case o/2 == d.Index/2:
		return nvml.TOPOLOGY_MULTIPLE, nvml.SUCCESS
	case o/4 == d.Index/4:
		return nvml.TOPOLOGY_NODE, nvml.SUCCESS
	}
	return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
}

// An A100 SXM4 has twelve NVLinks, each to one of the board's six NVSwitches, never to a GPU.
const nvlinks = 12

func (d *mockDevice) GetNvLinkState(link int) (nvml.EnableState, nvml.Return) {
	if link < 0 || link >= nvml.NVLINK_MAX_LINKS {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	if link >= nvlinks {
		return nvml.FEATURE_DISABLED, nvml.SUCCESS
	}
	return nvml.FEATURE_ENABLED, nvml.SUCCESS
}

func (d *mockDevice) GetNvLinkRemotePciInfo(link int) (nvml.PciInfo, nvml.Return) {
	if link < 0 || link >= nvlinks {
		return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	return pciInfo(fmt.Sprintf("0000:%02x:00.0", 0xc0+link%6), 0x1af110de), nvml.SUCCESS
}

func (d *mockDevice) GetSupportedEventTypes() (uint64, nvml.Return) {
	return uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError), nvml.SUCCESS
}
func (d *mockDevice) RegisterEvents(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }

// An A100 holds up to seven MIG devices; the mock's GPUs start with MIG disabled and none made.
func (d *mockDevice) GetMaxMigDeviceCount() (int, nvml.Return) { return 7, nvml.SUCCESS }
func (d *mockDevice) GetMigDeviceHandleByIndex(int) (nvml.Device, nvml.Return) {
	return nil, nvml.ERROR_NOT_FOUND
}

// GetGpuFabricInfo: an A100's NVSwitch fabric is not the multi-node NVLink fabric this reports on
// (Hopper and later), so the driver answers NOT_SUPPORTED, and GFD adds no IMEX clique labels.
func (d *mockDevice) GetGpuFabricInfo() (nvml.GpuFabricInfo, nvml.Return) {
	return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED
}
