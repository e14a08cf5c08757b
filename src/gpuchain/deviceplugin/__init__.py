"""The kubelet device plugin (API v1beta1): GPUs, MIG devices and shared replicas become node resources."""
