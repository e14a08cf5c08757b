"""An operand's image the kubelet cannot pull: the tag the policy or the operator names that the registry lacks (a
pinned version, a driver release not built for the node's OS, a precompiled driver for a kernel NVIDIA did not
build), else what the registry's refusal says."""

from __future__ import annotations

import dataclasses
import re

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.driver_build import build_own, image_based
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.links.image_tag_gone import tag_gone
from gpuchain.doctor.links.pull_refused import pull_refused
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp
from gpuchain.doctor.node import node_info
from gpuchain.doctor.node_image import node_image, os_tag
from gpuchain.doctor.pods import PodState
from gpuchain.operator.operands import DRIVER, Operand, deploy_label

#: The kubelet's words for the image it pulls: "Back-off pulling image %q" (pkg/kubelet/images/image_manager.go)
#: and "Failed to pull image %q: %v" (kuberuntime), kubernetes@v1.34.4.
PULLING = re.compile(r'(?:pulling|pull) image "([^"]+)"')


DRIVER_TAG = re.compile(r"(\d+(?:\.\d+)+)-([a-z][\w.]*)")
#: A precompiled driver image's tag: ``<driver branch>-<kernel>-<os tag>`` (NVIDIA/gpu-operator resolveDriverTag,
#: e.g. 535-5.15.0-1041-azure-ubuntu22.04).
PRECOMPILED_TAG = re.compile(r"(\d+)-(\d+\.\d+\.\d+-.+)-([a-z]+[\d.]*)")

#: A RHEL or Rocky Linux driver image's OS tag with its minor release (rhel9.7). NVIDIA/cloud-native-docs
#: gpu-operator/platform-support.rst@e883291: driver images are published for chosen minors (RHEL 9.2, 9.4, 9.6, 9.7,
#: 9.8), and "Starting with version 26.7.0, the Operator uses the operating system major version when it constructs
#: image tags for conventional RHEL and Rocky Linux driver containers" (rhel9, rocky10), published for 8, 9 and 10.
MINOR_TAGGED = re.compile(r"(rhel|rocky)(8|9|10)\.\d+")
MAJOR_TAGS_FROM = "v26.7.0"


def _pulled_image(text: str) -> str:
    found = PULLING.search(text)
    return found.group(1) if found else ""


