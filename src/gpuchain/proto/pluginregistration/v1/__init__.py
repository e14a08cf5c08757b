"""Generated kubelet API stubs; see gpuchain.proto."""
