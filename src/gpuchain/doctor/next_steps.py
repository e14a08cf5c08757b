"""What a person does next for a failure whose line gpuchain's catalog does not know (or that left no line).

A known line has its catalog entry's repair. An unknown one has, first, the repair of its shape (`shapes`): a line
the catalog does not know may still say, in words of the kernel, kmod, POSIX or Kubernetes, what kind of failure it
is and which object it is about (a module in use, a path missing, a socket refusing, a port taken), and that names
the repair for that object on that link. Only where no shape fits is the link's general next step the whole
answer; where one fits, that step stays as the "otherwise". Split from evidence.py, which reads the failures; this
module says what to do about those it cannot name.
"""

from __future__ import annotations

from gpuchain.doctor.context import Context
from gpuchain.doctor.releases import NEWEST, image_version
from gpuchain.doctor.shapes import Shaped, shaped


def own_way(ctx: Context, link: str) -> str:
    """The stack's own way out of a failure of ``link`` it manages itself (a managed cloud's driver installer), ""
    where it has none. A pod that left no line gets it after the log to read; the general next steps answer a
    line, which such a pod never left."""
    return (ctx.stack.driver_install or "") if link == "driver" else ""


def silent_fix(ctx: Context, *, link: str, read: str, what: str, target: str, again: str) -> str:
    """The fix for a failing pod that left no line to go on: the stack's own way out of ``link`` first where it
    has one (an action), the command that shows the reason after it; without one, no action can be named from
    the evidence, so that command comes first, with the object what it says is repaired in, then the pod again."""
    way = own_way(ctx, link)
    if way:
        return f"# {way}; then {again}   # gpuchain read no line of it; its reason, if that is not it: {read}"
    return f"{read}   # gpuchain read no line of it; what it says of {what} is repaired in {target}; then {again}"


def next_step(
    ctx: Context,
    *,
    link: str,
    line: str,
    refused: str = "",
    last: str = "",
    image: str = "",
    node: str = "",
    cuda: bool = False,
) -> str:
    """What a person does next for a failure of ``link`` whose message (``line``, "" when the pod left
    none at error level; ``refused``, the container runtime's refusal of a container that never started; ``last``,
    the last line of a log with no line at error level) the catalog does not know: the action for that link first,
    never "run it again", then the message quoted as what it answers (a fix is the action, not the diagnosis
    restated). A log that has lines is never called empty. ``image``, the failing container's: where it is not the
    NVIDIA component the link's step names (a DRA driver's kubelet plugin on the device plugin's link, a vendor's
    own build), the release to move is that image's own. Where the message has a shape `shapes.shaped` knows (on
    ``node``, the failing pod's), the repair of that shape for the object it names comes first and the link's step
    is what to do otherwise: the step was written for no line in particular, the shape for this one. ``cuda``: the
    failure is the validator's CUDA sample's, past a driver that answers nvidia-smi and a toolkit that set its
    container up (`structs.VALIDATIONS`), so the driver's step is what lets CUDA run, not the module's build."""
    said = (
        f"the container runtime refused to start it: {refused!r}, which is not in gpuchain's catalog"
        if refused
        else f"its last error line {line!r} is not in gpuchain's catalog"
        if line
        else f"its log ends {last!r} and no line of it is in gpuchain's catalog"
        if last
        else "it left no log line"
    )
    policy = f" in {ctx.policy_ref}" if ctx.policy_obj is not None else ""
    steps = {
        "driver": ctx.stack.driver_install
        or (
            "the driver container builds the module from the node's kernel packages: correct what the line names "
            f"(package repositories, entitlement, kernel headers), or switch to a precompiled driver "
            f"(spec.driver.usePrecompiled=true{policy}) or a driver installed on the host"
            if ctx.policy_obj is not None and ctx.policy.driver.enabled
            # The host's own driver (no policy, or one that leaves the driver to the host): its module is rebuilt on
            # the node for the kernel it runs, which a kernel update without DKMS leaves without one.
            else "reinstall the node's NVIDIA driver for its running kernel (the distribution's packages, or "
            "dkms autoinstall -k $(uname -r) where DKMS builds it), and reboot"
        ),
        "toolkit": "point the toolkit at this node's runtime config and socket (CONTAINERD_CONFIG and "
        f"CONTAINERD_SOCKET, or CRIO_CONFIG, in spec.toolkit.env{policy}), or install the toolkit on the host "
        "(nvidia-ctk runtime configure) and turn the operator's toolkit off",
        "device-plugin": "move the device plugin to NVIDIA's newest release, k8s-device-plugin:"
        f"{NEWEST['k8s-device-plugin']} ({_version_key(ctx, 'devicePlugin')}), whose fixes may include this line's",
        "gfd": "move GPU feature discovery to NVIDIA's newest release (gpu-feature-discovery:"
        f"{NEWEST['gpu-feature-discovery']}, or k8s-device-plugin:{NEWEST['k8s-device-plugin']}, which carries it; "
        f"{_version_key(ctx, 'gfd')})",
        "exporter": f"move dcgm-exporter to NVIDIA's newest release, dcgm-exporter:{NEWEST['dcgm-exporter']} "
        f"({_version_key(ctx, 'dcgmExporter')}), on a driver its DCGM supports",
        "mig": "set a MIG layout this GPU supports (nvidia.com/mig.config) or reboot the node so a pending MIG mode "
        "change takes effect",
    }
    name, tag = image_version(image) if image else ("", "")
    if link in UPGRADED_COMPONENTS and name and name not in UPGRADED_COMPONENTS[link]:
        newest = f"{name}:{NEWEST[name]}" if name in NEWEST else f"{name}'s newest release"
        steps[link] = (
            f"move {name} (the image runs {tag}) to {newest}, whose fixes may include this line's (the image tag in "
            "the chart or DaemonSet that renders it)"
        )
    if cuda:
        # What stops CUDA past a working nvidia-smi on an NVSwitch system is its Fabric Manager (the driver
        # container starts it where the policy runs the driver; the nvidia-fabricmanager service of the driver's
        # exact release on a host driver), elsewhere a driver older than the sample's CUDA.
        steps["driver"] = (
            "on an NVSwitch system (HGX, DGX) start the Fabric Manager of the driver's exact release (the "
            "nvidia-fabricmanager service on a host driver; the driver container runs it where the operator installs "
            "the driver), else move the driver to a branch that supports the validator's CUDA release"
        )
    step = steps.get(link, "correct what the line names on the node")
    found = shape_of(ctx, link=link, said=(line, refused, last), node=node)
    if found is None:
        return f"{step} ({said})"
    return f"{found.action} ({said}; gpuchain answers it by its shape: {found.what}); otherwise: {step}"