def image_missing(ctx: Context, *, view: NodeView, operand: Operand, state: PodState) -> Known:
    """The kubelet cannot pull the operand's image: a tag the policy overrides that the registry lacks."""
    event = _pull_event(view, state.name)
    evidence = (state.message, f"event Failed (kubelet): {event}" if event else "")
    pod = view.pod(operand) or {}
    owner = next(
        (str(r.get("name")) for r in (pod.get("metadata") or {}).get("ownerReferences") or () if r.get("kind")),
        "",
    )
    image = _pulled_image(state.message) or _pulled_image(event)
    tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""
    prefix = ctx.stack.precompiled_prefix
    # The tag says precompiled where the policy asks for precompiled drivers (NVIDIA's spec.driver.usePrecompiled),
    # or where its kernel part is this node's own kernel: only a precompiled image names a kernel in its tag (a
    # standard driver image's tag is <version>-<os tag>), so a policy that hides the setting still shows it there.
    asks = (((ctx.policy_obj or {}).get("spec") or {}).get("driver") or {}).get("usePrecompiled") is True
    shaped = PRECOMPILED_TAG.fullmatch(tag)
    precompiled = shaped if shaped and (asks or (view.kernel and shaped.group(2) == view.kernel)) else None
    if operand is DRIVER and ((prefix and owner.startswith(prefix)) or precompiled):
        # Precompiled drivers: one DaemonSet per kernel, whose image exists only for the kernels NVIDIA built.
        ready_kernels = ", ".join(sorted(ctx.driver_kernels)) or "no kernel yet"
        action = Fix(
            FixOp.PATCH_POLICY,
            ctx.policy_name,
            {"spec": {"driver": {"usePrecompiled": False}}, NOT_SIMULATED: "precompiled images are not simulated"},
        )
        looked = f" (tag {tag}: driver branch, kernel, OS tag)" if precompiled else ""
        return Known(
            cause=f"no precompiled driver image exists for this node's kernel {view.kernel}: the operator asks for "
            f"{image or 'an image per kernel'}{looked} and the registry has no such tag.",
            evidence=(*evidence, f"DaemonSet {owner}: a precompiled driver per kernel"),
            action=action,
            fix=ctx.stack.render(action) + "   # the driver container builds the module at start instead; set "
            "spec.driver.version to a full driver version, or move the node to a kernel with a precompiled image "
            f"(driver pods run on {ready_kernels}), or build {tag or 'that tag'} from NVIDIA/gpu-driver-container's "
            "precompiled Dockerfile into a registry the nodes reach and set spec.driver.repository to it",
        )
    spec = ((ctx.policy_obj or {}).get("spec") or {}).get(operand.spec_key) or {}
    version = str(spec.get("version") or "")
    # A driver image's tag is <driver version>-<os><os version> (e.g. 550.90.07-ubuntu22.04).
    versioned = DRIVER_TAG.fullmatch(tag)
    # A tag the registry lacks: containerd's "not found", or the registry's own MANIFEST_UNKNOWN ("manifest unknown",
    # opencontainers/distribution-spec spec.md error codes) that CRI-O's image library quotes.
    missing = "not found" in event or "manifest unknown" in event or not event
    if operand is DRIVER and ctx.policy_obj is not None and versioned and missing:
        return _driver_tag_missing(ctx, view, image, versioned, version, evidence)
    if ctx.policy_obj is not None and version and version in image and missing:
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {operand.spec_key: {"version": None}}})
        return Known(
            cause=f"the kubelet cannot pull the image: spec.{operand.spec_key}.version={spec['version']} of "
            f"{ctx.policy_ref} names a tag the registry does not have.",
            evidence=evidence,
            action=action,
            fix=ctx.stack.render(action) + "   # back to the operator's default version (or set one that exists)",
        )
    gone = tag_gone(ctx, view=view, pod=pod, state=state, image=image, said=event or state.message)
    if gone is not None:
        return dataclasses.replace(gone, evidence=(*evidence, *gone.evidence))
    return pull_refused(view.name, said=f"{state.message}\n{event}", evidence=evidence)


def _driver_tag_missing(
    ctx: Context, view: NodeView, image: str, tag: re.Match[str], pinned: str, evidence: tuple[str, ...]
) -> Known:
    """The registry lacks the driver image the operator names for this node: ``<version>-<os tag>``, the OS tag
    from NFD's os-release labels (gpuchain.doctor.node_image). The fix names that tag and how to provide one:
    no image at all for an OS NVIDIA builds none for (the host's driver then), a pinned version not built for
    this OS (the operator's default), the default not built for this OS release (a version that is, a
    precompiled image, or one built for it)."""
    version, dist = tag.group(1), tag.group(2)
    os_image = node_info(view.node).get("osImage") or dist
    repo = image.rpartition(":")[0]
    said = (
        *evidence,
        f"tag {tag.group(0)} = driver version {version} + the node's OS tag {dist} (NFD's system-os_release ID and "
        f"VERSION_ID; node OS {os_image}, read as {os_tag(view.node) or 'unknown'})",
    )
    build = (
        f"or build {repo}:{tag.group(0)} for {dist} from NVIDIA/gpu-driver-container, push it to a registry the "
        "nodes reach and set spec.driver.repository to it"
    )
    if not dist.startswith(ctx.stack.driver_image_os):
        return _no_os_image(ctx, view, image=image, tag=tag, said=said, os_image=os_image)
    # A new OS release gets driver images from the operator release that adds it: before that, no version pulls.
    newer = (
        f"; where the operator's release predates {os_image} (its default has no {dist} image either), upgrade the "
        f"GPU Operator to a release whose supported OSes list it, or run the node on an OS release it supports"
    )
    minor = MINOR_TAGGED.fullmatch(dist)
    if minor:
        newer = (
            f"; or upgrade the GPU Operator to {MAJOR_TAGS_FROM} or later, which tags the driver image by the OS major "
            f"version ({minor.group(1)}{minor.group(2)}), published for RHEL and Rocky Linux 8, 9 and 10 whatever "
            "their minor release"
        )
    if pinned and pinned == version:
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"driver": {"version": None}}})
        return Known(
            cause=f"the registry has no driver image {image}: the operator asks for tag {tag.group(0)}, the version "
            f"spec.driver.version={pinned} of {ctx.policy_ref} built for the node's OS tag {dist}, and that "
            f"version is not published for {dist}.",
            evidence=said,
            action=action,
            fix=ctx.stack.render(action) + f"   # back to the operator's default driver release, published for {dist}; "
            f"or set spec.driver.version to a release published as {repo}:<version>-{dist}; {build}{newer}",
        )
    return Known(
        cause=f"the registry has no driver image {image}: the operator asks for tag {tag.group(0)}, its driver version "
        f"{version} for the node's OS tag {dist}, and {version} is not published for {os_image}.",
        evidence=said,
        action=None,
        fix=f"# set spec.driver.version in {ctx.policy_ref} to a driver release published as {repo}:<version>-{dist} "
        "(a newer branch, for a new OS release), or spec.driver.usePrecompiled=true where a precompiled image "
        f"exists for kernel {view.kernel}; {build}; or run the node on an OS release {version} is published for{newer}",
    )


