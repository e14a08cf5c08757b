"""Whether a node's GPUs are shared by time-slicing: replicas with no memory isolation between their tenants.

NVIDIA's device plugin announces each GPU ``replicas`` times under ``sharing.timeSlicing`` of its config, and "nothing
special is done to isolate workloads that are granted replicas from the same underlying GPU, and each workload has
access to the GPU memory and runs in the same fault-domain as of all the others" (NVIDIA/k8s-device-plugin
README.md@v0.17.0, "Shared Access to GPUs"); ``sharing.mps`` instead partitions memory and "enforces these limits per
workload". So on a time-sliced GPU one tenant's allocation can fail because another holds the memory. GFD labels a
shared node ``nvidia.com/gpu.sharing-strategy`` (time-slicing, mps or none) and ``nvidia.com/gpu.replicas``; where GFD
does not run, the node's config key (``nvidia.com/device-plugin.config``, else the config named ``default``, else the
only one) in the device plugin's ConfigMap says it. Both the log gather step (`gpuchain.doctor.ready_gpu_logs`) and
the check (`gpuchain.doctor.links.shared_oom`) ask this, the first before a Context exists, so it reads labels and a
``{key: config YAML}`` map only.
"""

from __future__ import annotations

from functools import lru_cache

import yaml

from gpuchain.common.labels import DEVICE_PLUGIN_CONFIG

#: GFD's labels of how the node's GPUs are shared (NVIDIA/k8s-device-plugin internal/lm/resource.go).
STRATEGY = "nvidia.com/gpu.sharing-strategy"
REPLICAS = "nvidia.com/gpu.replicas"
TIME_SLICING = "time-slicing"


@lru_cache(maxsize=256)
def time_sliced_replicas(config_yaml: str) -> int:
    """The time-slicing replicas of ``nvidia.com/gpu`` in a device plugin config (0: not time-sliced, MPS, or not a
    config). Remembered by text: every node of a cluster asks it of the same few configs."""
    try:
        data = yaml.safe_load(config_yaml) or {}
    except yaml.YAMLError:
        return 0
    sharing = (data.get("sharing") if isinstance(data, dict) else None) or {}
    for res in (sharing.get("timeSlicing") or {}).get("resources") or []:
        if str(res.get("name", "")).removeprefix("nvidia.com/") == "gpu":
            return int(res.get("replicas") or 0)
    return 0


def _config_key(labels: dict[str, str], configs: dict[str, str]) -> str:
    """The key of the device plugin config the node runs: its label's, else ``default``, else the only one."""
    if labels.get(DEVICE_PLUGIN_CONFIG):
        return labels[DEVICE_PLUGIN_CONFIG]
    if "default" in configs or len(configs) != 1:
        return "default"
    return next(iter(configs))


def time_sliced(labels: dict[str, str], configs: dict[str, str]) -> str:
    """How a node with ``labels`` is known to share its GPUs by time-slicing (an evidence line), "" where it is not:
    GFD's strategy label, else its replicas label above 1 on a node not labelled MPS, else the config key it runs in
    ``configs`` (the device plugin's ConfigMap data)."""
    strategy = labels.get(STRATEGY, "")
    if strategy == TIME_SLICING:
        return f"label {STRATEGY}={strategy}"
    replicas = str(labels.get(REPLICAS, ""))
    if not strategy and replicas.isdigit() and int(replicas) > 1:
        return f"label {REPLICAS}={replicas}"
    if strategy:
        return ""  # GFD says mps or none
    key = _config_key(labels, configs)
    shared = time_sliced_replicas(configs.get(key, ""))
    return f"device plugin config {key!r}: sharing.timeSlicing replicas {shared}" if shared > 1 else ""
