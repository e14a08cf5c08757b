"""DRA: the node's GPUs as structured, claimable devices (resource.k8s.io/v1, driver ``gpu.gpuchain.io``).

The device plugin hands out integer counts (``nvidia.com/gpu: 1``); Dynamic Resource Allocation
publishes each GPU and MIG device with attributes and capacity in a ResourceSlice, lets the
scheduler pick devices for a ResourceClaim with CEL selectors, and asks this node's plugin to
prepare the chosen devices (a CDI spec per claim). Both models run side by side over the same
GPU layer.

- ``kinds``: the driver name, the resource.k8s.io kinds (registered with the kube port) and the
  DeviceClass.
- ``slices``: pure rendering of an Inventory into devices and the node's ResourceSlice, with the
  pool generation rule and the API-server naming rules checked before anything is published.
- ``cdi`` and ``checkpoint``: the files Prepare writes, atomically.
- ``claims``: ResourceClaims and the scheduler's allocation as the simulator and tests make them,
  and which claims a pod and each of its containers use.
- ``taints``: the taints unhealthy devices are published with (``--device-taints``).
- ``partitions``: MIG-capable GPUs as partitionable devices, their MIG devices made on Prepare
  (``--partitionable-mig``).
- ``shares``: whole GPUs shared by several claims, each with the memory and SMs it asks for
  (``--gpu-shares``), and ``mps``: the MPS control daemon per shared GPU that enforces them
  (``--mps-root``).
- ``driver``: the plugin's decisions over those parts (publish, prepare, unprepare), with
  device health from ``gpuchain.gpu.health`` (the device plugin's rules and quiet period);
  ``publishing`` reads and writes the node's slices and the MIG-GPU announcement for it,
  ``instances`` makes and destroys the MIG instances of partitionable claims, ``consumers``
  matches a claim to its share and refuses a container that would reach two GPUs' shares, and
  ``errors`` holds the PrepareError they raise.
- ``server``: the kubelet-facing gRPC services on unix sockets (registration and DRAPlugin).
- ``metrics``: Prepare and Unprepare latencies and the devices by state.
"""
