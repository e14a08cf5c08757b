"""Whether the device plugin's configs are in sight: a ConfigMap the plugin's pod mounts, and the dump lacks.

NVIDIA's chart mounts the configs' ConfigMap (``config.name``, or the one it renders from ``config.map``) into the
plugin's pod as the ``available-configs`` volume, from which its config-manager copies the one the node label
``nvidia.com/device-plugin.config`` (or ``config.default``) names to the plugin's CONFIG_FILE
(NVIDIA/k8s-device-plugin deployments/helm/nvidia-device-plugin/templates/daemonset-device-plugin.yml@v0.17.2).
A ConfigMap volume is not optional unless the pod says so, and the kubelet starts no container of a pod whose
ConfigMap volume it cannot set up (kubernetes pkg/volume/configmap/configmap.go@v1.34.4: ``configmap %q not found``
unless ``optional``). So a plugin pod whose containers run has its ConfigMap, with the keys its config-manager read,
wherever the dump does not show it (another namespace than the stack's, a ConfigMap the gather step could not list):
its configs are unknown to gpuchain, not empty.
"""

from __future__ import annotations

from gpuchain.doctor.context import Context
from gpuchain.doctor.stacks.base import daemonsets_in
from gpuchain.operator.operands import DEVICE_PLUGIN


def mounted_unseen(ctx: Context) -> bool:
    """Does the plugin's DaemonSet mount (not optionally) a ConfigMap of its configs the dump does not hold, where
    no ClusterPolicy names it (a policy that names a missing one is read as missing: the operator mounts it)?"""
    if ctx.policy.device_plugin.config.name:
        return False
    ds = daemonsets_in(ctx.snapshot, ctx.namespace).get(ctx.ds(DEVICE_PLUGIN)) or {}
    volumes = (((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes") or []
    maps = [v["configMap"] for v in volumes if (v.get("configMap") or {}).get("name")]
    return any(not m.get("optional") and str(m["name"]) not in ctx.configmaps for m in maps)
