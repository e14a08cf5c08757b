"""From a node's MIG state and a named layout to the list of steps that gets it there.

Everything here is pure: ``observe`` (the only function that reads a backend) turns the GPUs
into a ``NodeMigState``; ``resolve`` decides, per GPU, what the layout wants (or explains why it
cannot be had, before anything is touched); ``plan`` lists the steps for the GPUs that differ
and nothing for those that already match, which is what makes apply idempotent.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuchain.gpu import catalog
from gpuchain.gpu.backend import GpuBackend, GpuInstance, MigMode
from gpuchain.gpu.errors import InvalidConfigError
from gpuchain.mig.config import LayoutError, MigConfigEntry, MigPartedConfig


@dataclass(frozen=True, kw_only=True)
class GpuMigState:
    """One GPU as the MIG manager sees it. ``mode`` is None for a GPU without MIG."""

    index: int
    uuid: str
    name: str
    pci_device_id: int
    model: catalog.GpuModel | None
    mode: MigMode | None
    instances: tuple[GpuInstance, ...] = ()

    @property
    def label(self) -> str:
        """How errors name the GPU: index and model."""
        return f"GPU {self.index} ({self.model.key if self.model else self.name})"

    @property
    def layout(self) -> dict[str, int]:
        """MIG device name -> count of the compute instances that exist now, named as mig-parted
        reads a GPU back (``3g.40gb`` for a full-size one, ``1c.3g.40gb`` for a smaller one)."""
        return dict(
            Counter(_device_name(gi, ci.slices, self.model) for gi in self.instances for ci in gi.compute_instances)
        )


@dataclass(frozen=True)
class NodeMigState:
    gpus: tuple[GpuMigState, ...]

    def gpu(self, index: int) -> GpuMigState:
        for g in self.gpus:
            if g.index == index:
                return g
        raise KeyError(f"no GPU {index} on this node")


@dataclass(frozen=True)
class GpuTarget:
    """What one GPU should look like: MIG off, or on with exactly these placed instances."""

    index: int
    enabled: bool
    placements: tuple[catalog.Placement, ...] = ()

    @property
    def layout(self) -> dict[str, int]:
        """MIG device name -> count the placements make (see ``GpuMigState.layout``)."""
        return dict(Counter(name for p in self.placements for name in p.device_names))


class StepKind(enum.StrEnum):
    DESTROY_GPU_INSTANCE = "destroy-gpu-instance"
    SET_MIG_MODE = "set-mig-mode"
    CREATE_MIG_DEVICE = "create-mig-device"


@dataclass(frozen=True, kw_only=True)
class Step:
    """One change to one GPU. Creating MIG devices is a GPU instance plus its compute instances:
    ``compute`` lists their sizes (empty: one full-size compute instance)."""

    kind: StepKind
    gpu: int
    enabled: bool | None = None
    gi_id: int | None = None
    profile: str | None = None
    start: int | None = None
    compute: tuple[int, ...] = ()

    def describe(self) -> str:
        if self.kind is StepKind.DESTROY_GPU_INSTANCE:
            return f"GPU {self.gpu}: destroy GPU instance {self.gi_id} ({self.profile})"
        if self.kind is StepKind.SET_MIG_MODE:
            return f"GPU {self.gpu}: {'enable' if self.enabled else 'disable'} MIG mode"
        text = f"GPU {self.gpu}: create {self.profile} at memory slice {self.start}"
        if self.compute:
            text += " with compute instances of " + ", ".join(f"{c}c" for c in self.compute)
        return text


def observe(backend: GpuBackend) -> NodeMigState:
    """Read MIG mode and GPU instances of every GPU (the imperative edge of this module)."""
    gpus = []
    for gpu in backend.inventory().gpus:
        model = catalog.model_for_name(gpu.name, gpu.pci_device_id)
        mode = backend.mig_mode(gpu.index) if gpu.mig_capable else None
        instances: tuple[GpuInstance, ...] = ()
        if mode is not None and mode.current and model is not None and model.mig_capable:
            instances = backend.gpu_instances(gpu.index)
        gpus.append(
            GpuMigState(
                index=gpu.index,
                uuid=gpu.uuid,
                name=gpu.name,
                pci_device_id=gpu.pci_device_id,
                model=model,
                mode=mode,
                instances=instances,
            )
        )
    return NodeMigState(tuple(gpus))


def resolve(state: NodeMigState, *, config: MigPartedConfig, name: str) -> tuple[GpuTarget, ...]:
    """The target of every GPU the named layout selects, or a LayoutError naming GPU and reason.

    Stricter than mig-parted on purpose: a layout that selects no GPU of this node, a GPU
    selected by two entries, or a listed index the node lacks, are errors rather than no-ops.
    As in mig-parted, ``devices: all`` passes over GPUs without MIG.
    """
    entries = config.layout(name)
    indexes = {g.index for g in state.gpus}
    for i, entry in enumerate(entries):
        missing = sorted(set(entry.devices) - indexes) if isinstance(entry.devices, list) else []
        if missing:
            raise LayoutError(
                f"layout {name!r} entry {i} names GPU {', '.join(map(str, missing))}, "
                f"but this node has GPUs {', '.join(map(str, sorted(indexes)))}"
            )
    targets = []
    skipped: list[GpuMigState] = []
    for gpu in state.gpus:
        chosen = [(i, e) for i, e in enumerate(entries) if e.selects(gpu.index, gpu.pci_device_id)]
        if len(chosen) > 1:
            raise LayoutError(
                f"{gpu.label} is selected by entries {', '.join(str(i) for i, _ in chosen)} of layout {name!r}; "
                "narrow their devices or device-filter so each GPU is selected once"
            )
        if chosen:
            target = _target(gpu, chosen[0][1], name)
            if target is not None:
                targets.append(target)
            else:
                skipped.append(gpu)
    if not targets:
        if skipped:
            reasons = ", ".join(f"{g.label} does not support MIG" for g in skipped)
            raise LayoutError(f"layout {name!r} selects no MIG-capable GPU of this node ({reasons})")
        models = ", ".join(sorted({g.model.key if g.model else g.name for g in state.gpus})) or "none"
        raise LayoutError(f"layout {name!r} selects none of this node's GPUs (models: {models})")
    return tuple(targets)


def _target(gpu: GpuMigState, entry: MigConfigEntry, name: str) -> GpuTarget | None:
    """What the entry wants of this GPU; None for a GPU without MIG under ``devices: all``,
    which mig-parted skips (a node's display GPU beside its MIG GPUs)."""
    if not entry.mig_enabled:
        return GpuTarget(gpu.index, False)
    if gpu.mode is None:
        if entry.devices == "all":
            return None
        raise LayoutError(f"layout {name!r}: {gpu.label} does not support MIG; remove it from devices")
    if gpu.model is None or not gpu.model.mig_capable:
        raise LayoutError(
            f"layout {name!r}: {gpu.label} supports MIG but is not in gpuchain's MIG catalog, so its "
            "profiles and placements are unknown; add a device-filter to skip it"
        )
    try:
        placements = catalog.place_layout(gpu.model, entry.layout)
    except InvalidConfigError as exc:
        raise LayoutError(f"layout {name!r}: GPU {gpu.index} {exc}") from None
    return GpuTarget(gpu.index, True, placements)


def matches(gpu: GpuMigState, target: GpuTarget) -> bool:
    """Whether the GPU already has the target: same mode (nothing pending) and the same MIG
    devices by name and count, as mig-parted compares them, with no GPU instance left without a
    compute instance."""
    if gpu.mode is None:
        return not target.enabled
    if gpu.mode.current != target.enabled or gpu.mode.pending != target.enabled:
        return False
    if not target.enabled:
        return True
    return gpu.layout == target.layout and all(gi.compute_instances for gi in gpu.instances)


def _device_name(gi: GpuInstance, ci_slices: int, model: catalog.GpuModel | None) -> str:
    """The MIG device a compute instance of ``ci_slices`` in ``gi`` is (``1c.3g.40gb``)."""
    if model is not None and ci_slices == model.profile(gi.profile).gi_slices:
        return gi.profile
    return catalog.device_profile(gi.profile, ci_slices)


def differences(state: NodeMigState, targets: Sequence[GpuTarget]) -> list[str]:
    """One line per GPU that does not have its target yet; empty when the node has the layout."""
    out = []
    for target in targets:
        gpu = state.gpu(target.index)
        if matches(gpu, target):
            continue
        out.append(f"{gpu.label}: has {_describe_gpu(gpu)}, layout wants {_describe_target(target)}")
    return out


def lost_to_reset(gpu: GpuMigState, target: GpuTarget) -> bool:
    """Whether the GPU differs from its target only as a GPU reset leaves a MIG GPU: MIG mode on
    and nothing pending, but no GPU instance left, where the target wants MIG devices. Such a GPU
    runs no CUDA work, so no pod can be using it: carving it again disturbs nobody."""
    mode = gpu.mode
    return (
        mode is not None
        and mode.current
        and mode.pending
        and not gpu.instances
        and target.enabled
        and bool(target.placements)
    )


def recarvable(state: NodeMigState, targets: Sequence[GpuTarget]) -> tuple[int, ...]:
    """The GPUs to carve again after a reset destroyed their MIG devices: every GPU that differs
    from its target, provided each of them differs only that way (``lost_to_reset``); empty when
    none differs or any other does (that is a layout change, which goes through the full change)."""
    differing = [(state.gpu(t.index), t) for t in targets if not matches(state.gpu(t.index), t)]
    if not differing or not all(lost_to_reset(g, t) for g, t in differing):
        return ()
    return tuple(g.index for g, _ in differing)


def _describe_gpu(gpu: GpuMigState) -> str:
    if gpu.mode is None:
        return "no MIG support"
    text = _describe(gpu.mode.current, gpu.layout)
    if gpu.mode.reset_pending:
        text += f" (MIG {'enable' if gpu.mode.pending else 'disable'} pending a GPU reset)"
    empty = [gi.profile for gi in gpu.instances if not gi.compute_instances] if gpu.mode.current else []
    if empty:
        text += f" (GPU instances without a compute instance: {', '.join(empty)})"
    return text


def _describe_target(target: GpuTarget) -> str:
    return _describe(target.enabled, target.layout)


def _describe(enabled: bool, layout: Mapping[str, int]) -> str:
    if not enabled:
        return "MIG disabled"
    if not layout:
        return "MIG enabled, no MIG devices"
    return "MIG " + ", ".join(f"{c}x {p}" for p, c in sorted(layout.items()))


def plan(state: NodeMigState, targets: Sequence[GpuTarget]) -> list[Step]:
    """The steps that give every target GPU its layout, touching only GPUs that differ.

    A differing GPU is cleared and carved again (as mig-parted does): first every destroy, then
    every mode change (so one reset can cover several GPUs), then every create.
    """
    destroys: list[Step] = []
    modes: list[Step] = []
    creates: list[Step] = []
    for target in targets:
        gpu = state.gpu(target.index)
        if matches(gpu, target) or gpu.mode is None:
            continue
        if gpu.mode.current:
            destroys.extend(
                Step(kind=StepKind.DESTROY_GPU_INSTANCE, gpu=gpu.index, gi_id=gi.gi_id, profile=gi.profile)
                for gi in gpu.instances
            )
        if gpu.mode.current != target.enabled or gpu.mode.pending != target.enabled:
            modes.append(Step(kind=StepKind.SET_MIG_MODE, gpu=gpu.index, enabled=target.enabled))
        creates.extend(
            Step(
                kind=StepKind.CREATE_MIG_DEVICE, gpu=gpu.index, profile=p.profile.name, start=p.start, compute=p.compute
            )
            for p in target.placements
        )
    return destroys + modes + creates


def snapshot(state: NodeMigState) -> tuple[GpuTarget, ...]:
    """Targets that describe the node as it is now, to restore it after a failed apply."""
    targets = []
    for gpu in state.gpus:
        if gpu.mode is None or gpu.model is None:
            continue
        placements = tuple(_placement(gpu.model, gi) for gi in gpu.instances)
        targets.append(GpuTarget(gpu.index, gpu.mode.current, placements))
    return tuple(targets)


def _placement(model: catalog.GpuModel, gi: GpuInstance) -> catalog.Placement:
    """A GPU instance as it is, to carve again: its compute instances unless it has just one
    full-size one (or none, which becomes one full-size one)."""
    profile = model.profile(gi.profile)
    sizes = tuple(ci.slices for ci in gi.compute_instances)
    return catalog.Placement(profile, gi.start, () if sizes in ((), (profile.gi_slices,)) else sizes)
