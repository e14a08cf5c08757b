"""CDI specs for prepared claims: what the container runtime injects for a claim's devices.

One spec file per claim (``gpu.gpuchain.io-claim_<uid>.json`` in the CDI directory), kind
``gpu.gpuchain.io/claim``, one CDI device per allocated DRA device named ``<uid>-<device>``. So the
CDI id a container gets is ``gpu.gpuchain.io/claim=<uid>-gpu-0``, unique per claim, and removing
the claim's file removes exactly what Prepare added.

Each CDI device carries its GPU's device node (a MIG device its parent's); the spec-wide edits
add the driver's control nodes (``gpu.devnodes``: ``/dev/nvidia-modeset`` only where present)
and ``NVIDIA_VISIBLE_DEVICES`` with the claim's GPU or MIG UUIDs, which the NVIDIA container
runtime hook reads to mount the driver libraries. The spec's shape and its atomic write are
``gpu.cdi``'s, shared with the device plugin's spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuchain.common.files import remove
from gpuchain.dra import shares
from gpuchain.dra.kinds import DRIVER
from gpuchain.dra.shares import Share
from gpuchain.gpu import cdi
from gpuchain.gpu.devnodes import control_device_nodes

CDI_KIND = f"{DRIVER}/claim"


@dataclass(frozen=True, kw_only=True)
class CdiDevice:
    """One allocated device as the runtime sees it: its DRA name, UUID and device node, and the
    share of it the claim holds (None: the device is the claim's alone)."""

    name: str
    uuid: str
    device_node: str
    share: Share | None = None

    @property
    def cdi_name(self) -> str:
        """The device's name in the claim's spec: its DRA name, with the share id for a share, so
        two shares of one GPU in one claim are two CDI devices."""
        return self.name if self.share is None else f"{self.name}-{self.share.share_id}"


def cdi_device_name(claim_uid: str, device: str) -> str:
    """The CDI device name inside the claim's spec."""
    return f"{claim_uid}-{device}"


def cdi_id(claim_uid: str, device: str) -> str:
    """The fully qualified CDI device id the kubelet passes to the runtime."""
    return cdi.qualified_name(CDI_KIND, cdi_device_name(claim_uid, device))


SPEC_PREFIX, SPEC_SUFFIX = f"{DRIVER}-claim_", ".json"
"""A claim's spec file is ``<prefix><claim uid><suffix>`` in the CDI directory."""


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    """Where the claim's spec lives."""
    return cdi_dir / f"{SPEC_PREFIX}{claim_uid}{SPEC_SUFFIX}"


MpsClient = tuple[list[str], list[dict[str, object]]]
"""What a container needs to reach its GPU's MPS daemon: environment and mounts (``dra.mps.client_edits``)."""


def claim_spec(
    claim_uid: str,
    *,
    devices: list[CdiDevice],
    control_nodes: Sequence[str],
    dev_root: str | Path = "/",
    mps: MpsClient | None = None,
) -> dict[str, Any]:
    """The CDI spec for one claim (pure); ``control_nodes`` from ``gpu.devnodes.control_device_nodes``.
    Shared devices bring the claim's MPS limits (``shares.limits``) into its environment, and
    ``mps`` the way to the daemon that enforces them."""
    uuids = ",".join(dict.fromkeys(d.uuid for d in devices))
    limits = shares.limits([(d.uuid, d.share) for d in devices]).client_env()
    env, mounts = mps or ([], [])
    return cdi.spec(
        CDI_KIND,
        devices={cdi_device_name(claim_uid, d.cdi_name): [d.device_node] for d in devices},
        control_nodes=control_nodes,
        env=[f"NVIDIA_VISIBLE_DEVICES={uuids}", *(f"{k}={v}" for k, v in limits.items()), *env],
        dev_root=dev_root,
        mounts=mounts,
    )


def write_spec(
    cdi_dir: Path,
    *,
    claim_uid: str,
    devices: list[CdiDevice],
    dev_root: Path = Path("/"),
    mps: MpsClient | None = None,
) -> list[str]:
    """Write the claim's spec atomically (rewriting it is harmless) and return its CDI ids.

    The control devices are looked up under ``dev_root`` now, so a spec names ``/dev/nvidia-modeset``
    only on a node whose driver created it; with a ``dev_root`` other than ``/`` every device node
    is found there (``hostPath``), as ``nvidia-ctk cdi generate --dev-root`` writes it.
    """
    spec = claim_spec(
        claim_uid, devices=devices, control_nodes=control_device_nodes(dev_root), dev_root=dev_root, mps=mps
    )
    cdi.write(spec_path(cdi_dir, claim_uid), spec)
    return [cdi_id(claim_uid, d.cdi_name) for d in devices]


def remove_spec(cdi_dir: Path, claim_uid: str) -> bool:
    """Remove the claim's spec; False when it was already gone."""
    return remove(spec_path(cdi_dir, claim_uid))


def spec_claims(cdi_dir: Path) -> dict[str, Path]:
    """The claim UID of every claim spec this driver wrote in ``cdi_dir`` (by its file name)."""
    try:
        names = [p for p in cdi_dir.iterdir() if p.name.startswith(SPEC_PREFIX) and p.name.endswith(SPEC_SUFFIX)]
    except FileNotFoundError:
        return {}
    return {p.name[len(SPEC_PREFIX) : -len(SPEC_SUFFIX)]: p for p in names}
