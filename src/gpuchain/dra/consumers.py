"""The shares a claim is allocated, and what else the containers using a shared GPU's claim hold.

A container reaches one MPS control daemon (its pipe directory is mounted at one path), and this
node runs one per GPU (``dra.mps``): Prepare refuses a claim holding part of a GPU when a container
using it also uses another claim holding any of this node's devices but shares of that GPU. These
functions read the pods and claims from the API; ``DraDriver`` calls them on Prepare.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gpuchain.dra import cdi, claims, shares, slices
from gpuchain.dra.errors import PrepareError
from gpuchain.dra.kinds import DRIVER, RESOURCE_CLAIM
from gpuchain.gpu.model import Gpu
from gpuchain.kube.errors import KubeError
from gpuchain.kube.kinds import POD
from gpuchain.kube.objects import Obj
from gpuchain.kube.port import Cluster

Known = Mapping[str, tuple[cdi.CdiDevice, bool]]
"""This node's devices by DRA name, with their health (``slices.node_devices``)."""


def with_share(device: cdi.CdiDevice, *, result: Mapping[str, Any], gpus: Iterable[Gpu], where: str) -> cdi.CdiDevice:
    """``device`` with the share of it ``result`` allocates (``dra.shares``), if any; ``where``
    names the claim in the PrepareError for a share this node does not publish."""
    if not result.get("shareID"):
        return device
    gpu = next((g for g in gpus if g.uuid == device.uuid and not g.mig_enabled), None)
    if gpu is None or device.name != slices.gpu_device_name(gpu):
        raise PrepareError(
            f"{where}: device {device.name!r} is allocated as a share, but only whole GPUs are shared on this node"
        )
    try:
        share = shares.share_of(result, gpu)
    except ValueError as exc:
        raise PrepareError(f"{where}: device {device.name!r}: {exc}") from exc
    return replace(device, share=share)


def refuse_other_gpus(
    cluster: Cluster, *, where: str, claim: Obj, gpu_uuid: str, node: str, known: Known, gpus: Sequence[Gpu]
) -> None:
    """PrepareError when a container that uses ``claim``, which holds part of ``gpu_uuid``, also
    uses another claim holding any of ``node``'s devices but shares of that GPU: the container
    would reach one MPS daemon, and each GPU has its own. The kubelet prepares one claim at a time,
    so the containers come from the pods the claim is reserved for (``status.reservedFor``) and
    their specs, and the other claims are read back; a claim of another driver is not looked at."""
    namespace = str(claim.get("metadata", {}).get("namespace", "default"))
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    for consumer in (c for c in reserved if c.get("resource") == "pods" and not c.get("apiGroup")):
        try:
            pod = cluster.get_or_none(POD, name=str(consumer.get("name")), namespace=namespace)
        except KubeError as exc:
            raise PrepareError(
                f"{where}: cannot read pod {namespace}/{consumer.get('name')} to see what else its containers "
                f"hold beside the shared GPU ({exc}); the plugin needs get on pods"
            ) from exc
        if pod is None or pod.get("metadata", {}).get("uid") != consumer.get("uid"):
            continue  # gone, or another pod of that name: it holds nothing of this claim
        for container, names in sorted(claims.container_claims(pod).items()):
            if claim["metadata"]["name"] not in names:
                continue
            for other in sorted(names - {claim["metadata"]["name"]}):
                found = held_by(cluster, namespace=namespace, name=other, node=node, known=known, gpus=gpus)
                if found and any(uuid != gpu_uuid or share is None for uuid, share in found):
                    raise PrepareError(
                        f"{where}: container {container!r} of pod {namespace}/{pod['metadata']['name']} also "
                        f"uses claim {namespace}/{other}, which holds other devices of this node than shares "
                        f"of GPU {gpu_uuid}; the container would reach one MPS control daemon, and this node "
                        "runs one per GPU: give each shared GPU's claim a container of its own"
                    )


def held_by(
    cluster: Cluster, *, namespace: str, name: str, node: str, known: Known, gpus: Sequence[Gpu]
) -> list[tuple[str, shares.Share | None]]:
    """The devices of ``node`` (GPU or MIG UUID, share) another claim is allocated; none for a
    claim that is gone, unallocated or of other drivers (a device its own Prepare refuses is
    left to that Prepare)."""
    other = cluster.get_or_none(RESOURCE_CLAIM, name=name, namespace=namespace)
    allocation = ((other or {}).get("status") or {}).get("allocation") or {}
    held: list[tuple[str, shares.Share | None]] = []
    for result in allocation.get("devices", {}).get("results", []):
        if result.get("driver") != DRIVER or result.get("pool") != node or result.get("device") not in known:
            continue
        try:
            device = with_share(known[str(result["device"])][0], result=result, gpus=gpus, where=f"claim {name}")
        except PrepareError:
            continue
        held.append((device.uuid or str(result["device"]), device.share))
    return held
