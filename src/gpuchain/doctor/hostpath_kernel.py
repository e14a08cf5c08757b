"""A hostPath volume whose source is a kernel file this node's kernel does not provide: the container is never created.

Before it creates a container, containerd's CRI plugin creates each bind mount's host path that does not exist
("failed to mkdir %q: %w", containerd internal/cri/opts/spec_linux_opts.go@v2.0.5 WithMounts), as the kubelet asks of a
hostPath volume with no type. Under /sys and /proc that cannot work: those files are the kernel's own, present only
where the kernel has the feature behind them, and nothing may create them, so the runtime refuses the container at
every try (CreateContainerError) and no privilege or SELinux label changes that. The repair is the mount, not the
container: the manifest release that mounts a path every kernel has, or a kernel with the feature.

What this module knows, each from its source:

- the kernel feature behind a sysfs directory (Linux Documentation/admin-guide/mm/memory-hotplug.rst: the memory
  block devices and /sys/devices/system/memory/auto_online_blocks exist with CONFIG_MEMORY_HOTPLUG);
- the GPU Operator releases whose driver DaemonSet mounts such a file as it stands: volume sysfs-memory-online,
  hostPath /sys/devices/system/memory/auto_online_blocks with no type, from v23.9.1 to v26.3.3; v26.7.0 mounts the
  stable parent /sys/devices/system (volume host-sys-devices-system, type Directory) instead (NVIDIA/gpu-operator
  assets/state-driver/0500_daemonset.yaml at each tag; "Update Memory Hotplug hostvolume to /sys/devices/system",
  f048f1e).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuchain.doctor.context import Context

#: containerd's refusal to create a missing bind-mount source, where the source is a kernel file (sysfs, procfs).
KERNEL_SOURCE = re.compile(r"failed to mkdir \\?\"(?P<path>/(?:sys|proc)/[^\"\\\s]+)\\?\"")

#: The kernel option each sysfs directory needs (Linux Documentation/admin-guide/mm/memory-hotplug.rst).
KERNEL_OPTION = {"/sys/devices/system/memory": "CONFIG_MEMORY_HOTPLUG"}


@dataclass(frozen=True, kw_only=True)
class ShippedMount:
    """A hostPath a component's manifests mount, the releases that mount it, and the one that mounts another path."""

    path: str  #: the hostPath source
    volume: str  #: the volume's name in the manifest
    component: str  #: whose manifest, as a fix names it
    first: str  #: the first release that mounts it
    last: str  #: the last release that mounts it
    fixed: str  #: the release that mounts ``instead`` in its place
    instead: str  #: what that release mounts
    source: str  #: where that is read


SHIPPED = (
    ShippedMount(
        path="/sys/devices/system/memory/auto_online_blocks",
        volume="sysfs-memory-online",
        component="GPU Operator",
        first="v23.9.1",
        last="v26.3.3",
        fixed="v26.7.0",
        instead="/sys/devices/system (type Directory)",
        source="NVIDIA/gpu-operator assets/state-driver/0500_daemonset.yaml@v26.7.0",
    ),
)


def _option(path: str) -> str:
    """The kernel option behind ``path`` ("" where none is known)."""
    return next((opt for d, opt in KERNEL_OPTION.items() if path == d or path.startswith(d + "/")), "")


def _volume(ctx: Context, path: str) -> str:
    """The DaemonSet and volume that mount ``path`` as a hostPath, as "DaemonSet ns/name (volume v)" ("" where no
    DaemonSet in view does)."""
    for ds in ctx.snapshot.daemonsets:
        spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        for vol in spec.get("volumes") or ():
            if ((vol.get("hostPath") or {}).get("path") or "") == path:
                meta = ds.get("metadata") or {}
                return f"DaemonSet {meta.get('namespace')}/{meta.get('name')} (volume {vol.get('name')})"
    return ""


def kernel_source_missing(ctx: Context, link: str, m: re.Match[str], node: str) -> str | None:
    """The repair of a container never created because a hostPath volume names a kernel file the node lacks: the
    release that mounts another path, or the kernel feature that provides it."""
    path = m["path"]
    option = _option(path)
    mounted = _volume(ctx, path)
    # The releases are the GPU Operator's: where no ClusterPolicy renders the DaemonSet, another manifest mounts it.
    shipped = next((s for s in SHIPPED if s.path == path), None) if ctx.policy_obj is not None else None
    head = (
        f"the container is never created because {mounted or 'its DaemonSet'} mounts hostPath {path}, which this "
        "node's kernel does not provide; the runtime tries to create it, and nothing may create a file under /sys "
        "or /proc, so no privilege or SELinux change helps"
    )
    kernel = (
        f"run the node on a kernel built with {option}=y, which provides it"
        if option
        else "run the node on a kernel that provides it"
    )
    if shipped is not None:
        return (
            f"{head}: move to {shipped.component} {shipped.fixed} or later, whose manifest mounts {shipped.instead} "
            f"instead of {path} (volume {shipped.volume}, mounted by {shipped.first} to {shipped.last}; "
            f"{shipped.source}); or {kernel}"
        )
    return (
        f"{head}: remove or change that hostPath volume in the manifest that renders it (its chart or operator "
        f"release), or {kernel}"
    )
