"""A Talos Linux node whose image carries no NVIDIA system extensions: no driver, and no nvidia runtime handler.

Talos is immutable: the NVIDIA driver reaches a node only as system extensions baked into the installer image it
booted, ``nonfree-kmod-nvidia`` (the kernel modules, built for one Talos release) and ``nvidia-container-toolkit``
(the driver's user-space libraries and the toolkit, whose containerd drop-in declares the runtime handler
``nvidia``: siderolabs/extensions nvidia-gpu/nvidia-container-toolkit/nvidia-container-runtime/
nvidia-container-runtime.part@v1.4.0, 10-nvidia-container-runtime.part@26822f5; nvidia-pkgs packs NVIDIA's driver
archive). Talos' guide (siderolabs/talos website/content/v1.8/talos-guides/configuration/nvidia-gpu-proprietary.md
@4701498) builds an installer with both (Image Factory boot assets, or machine.install.extensions before it),
upgrades the node to it, loads the modules (machine.kernel.modules nvidia, nvidia_uvm, nvidia_drm, nvidia_modeset),
and checks ``talosctl get extensions`` and ``talosctl read /proc/modules``. An upgrade that fails boots the previous
image again, and an upgrade or reinstall with a plain installer drops the extensions: either way containerd has no
``nvidia`` handler and the host has no NVIDIA module, so the driver link, under the runtime, is what to repair.
"""

from __future__ import annotations

import re

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.links.toolkit import runtime_evidence
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.node import node_info
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import Obj

#: Talos' os-release PRETTY_NAME, as the kubelet reports it in osImage: "Talos (v1.7.6)".
TALOS = re.compile(r"^Talos \((v\d+\.\d+\.\d+[^)]*)\)")
#: The extensions Talos' guide installs for NVIDIA's proprietary driver (Image Factory's official extension names).
EXTENSIONS = ("siderolabs/nonfree-kmod-nvidia", "siderolabs/nvidia-container-toolkit")
MODULES = ("nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset")


def talos_release(node: Obj) -> str:
    """The Talos release a node booted ("v1.4.0-alpha.3"), "" for a node that does not run Talos."""
    found = TALOS.match(node_info(node).get("osImage", ""))
    return found.group(1) if found else ""


def _address(node: Obj) -> str:
    """The node's InternalIP (talosctl's --nodes takes an address), else its name."""
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address"))
    return str((node.get("metadata") or {}).get("name", ""))


def _serving_release(ctx: Context, view: NodeView, booted: str) -> tuple[str, str]:
    """Another Talos node that announces GPUs on a release other than ``booted``: its release and the evidence line
    ("", "" where none does)."""
    for other in ctx.views:
        release = talos_release(other.node)
        gpus = node_gpu_resources(other.node)
        if other.name != view.name and release and release != booted and any(gpus.values()):
            counts = ", ".join(f"{k} {v}" for k, v in gpus.items())
            return release, f"node {other.name} runs Talos {release} and announces {counts}"
    return "", ""


def talos_without_extensions(ctx: Context, view: NodeView) -> Result | None:
    """On a Talos node with no driver container, containerd refusing the ``nvidia`` handler says the image the node
    booted has no NVIDIA extensions: the driver link, repaired by upgrading the node to an installer that has them.
    None on other nodes, or where containerd does not say so."""
    booted = talos_release(view.node)
    if not booted:
        return None
    said, entry = runtime_evidence(ctx, view)
    if entry is None or entry.id != "containerd.no-runtime-for-handler":
        return None
    target, sibling = _serving_release(ctx, view, booted)
    version = target or booted
    where = _address(view.node)
    extensions = ", ".join(EXTENSIONS)
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"check what the node booted: talosctl -n {where} version (the server's Tag) and talosctl -n "
            f"{where} get extensions (no nonfree-kmod-nvidia or nvidia-container-toolkit listed); build an installer "
            f"with the NVIDIA system extensions for that Talos release (Image Factory schematic customization."
            f"systemExtensions.officialExtensions: {extensions}, their -lts or -production variants on newer "
            f"releases) and upgrade the node to it: talosctl -n {where} upgrade --image "
            f"factory.talos.dev/installer/<schematic id>:{version}; keep machine.kernel.modules "
            f"({', '.join(MODULES)}) in its machine config; then talosctl get extensions lists both, talosctl read "
            "/proc/modules shows nvidia and talosctl version shows the new Tag (an upgrade that fails boots the "
            "previous image again)",
            "drain": True,
            NOT_SIMULATED: "the extensions in a Talos image are not a scenario fact",
        },
    )
    finding = node_finding(
        view,
        fid="driver.talos-extensions-missing",
        sev=Severity.ERROR,
        link="driver",
        cause=f"the node runs Talos {booted}, whose NVIDIA driver and nvidia runtime come only from system extensions "
        "in the image it booted, and its containerd has no 'nvidia' runtime handler: the image has no NVIDIA "
        "extensions (a plain installer, or an upgrade that fell back to the previous image), so the node has neither "
        "the NVIDIA kernel module nor the runtime, and no GPU pod or operand of runtimeClassName nvidia starts.",
        evidence=[f"osImage {node_info(view.node).get('osImage', '')}", *said, sibling],
        fix=ctx.stack.render(action),
        action=action,
    )
    return Result(LinkState.BROKEN, f"Talos {booted} image without the NVIDIA extensions", (finding,))
