"""What ``gpuchain top`` shows, read back from an exporter scrape: a pure function of its text.

Whatever the source (a running exporter's URL, a collector run here over the node's backend, the
simulator's nodes), the view is built from the exposition text, so ``top`` shows exactly what
Prometheus would store: per node (``Hostname``), per GPU or MIG device, the pods on it with their
own framebuffer and SM share (``DCGM_FI_DEV_FB_USED`` / ``DCGM_FI_DEV_GPU_UTIL`` under
per-process attribution), the processes no pod owns, whether the GPU answered and how old its
last sample is, and the GPUs expected beside those exported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"


@dataclass(kw_only=True)
class PodShare:
    """One container's use of one device."""

    namespace: str
    pod: str
    container: str
    memory_mib: float = 0.0
    sm_percent: float | None = None
    processes: int = 0


@dataclass(kw_only=True)
class DeviceTop:
    """One GPU or MIG device (``mig`` is its GPU instance profile and id, empty for a whole GPU)."""

    gpu: str
    uuid: str
    model: str
    mig: str = ""
    up: bool | None = None
    sample_age_s: float | None = None
    memory_free_mib: float | None = None
    memory_used_mib: float | None = None
    """The device's own reading when it has no pod series; else the sum of its pods and the unattributed."""
    pods: list[PodShare] = field(default_factory=list)
    unattributed_processes: int = 0
    unattributed_memory_mib: float = 0.0


@dataclass(kw_only=True)
class NodeTop:
    node: str
    devices: list[DeviceTop] = field(default_factory=list)
    gpus_expected: int | None = None
    expected_from: str = ""
    gpus_exported: int | None = None


def top_view(text: str, *, now: float, node: str = "") -> list[NodeTop]:
    """Nodes from one exposition; ``node`` names the GPUs-less node figures (expected/exported),
    which carry no ``Hostname`` label."""
    nodes: dict[str, NodeTop] = {}
    devices: dict[tuple[str, str, str], DeviceTop] = {}
    pods: dict[tuple[str, str, str, str, str, str], PodShare] = {}
    counts: dict[str, float] = {}
    status: dict[tuple[str, str], dict[str, float]] = {}
    gpus_seen: set[tuple[str, str]] = set()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = s.labels
            if s.name in ("gpuchain_gpus_expected", "gpuchain_gpus_exported"):
                counts[s.name] = s.value
                if "source" in labels:
                    counts["source:" + labels["source"]] = s.value
                continue
            uuid = labels.get("UUID")
            if uuid is None:
                continue
            host = labels.get("Hostname", node)
            if s.name in ("gpuchain_gpu_up", "gpuchain_gpu_last_sample_timestamp_seconds"):
                # Per physical GPU: applies to each of its MIG devices, and shows a GPU gone from the rest.
                status.setdefault((host, uuid), {})[s.name] = s.value
                if (host, uuid) not in gpus_seen:
                    gpus_seen.add((host, uuid))
                    key = (host, uuid, "")
                    devices[key] = DeviceTop(gpu=labels.get("gpu", ""), uuid=uuid, model=labels.get("modelName", ""))
                    nodes.setdefault(host, NodeTop(node=host)).devices.append(devices[key])
                continue
            mig = f"{labels['GPU_I_PROFILE']} #{labels['GPU_I_ID']}" if "GPU_I_ID" in labels else ""
            key = (host, uuid, mig)
            dev = devices.get(key)
            if dev is None and mig and (host, uuid, "") in devices:
                # The GPU's status came first: the row is its MIG device's.
                dev = devices.pop((host, uuid, ""))
                dev.mig = mig
                devices[key] = dev
            if dev is None:
                gpus_seen.add((host, uuid))
                dev = devices[key] = DeviceTop(
                    gpu=labels.get("gpu", ""), uuid=uuid, model=labels.get("modelName", ""), mig=mig
                )
                nodes.setdefault(host, NodeTop(node=host)).devices.append(dev)
            _apply(dev, s.name, s.value, labels)
            if "pod" in labels and s.name in (FB_USED, GPU_UTIL, "gpuchain_gpu_processes"):
                pkey = (*key, labels["namespace"], labels["pod"], labels["container"])
                share = pods.get(pkey)
                if share is None:
                    share = pods[pkey] = PodShare(
                        namespace=labels["namespace"], pod=labels["pod"], container=labels["container"]
                    )
                    dev.pods.append(share)
                if s.name == FB_USED:
                    share.memory_mib = s.value
                elif s.name == GPU_UTIL:
                    share.sm_percent = s.value
                else:
                    share.processes = int(s.value)
    if not nodes:
        nodes[node] = NodeTop(node=node)
    for (host, uuid, _), dev in devices.items():
        seen = status.get((host, uuid), {})
        if "gpuchain_gpu_up" in seen:
            dev.up = seen["gpuchain_gpu_up"] == 1
        if "gpuchain_gpu_last_sample_timestamp_seconds" in seen:
            dev.sample_age_s = max(0.0, now - seen["gpuchain_gpu_last_sample_timestamp_seconds"])
    for top in nodes.values():
        if "gpuchain_gpus_exported" in counts:
            top.gpus_exported = int(counts["gpuchain_gpus_exported"])
        for name, value in counts.items():
            if name.startswith("source:"):
                top.gpus_expected, top.expected_from = int(value), name.split(":", 1)[1]
        for dev in top.devices:
            if dev.pods:
                dev.memory_used_mib = sum(p.memory_mib for p in dev.pods) + dev.unattributed_memory_mib
            dev.pods.sort(key=lambda p: (-p.memory_mib, p.namespace, p.pod))
    return sorted(nodes.values(), key=lambda n: n.node)


def _apply(dev: DeviceTop, name: str, value: float, labels: dict[str, str]) -> None:
    if name == FB_FREE:
        dev.memory_free_mib = value
    elif name == FB_USED and "pod" not in labels:
        dev.memory_used_mib = value
    elif name == "gpuchain_gpu_unattributed_processes":
        dev.unattributed_processes = int(value)
    elif name == "gpuchain_gpu_unattributed_fb_used_mib":
        dev.unattributed_memory_mib = value
