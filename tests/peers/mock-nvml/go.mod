// The mock NVML library of tests/peers/test_nvidia_peers.py: go-nvml's DGX A100 mock behind the
// NVML C API (main.go says what it answers). go-nvml at the version NVIDIA's device plugin v0.18.0
// pins (tests/peers/nvidia-plugin builds that plugin on the same mock). Built by ./build.
module gpuchain.local/tests/peers/mock-nvml

go 1.24.0

require github.com/NVIDIA/go-nvml v0.13.0-1

require github.com/google/uuid v1.6.0 // indirect