#: The NVIDIA images whose newest release `next_step` names for a link.
UPGRADED_COMPONENTS = {
    "device-plugin": ("k8s-device-plugin",),
    "gfd": ("gpu-feature-discovery", "k8s-device-plugin"),
    "exporter": ("dcgm-exporter",),
}


def _version_key(ctx: Context, key: str) -> str:
    """Where a user sets an operand's release: the policy's spec.<key>.version where the stack's policy runs it,
    else the image tag in the chart or DaemonSet that renders it."""
    if ctx.policy_obj is not None:
        return f"spec.{key}.version in {ctx.policy_ref}"
    return "image.tag in the values of the Helm release that renders it, or kubectl set image on its DaemonSet"


def last_line(log: str) -> str:
    """The last line of ``log`` that is not blank ("" for none): what `next_step` quotes of a log with no line at
    error level, and reads the shape of."""
    return next((ln.strip() for ln in reversed(log.splitlines()) if ln.strip()), "")


def shape_of(ctx: Context, *, link: str, said: tuple[str, ...], node: str = "") -> Shaped | None:
    """The first of a failure's messages (its last error line, the runtime's refusal, its last line) whose shape
    `shapes.shaped` knows, with that shape's repair: a last error line of no shape may be followed by a line that
    has one (a drain's "evicting pod" after its error)."""
    return next((found for text in said if text and (found := shaped(ctx, link=link, line=text, node=node))), None)


def shape_first(ctx: Context, *, link: str, said: tuple[str, ...], then: str, node: str = "") -> str:
    """``then`` (a repair written for no line in particular: the hook's runtime config written again) preceded by
    the repair of the first of ``said`` whose shape `shapes.shaped` knows, as "<action> (<what>); otherwise
    <then>": a wrapper's words (runc's prestart hook, the NVIDIA runtime) say that it failed, the words it wraps
    may name what is missing or refused, and that repair comes first. ``then`` alone where no shape fits."""
    found = shape_of(ctx, link=link, said=said, node=node)
    return f"{found.action} ({found.what}); otherwise {then}" if found is not None else then
