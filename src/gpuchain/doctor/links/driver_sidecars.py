"""The GPU Operator driver pod's sidecar containers: nvidia-fs (GPUDirect Storage), GDRCopy and nvidia-peermem
(GPUDirect RDMA), each run beside the driver container when its ClusterPolicy key is enabled.

A sidecar that exits at every start while the driver container runs is a fault of that sidecar's own key, not of
spec.driver: the operator renders the nvidia-fs container from spec.gds and the GDRCopy container from
spec.gdrcopy, each with an image version of its own (`resolveDriverTag` appends the node's OS tag to that version),
and the nvidia-peermem container from spec.driver.rdma, with the driver's own image (NVIDIA/gpu-operator
controllers/object_controls.go@a22dbf6 transformGDSContainer, transformGDRCopyContainer, transformPeerMemoryContainer;
assets/state-driver/0500_daemonset.yaml names them nvidia-fs-ctr, nvidia-gdrcopy-ctr, nvidia-peermem-ctr; an
NVIDIADriver carries the same keys as spec.gds, spec.gdrcopy, spec.rdma). Each operator release ships one version of
nvidia-fs and of GDRCopy (its chart's default, shipped.yaml): a sidecar running another release's version is a pin
left from an older install (Helm values kept with --reuse-values, a ClusterPolicy left in place), and the repair is
this release's version, or the pin dropped so the chart's default applies.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import yaml

from gpuchain.doctor.context import Context
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.links.releases import installed_release
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp
from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.pods import PodState
from gpuchain.doctor.releases import image_version
from gpuchain.doctor.stacks.gpu_operator import DRIVER_PREFIX
from gpuchain.kube.objects import Obj


@dataclass(frozen=True, kw_only=True)
class Sidecar:
    """One sidecar of the driver pod and the key that renders it."""

    marks: str  #: what its container's name contains (the operator finds it by that, strings.Contains)
    key: str  #: its key: under spec of an NVIDIADriver, under spec.<under> of the ClusterPolicy
    under: str = ""  #: the ClusterPolicy section that holds it ("": spec itself)
    title: str  #: how a fix names it
    versioned: bool  #: its image has a version of its own (spec.<key>.version); else it runs the driver's image
    #: what its key's other settings do, for a failure no version explains
    settings: str = ""

    @property
    def policy_key(self) -> str:
        """Its key in the ClusterPolicy, dotted under spec."""
        return f"{self.under}.{self.key}" if self.under else self.key


SIDECARS = (
    Sidecar(marks="nvidia-fs", key="gds", title="nvidia-fs (GPUDirect Storage)", versioned=True),
    Sidecar(marks="gdrcopy", key="gdrcopy", title="GDRCopy (gdrdrv)", versioned=True),
    Sidecar(
        marks="nvidia-peermem",
        key="rdma",
        under="driver",
        title="nvidia-peermem (GPUDirect RDMA)",
        versioned=False,
        # NVIDIA/cloud-native-docs gpu-operator/gpu-operator-rdma.rst: rdma.useHostMofed where the MOFED driver is
        # installed on the host rather than by the Network Operator; RDMA off where a node has no RDMA NIC.
        settings="useHostMofed=true where the MOFED driver is installed on the host, not by the Network Operator; "
        "enabled=false where the node has no RDMA network adapter",
    ),
)


def sidecar_of(container: str) -> Sidecar | None:
    """The sidecar ``container`` is (None: the driver container or another)."""
    return next((s for s in SIDECARS if s.marks in container), None)


@functools.cache
def shipped() -> tuple[tuple[str, dict[str, str]], ...]:
    """shipped.yaml: each GPU Operator release, oldest first (the file's order), with the version of each sidecar key
    it ships."""
    text = resources.files("gpuchain.doctor").joinpath("shipped.yaml").read_text()
    return tuple((str(r["release"]), {k: str(v) for k, v in r.items() if k != "release"}) for r in yaml.safe_load(text))


def shipped_in(release: str, key: str) -> str:
    """The version of ``key`` GPU Operator ``release`` ships ("" where the release or key is not known)."""
    return next((v.get(key, "") for r, v in shipped() if r == release), "")


def _runs(key: str) -> list[tuple[str, str, str]]:
    """The releases as runs of one version of ``key``: (first release, last release, version), oldest first."""
    out: list[tuple[str, str, str]] = []
    for release, versions in shipped():
        version = versions.get(key, "")
        if not version:
            continue
        if out and out[-1][2] == version:
            out[-1] = (out[-1][0], release, version)
        else:
            out.append((release, release, version))
    return out


def _span(first: str, last: str) -> str:
    return first if first == last else f"{first} to {last}"


def shipped_by(key: str, version: str) -> str:
    """The releases that ship ``version`` of ``key``, as a span ("" where none does)."""
    return "; ".join(_span(a, b) for a, b, v in _runs(key) if v == version)


def later_than(key: str, version: str) -> list[tuple[str, str]]:
    """The versions of ``key`` the releases after the last one that ships ``version`` ship, as (span, version); the
    newest two runs where no release ships ``version``."""
    runs = _runs(key)
    last = max((i for i, (_, _, v) in enumerate(runs) if v == version), default=None)
    after = runs[last + 1 :] if last is not None else runs[-2:]
    return [(_span(a, b), v) for a, b, v in after]


def _version(image: str, dist: str) -> str:
    """The sidecar's version from its image tag: the tag less the OS tag the operator appended."""
    tag = image_version(image)[1]
    return tag[: -len(dist) - 1] if dist and tag.endswith(f"-{dist}") else tag.rsplit("-", 1)[0]


def _where_repaired(read: str, said: str, target: str) -> str:
    """The step where no version explains the failure: the line, where there is one, is what to go by; where none
    was collected, reading it comes first."""
    if said:
        return f"# what the line names is repaired in {target}"
    return f"{read}   # gpuchain read no line of it; what it says is repaired in {target}"


def sidecar_repair(
    ctx: Context,
    *,
    pod: Obj,
    state: PodState,
    container: str,
    image: str,
    dist: str,
    read: str,
    again: str,
    said: str = "",
) -> Known | None:
    """The repair of a driver pod whose sidecar ``container`` (running ``image``) exits at every start, having left
    no line (``said`` "") or a line the catalog does not know (``said``): its own key, at the version the running GPU
    Operator release ships where it runs another; None where ``container`` is no sidecar. ``dist`` is the node's OS
    tag, ``read`` the command that shows its previous run's log, ``again`` the one that starts the pod again."""
    car = sidecar_of(container)
    if car is None:
        return None
    ds = owner_ds(pod)
    crd = ds.startswith(DRIVER_PREFIX)
    key = car.key if crd else car.policy_key
    where = f"the NVIDIADriver that renders DaemonSet {ds}" if crd else ctx.policy_ref
    head = (
        f"the driver pod is {state.status}: its driver container runs, and its {car.title} sidecar {container} exits "
        f"at every start ({state.restarts} restarts); that container is rendered from spec.{key} of {where}, not "
        "spec.driver"
    )
    nothing = (
        f"its last error line {said!r} is not in gpuchain's catalog"
        if said
        else "no line of it was collected, so the reason is in its previous run's log"
    )
    evidence = (f"container {container}: {image}", *([f"unrecognised: {said}"] if said else ()))
    if not car.versioned:
        return Known(
            cause=f"{head}; {nothing}.",
            evidence=evidence,
            action=None,
            fix=f"{_where_repaired(read, said, f'spec.{key} of {where} ({car.settings})')}; then {again}",
        )
    # The release the install shows (Helm labels, the operator's image), not the validator's version: that is a key
    # of the same ClusterPolicy, as stale as the pin this looks for where the policy outlived an older install.
    running, release = _version(image, dist), installed_release(ctx)[0]
    ships = shipped_in(release, car.key) if release else ""
    from_ = shipped_by(car.key, running)
    whose = f" ({running} is what GPU Operator {from_} ships)" if from_ else ""
    evidence = (*evidence, "source: NVIDIA/gpu-operator deployments/gpu-operator/values.yaml")
    drop = (
        f"or remove the {car.key}.version override (from the Helm values, or kept by an upgrade run with "
        "--reuse-values) so the chart's default applies"
    )
    if ships and ships != running:
        action = (
            None
            if crd
            else Fix(
                FixOp.PATCH_POLICY,
                ctx.policy_name,
                {"spec": {car.key: {"version": ships}}, NOT_SIMULATED: f"the {car.title} sidecar is not simulated"},
            )
        )
        set_it = ctx.stack.render(action) if action else f"# set spec.{key}.version of {where} to {ships}"
        return Known(
            cause=f"{head}, and it runs {car.marks} {running} while GPU Operator {release} ships {ships} (its "
            f"chart's {car.key}.version): a version pinned for another release{whose}, left from an older install; "
            f"{nothing}.",
            evidence=(*evidence, f"GPU Operator {release}: {car.key}.version {ships}"),
            action=action,
            fix=f"{set_it}   # the {car.title} release GPU Operator {release} ships; {drop}; then {again}; its "
            f"reason, if the pod still fails: {read}",
        )
    if ships:
        return Known(
            cause=f"{head}; it runs {ships}, the version GPU Operator {release} ships, and {nothing}.",
            evidence=evidence,
            action=None,
            fix=f"{_where_repaired(read, said, f'spec.{key} of {where}')}; then {again}",
        )
    later = "; ".join(f"{span}: {v}" for span, v in later_than(car.key, running))
    return Known(
        cause=f"{head}, and it runs {car.marks} {running}{whose}; each GPU Operator release ships its own "
        f"{car.marks} version, so one pinned for an older release is left from that install where the operator was "
        f"upgraded; {nothing}.",
        evidence=evidence,
        action=None,
        fix=f"# set spec.{key}.version of {where} to the {car.title} release your GPU Operator ships"
        + (f" ({later})" if later else "")
        + f", {drop}; then {again}; its reason, if that is not it: {read}",
    )
