"""Driver versions that follow the GPU Operator's NVIDIADriver resources, one per node pool, by design.

Where the ClusterPolicy hands driver management to NVIDIADriver custom resources (spec.driver.useNvidiaDriverCRD),
each resource names its own driver version and a node selector, and the operator renders one driver DaemonSet per
resource (and OS, or kernel for precompiled drivers) named ``nvidia-<driverType>-driver-<os tag>-<hash>``, owned by
the resource, whose pod template selects ``nvidia.com/gpu.deploy.driver=true`` plus the resource's
``spec.nodeSelector`` (NVIDIA/gpu-operator internal/state/driver.go getDriverAppName, Sync's controller reference,
manifests/state-driver/0500_daemonset.yaml). The operator's validator refuses two resources that select one node
(internal/validator/validator.go "multiple NVIDIADrivers match the same node"). So two driver versions on two pools,
each the image of the DaemonSet whose pod runs there, is the configuration the docs describe ("one or more instances
of an NVIDIA driver custom resource to specify the NVIDIA GPU driver type and driver version to configure on
specific nodes"), not a skew; a node whose version is not its own DaemonSet's image still is one.
"""

from __future__ import annotations

import re

from gpuchain.doctor.context import Context
from gpuchain.doctor.owners import owner_daemonset
from gpuchain.doctor.releases import image_version
from gpuchain.kube.objects import Obj, name_of
from gpuchain.operator.operands import DRIVER

#: The name the operator gives an NVIDIADriver resource's DaemonSet (getDriverAppName's nvidia-%s-driver-%s, the
#: driver type gpu or vgpu, or the vGPU host manager's).
NVIDIADRIVER_DS = re.compile(r"nvidia-(gpu|vgpu|vgpu-host-manager)-driver-")
#: The node selector keys the operator sets on every driver DaemonSet itself; any other is a resource's own.
OPERATOR_KEYS = frozenset({"nvidia.com/gpu.deploy.driver", "nvidia.com/gpu.deploy.vgpu-manager"})
OWNER_KIND = "NVIDIADriver"


def _from_resource(ds: Obj) -> bool:
    """Is ``ds`` an NVIDIADriver resource's driver DaemonSet: owned by one, or named as the operator names them?"""
    owners = (ds.get("metadata") or {}).get("ownerReferences") or ()
    return any(ref.get("kind") == OWNER_KIND for ref in owners) or NVIDIADRIVER_DS.match(name_of(ds)) is not None


def _follows(version: str, tag: str) -> bool:
    """Does a node's driver ``version`` (535.261.03) come from an image of ``tag``: 535.261.03-ubuntu22.04, or a
    precompiled image's branch tag 535-<kernel>-<os>?"""
    head = tag.split("-", 1)[0]
    return version == head or ("." not in head and version.startswith(head + "."))


def driver_pools(ctx: Context, versions: dict[str, list[str]]) -> tuple[str, ...]:
    """One line per NVIDIADriver DaemonSet when every node's driver version is the image of the resource's
    DaemonSet whose pod runs there and more than one resource's DaemonSet serves them (() otherwise): its name, its
    pool's selector, the version and its nodes."""
    version_of = {n: v for v, ns in versions.items() for n in ns}
    pools: dict[str, tuple[str, str, list[str]]] = {}
    for view in ctx.views:
        version = version_of.get(view.name)
        if version is None:
            continue
        pod = view.pod(DRIVER)
        ds = owner_daemonset(ctx, pod) if pod is not None else {}
        if not ds or not _from_resource(ds):
            return ()
        spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        containers = spec.get("containers") or [{}]
        container = next((c for c in containers if c.get("name") == ctx.container(DRIVER)), containers[0])
        if not _follows(version, image_version(str(container.get("image", "")))[1]):
            return ()
        selector = ", ".join(
            f"{k}={v}" for k, v in sorted((spec.get("nodeSelector") or {}).items()) if k not in OPERATOR_KEYS
        )
        pools.setdefault(name_of(ds), (selector, version, []))[2].append(view.name)
    if len(pools) < 2 or len({version for _, version, _ in pools.values()}) < 2:
        return ()
    return tuple(
        f"DaemonSet {name} ({selector or 'no pool selector'}): driver {version} on {', '.join(sorted(nodes)[:5])}"
        for name, (selector, version, nodes) in sorted(pools.items())
    )