def _no_os_image(
    ctx: Context, view: NodeView, *, image: str, tag: re.Match[str], said: tuple[str, ...], os_image: str
) -> Known:
    """No driver image at any version for the node's OS: the host's driver where the host can install one (a
    package-managed OS, or a managed cloud's node image that brings it), then an image the cluster's owners build for
    it (`driver_build`); on an image-based OS (CoreOS family, Talos ...) that image alone keeps a driver there."""
    version, dist = tag.group(1), tag.group(2)
    repo, name = image.rpartition(":")[0].rpartition("/")[::2]
    # Where the driver container runs on other nodes, only this node opts out; else the whole policy.
    off = (
        Fix(FixOp.LABEL_NODE, view.name, {deploy_label(DRIVER): "false"})
        if ctx.driver_kernels
        else Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"driver": {"enabled": False}}})
    )
    published = ", ".join(ctx.stack.driver_image_os)
    cause = (
        f"no driver image exists for this node's OS: the operator asks for {image} (tag {tag.group(0)}) and NVIDIA "
        f"publishes driver images only for {published}, so no driver version pulls on {os_image}."
    )
    host = f"once the driver is on the host ({ctx.stack.driver_install or 'from its OS packages'})"
    elsewhere = f"or run the node on an OS with driver images ({published})"
    point = Fix(
        FixOp.PATCH_POLICY,
        ctx.policy_name,
        {"spec": {"driver": {"repository": "<your registry>", "image": name or "driver", "version": version}}},
    )
    own = build_own(
        policy=ctx.policy_ref, render=ctx.stack.render(point), version=version, dist=dist, kernel=view.kernel
    )
    if not image_based(view.node) or node_image(view.node) is not None:
        # A host that can install the driver (its OS packages, or a managed cloud's node image that brings it): its
        # own driver first, the image the cluster's owners build after.
        return Known(
            cause=cause,
            evidence=said,
            action=off,
            fix=ctx.stack.render(off) + f"   # {'this node opts out' if ctx.driver_kernels else 'driver.enabled=false'}"
            f", {host}; {elsewhere}; or {own}",
        )
    # An image-based OS installs no driver on the host: the driver comes in a container, the one its owners build.
    return Known(
        cause=f"{cause} It is an image-based OS, which installs no driver on the host: the driver comes in a "
        "container.",
        evidence=(*said, f"registry {repo}: no {dist} tag at any driver version"),
        action=None,
        fix=f"# {own}; {elsewhere}",
    )


def _pull_event(view: NodeView, pod: str) -> str:
    """The kubelet's "Failed to pull image" Event for ``pod`` (containerd's NotFound, an auth error ...)."""
    return next(
        (
            str(e.get("message"))
            for e in view.events
            if (e.get("involvedObject") or {}).get("name") == pod
            and str(e.get("message", "")).startswith("Failed to pull")
        ),
        "",
    )
