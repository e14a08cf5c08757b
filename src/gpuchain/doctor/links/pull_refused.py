"""An image pull the node itself refuses: the registry's certificate is signed by a CA the node's runtime does not
trust, or the node's disk has no room for the layers. No tag, pull secret or mirror repairs either; the node does.

The words are Go's (crypto/x509's UnknownAuthorityError, the kernel's ENOSPC), which containerd and CRI-O quote in
the pull error the kubelet keeps as the container's waiting message and its Failed event (catalog
image-pull.unknown-authority, image-pull.no-space-left). A maintainer answers the certificate case as the cluster's
runtime configuration, not the operator's (NVIDIA/gpu-operator#1519).
"""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.links.common import Known

#: The catalog entries of a pull the node refuses, in the order they are read.
NODE_REFUSALS = ("image-pull.unknown-authority", "image-pull.no-space-left")


def pull_refused(node: str, *, said: str, evidence: tuple[str, ...]) -> Known:
    """The repair of an image the kubelet cannot pull, from the pull error ``said`` (the waiting message and the
    Failed event): the node's own refusal where the catalog knows it, else a tag, a pull secret or a mirror."""
    found = catalog.find(said, *NODE_REFUSALS)
    if found is not None:
        return Known(
            cause=f"the kubelet cannot pull the image: {found.entry.cause}",
            evidence=(*evidence, found.entry.cite()),
            action=None,
            fix="# " + found.entry.repair(node),
        )
    return Known(
        cause="the kubelet cannot pull the image (the registry refuses it or has no such tag).",
        evidence=evidence,
        action=None,
        fix="make the image reachable from the node: a tag that exists, the registry's pull secret in the policy's "
        "imagePullSecrets, or a mirror the node can reach",
    )
