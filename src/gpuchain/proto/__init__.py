"""Kubelet gRPC APIs, generated from the .proto files beside them by ``scripts/gen-protos``.

``deviceplugin.v1beta1``: Registration and DevicePlugin services (device plugin <-> kubelet).
``podresources.v1``: PodResourcesLister (kubelet -> monitoring agents such as the exporter).
"""
