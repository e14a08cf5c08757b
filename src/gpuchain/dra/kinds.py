"""The driver's name, the resource.k8s.io/v1 kinds it reads and writes, and its DeviceClass.

The kube port only knows the kinds registered with it; DRA's are registered here, from the
layer that uses them, so the port stays free of DRA knowledge.
"""

from __future__ import annotations

from gpuchain.kube.gpu_resources import GPU
from gpuchain.kube.kinds import Kind, register_kind
from gpuchain.kube.objects import Obj

DRIVER = "gpu.gpuchain.io"
"""The DRA driver name: ResourceSlices, allocation results and the DeviceClass all carry it."""

API_VERSION = "resource.k8s.io/v1"
"""DRA's GA API (Kubernetes 1.34)."""

RESOURCE_SLICE = register_kind(
    Kind(api_version=API_VERSION, kind="ResourceSlice", plural="resourceslices", namespaced=False)
)
DEVICE_CLASS = register_kind(
    Kind(api_version=API_VERSION, kind="DeviceClass", plural="deviceclasses", namespaced=False)
)
RESOURCE_CLAIM = register_kind(
    Kind(api_version=API_VERSION, kind="ResourceClaim", plural="resourceclaims", namespaced=True)
)
RESOURCE_CLAIM_TEMPLATE = register_kind(
    Kind(api_version=API_VERSION, kind="ResourceClaimTemplate", plural="resourceclaimtemplates", namespaced=True)
)

DEVICE_CLASS_NAME = DRIVER
"""Claims ask for ``deviceClassName: gpu.gpuchain.io``: every device this driver publishes."""


def device_class() -> Obj:
    """The DeviceClass selecting this driver's devices (the chart renders the same object)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS_NAME},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }


WHOLE_GPU_CLASS_NAME = "whole-gpu.gpuchain.io"
"""The DeviceClass that serves plain ``nvidia.com/gpu`` requests (the chart's ``dra.extendedResource``)."""


def whole_gpu_class() -> Obj:
    """The DeviceClass through which the scheduler serves a pod's ``nvidia.com/gpu: N`` with N whole
    GPUs of this driver (``extendedResourceName``, KEP-5004: alpha behind ``DRAExtendedResource`` in
    1.34). A class of its own, not ``gpu.gpuchain.io`` with the field: ``nvidia.com/gpu`` means a whole
    GPU, and that class also selects MIG devices. The scheduler uses it only on nodes whose
    allocatable has no ``nvidia.com/gpu`` at all, not even 0 (a device plugin's): the chart renders it
    only without the device plugin. The chart renders the same object."""
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": WHOLE_GPU_CLASS_NAME},
        "spec": {
            "selectors": [
                {"cel": {"expression": f"device.driver == '{DRIVER}'"}},
                {"cel": {"expression": f"device.attributes['{DRIVER}'].type == 'gpu'"}},
            ],
            "extendedResourceName": GPU,
        },
    }
