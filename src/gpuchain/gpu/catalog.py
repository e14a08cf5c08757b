"""What each GPU model is, which MIG profiles it offers, and which MIG layouts it can hold.

The facts (names, memory, PCI ids, MIG profiles, their instance limits, engines and placements)
live in ``mig_catalog.yaml`` beside this module, each table with its sources and every figure
no source gave marked as derived. Profile names follow mig-parted's grammar
(``[<c>c.]<g>g.<m>gb[+attr,...|-attr,...]``), parsed here once for every layer. Layout checks
are exact: a layout fits when every GPU instance gets a legal start slot without overlap and the
media engines suffice, which is how the hardware decides, not a sum of slices.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from gpuchain.gpu import shipped
from gpuchain.gpu.errors import InvalidConfigError

MEMORY_SLICES = 8
"""The most MIG memory slices any catalogued card has; each model says its own (A30: 4)."""

ATTRIBUTE_MEDIA = "me"
ATTRIBUTE_MEDIA_ALL = "me.all"
ATTRIBUTE_GRAPHICS = "gfx"


def resource_safe(profile: str) -> str:
    """A MIG profile name as it appears in resource names and labels (``1g.10gb+me`` -> ``1g.10gb.me``).

    ``+`` is not allowed in Kubernetes resource names or label values, so NVIDIA writes it as ``.``.
    """
    return profile.replace("+", ".")


# ---- the profile grammar ------------------------------------------------------------------------

_FIELD = re.compile(r"[0-9]+")
_ATTRIBUTE = re.compile(r"[A-Za-z](?:[A-Za-z0-9.]*[A-Za-z0-9])?")


@dataclass(frozen=True, kw_only=True)
class ProfileName:
    """A parsed MIG profile name: ``2c.3g.20gb`` is 2 compute slices of a 3-slice, 20 GB GPU instance.

    ``attributes`` follow ``+`` (``me``, ``me.all``, ``gfx``), ``negated`` follow ``-`` (``me``);
    a name has one kind or none. Both are sorted, so equal profiles compare equal however the
    file ordered them, as NVIDIA's matcher treats them.
    """

    compute_slices: int
    gi_slices: int
    memory_gb: int
    attributes: tuple[str, ...] = ()
    negated: tuple[str, ...] = ()

    @property
    def gpu_instance(self) -> str:
        """The GPU-instance profile this names (``1c.3g.20gb`` -> ``3g.20gb``)."""
        return f"{self.gi_slices}g.{self.memory_gb}gb{self._suffix}"

    @property
    def canonical(self) -> str:
        """The name as NVIDIA prints it: the ``<c>c.`` part only when it differs from ``<g>g``."""
        if self.compute_slices == self.gi_slices:
            return self.gpu_instance
        return f"{self.compute_slices}c.{self.gpu_instance}"

    @property
    def splits_instance(self) -> bool:
        """Whether this asks for a compute instance smaller than its GPU instance."""
        return self.compute_slices != self.gi_slices

    @property
    def _suffix(self) -> str:
        if self.attributes:
            return "+" + ",".join(self.attributes)
        if self.negated:
            return "-" + ",".join(self.negated)
        return ""


def parse_profile(text: str) -> ProfileName:
    """Parse a profile name with mig-parted's grammar, or raise ValueError saying what is wrong.

    Accepts exactly what NVIDIA's parser accepts (go-nvlib's format check, which mig-parted
    runs on every key of ``mig-devices``): ``<g>g.<m>gb`` or ``<c>c.<g>g.<m>gb``, each number
    plain digits, then optionally ``+`` or ``-`` and a comma-separated list of distinct
    attributes (a letter first, letters, digits and inner dots after). Whether the profile
    exists is a question for a GPU model (``GpuModel.profile``), not for the grammar.
    """
    if not text:
        raise ValueError("'' is not a MIG profile name: it is empty")
    plus, minus = "+" in text, "-" in text
    if plus and minus:
        raise ValueError(f"{text!r} is not a MIG profile name: it has both '+' and '-' attributes")
    sep = "+" if plus else "-"
    base, has_attrs, attr_text = text.partition(sep) if (plus or minus) else (text, "", "")
    parts = base.split(".", 2)
    if len(parts) == 2:
        g, gb = _field(parts[0], "g", text), _field(parts[1], "gb", text)
        c = g
    elif len(parts) == 3:
        c, g, gb = _field(parts[0], "c", text), _field(parts[1], "g", text), _field(parts[2], "gb", text)
    else:
        raise ValueError(
            f"{text!r} is not a MIG profile name: expected <g>g.<m>gb or <c>c.<g>g.<m>gb (such as 1g.10gb, 1c.2g.20gb)"
        )
    attrs: tuple[str, ...] = ()
    if has_attrs:
        items = attr_text.split(",")
        for item in items:
            if not _ATTRIBUTE.fullmatch(item):
                raise ValueError(
                    f"{text!r} is not a MIG profile name: attribute {item!r} must start with a letter and hold "
                    "only letters, digits and inner dots (such as me, me.all, gfx)"
                )
        if len(set(items)) != len(items):
            raise ValueError(f"{text!r} is not a MIG profile name: it repeats an attribute")
        attrs = tuple(sorted(items))
    return ProfileName(
        compute_slices=c, gi_slices=g, memory_gb=gb, attributes=attrs if plus else (), negated=attrs if minus else ()
    )


def _field(part: str, unit: str, text: str) -> int:
    number = part.removesuffix(unit)
    if number == part or not _FIELD.fullmatch(number):
        raise ValueError(f"{text!r} is not a MIG profile name: {part!r} is not a number followed by {unit!r}")
    return int(number)


# ---- catalog types -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MigProfile:
    """One GPU-instance profile (with its full-size compute instance) as NVML lists it."""

    name: str
    gi_slices: int
    memory_slices: int
    memory_mib: int
    max_instances: int
    multiprocessors: int
    starts: tuple[int, ...]
    nvml_gi_profile_id: int
    nvml_ci_profile_id: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg: int
    ofa: int
    derived: tuple[str, ...] = ()
    """Fields no source gave for this row, with the rule that produced them (see the data file)."""

    @cached_property
    def parsed(self) -> ProfileName:
        """The name's parts (slices, attributes), parsed once: placement loops ask for them often."""
        return parse_profile(self.name)

    @property
    def media_extensions(self) -> bool:
        """Whether the instance takes the media extensions (``+me`` or ``+me.all``); one per GPU."""
        return bool({ATTRIBUTE_MEDIA, ATTRIBUTE_MEDIA_ALL} & set(self.parsed.attributes))

    @property
    def resource_suffix(self) -> str:
        """The name in `nvidia.com/mig-<suffix>` (see ``resource_safe``)."""
        return resource_safe(self.name)

    @property
    def engines(self) -> tuple[int, int, int, int, int]:
        """(copy engines, NVDEC, NVENC, JPEG, OFA): the order the engine check and the data file use."""
        return (self.copy_engines, self.decoders, self.encoders, self.jpeg, self.ofa)


@dataclass(frozen=True, kw_only=True)
class GpuModel:
    """A GPU product: what NVML says about it and its MIG profile table (empty: no MIG)."""

    key: str
    name: str
    memory_mib: int
    pci_device_id: int
    compute_capability: tuple[int, int]
    multiprocessors: int
    nvlinks: int
    mig_profiles: tuple[MigProfile, ...] = ()
    variants: tuple[tuple[str, int], ...] = ()
    """Other (NVML name, PCI device id) pairs with the same MIG table: PCIe cards, older driver names."""
    memory_slices: int = MEMORY_SLICES
    compute_slices: int = 7
    unverified: tuple[str, ...] = ()
    """Fields of this card no source gave (the data file says what was used instead)."""

    @property
    def pci_device_ids(self) -> tuple[int, ...]:
        """Every PCI device id of this model, the main one first."""
        return tuple(dict.fromkeys((self.pci_device_id, *(pci for _, pci in self.variants))))

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    def profile(self, name: str) -> MigProfile:
        """The GPU-instance profile a name selects (``1c.3g.20gb`` selects ``3g.20gb``).

        Names are compared as NVIDIA compares them: parsed, attributes in any order. The error
        lists the valid names for this card.
        """
        try:
            wanted = parse_profile(name).gpu_instance
        except ValueError as exc:
            raise InvalidConfigError(f"{self.key}: {exc}") from None
        for p in self.mig_profiles:
            if p.name == wanted:
                return p
        if not self.mig_profiles:
            raise InvalidConfigError(f"{self.key} does not support MIG (asked for profile {name!r})")
        valid = ", ".join(p.name for p in self.mig_profiles)
        raise InvalidConfigError(f"{self.key} has no MIG profile {name!r}; valid profiles: {valid}")


# ---- the data file -------------------------------------------------------------------------------

_FULL_GI_ID = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
"""NVML_GPU_INSTANCE_PROFILE_<n>_SLICE for a plain profile of n compute slices."""
_ATTRIBUTE_GI_ID = {
    ((ATTRIBUTE_MEDIA,), (), 1): 7,  # 1_SLICE_REV1
    ((ATTRIBUTE_MEDIA,), (), 2): 8,  # 2_SLICE_REV1
    ((ATTRIBUTE_GRAPHICS,), (), 1): 10,
    ((ATTRIBUTE_GRAPHICS,), (), 2): 11,
    ((ATTRIBUTE_GRAPHICS,), (), 4): 12,
    ((), (ATTRIBUTE_MEDIA,), 1): 13,  # 1_SLICE_NO_ME
    ((), (ATTRIBUTE_MEDIA,), 2): 14,
    ((ATTRIBUTE_MEDIA_ALL,), (), 1): 15,
    ((ATTRIBUTE_MEDIA_ALL,), (), 2): 16,
}
_DOUBLE_MEMORY_1G_ID = 9
"""NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: one compute slice over two memory slices (1g.20gb)."""
_CI_ID = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
"""NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE."""


def _gi_profile_id(name: ProfileName, memory_slices: int) -> int:
    """The NVML constant that asks for this GPU-instance profile (not the id nvidia-smi prints)."""
    if name.attributes or name.negated:
        return _ATTRIBUTE_GI_ID[(name.attributes, name.negated, name.gi_slices)]
    if name.gi_slices == 1 and memory_slices == 2:
        return _DOUBLE_MEMORY_1G_ID
    return _FULL_GI_ID[name.gi_slices]


def _profile(row: dict[str, Any]) -> MigProfile:
    name = parse_profile(row["name"])
    ce, dec, enc, jpeg, ofa = row["engines"]
    return MigProfile(
        name=name.canonical,
        gi_slices=name.gi_slices,
        memory_slices=row["mem"],
        memory_mib=row["mib"],
        max_instances=row["max"],
        multiprocessors=row["sms"],
        starts=tuple(row["starts"]),
        nvml_gi_profile_id=_gi_profile_id(name, row["mem"]),
        nvml_ci_profile_id=_CI_ID[name.gi_slices],
        copy_engines=ce,
        decoders=dec,
        encoders=enc,
        jpeg=jpeg,
        ofa=ofa,
        derived=tuple(row.get("derived", ())),
    )


def _load() -> tuple[dict[str, GpuModel], dict[str, GpuModel]]:
    """The catalogued models by key, and every variant (its own key, name and PCI id) by key."""
    data = shipped.data("mig_catalog.yaml")
    tables = {
        key: (tuple(_profile(r) for r in t["profiles"]), t["memory_slices"], t["compute_slices"])
        for key, t in data["tables"].items()
    }
    models: dict[str, GpuModel] = {}
    variants: dict[str, GpuModel] = {}
    for m in data["models"]:
        profiles, memory_slices, compute_slices = tables[m["mig"]] if "mig" in m else ((), MEMORY_SLICES, 7)
        model = GpuModel(
            key=m["key"],
            name=m["name"],
            memory_mib=m["memory_mib"],
            pci_device_id=m["pci"],
            compute_capability=(m["cc"][0], m["cc"][1]),
            multiprocessors=m["sms"],
            nvlinks=m["nvlinks"],
            mig_profiles=profiles,
            variants=tuple((alias, m["pci"]) for alias in m.get("aliases", ()))
            + tuple((v["name"], v["pci"]) for v in m.get("variants", ())),
            memory_slices=memory_slices,
            compute_slices=compute_slices,
            unverified=tuple(m.get("unverified", ())),
        )
        models[model.key] = model
        for v in m.get("variants", ()):
            variants[v["key"]] = replace(
                model,
                key=v["key"],
                name=v["name"],
                pci_device_id=v["pci"],
                multiprocessors=v.get("sms", model.multiprocessors),
                nvlinks=v.get("nvlinks", model.nvlinks),
                variants=(),
                unverified=tuple(v.get("unverified", ())),
            )
    return models, variants


_loaded: tuple[dict[str, GpuModel], dict[str, GpuModel]] | None = None


def _catalog() -> tuple[dict[str, GpuModel], dict[str, GpuModel]]:
    """The data file, read on first use: commands that never look a card up do not pay for it."""
    global _loaded
    if _loaded is None:
        _loaded = _load()
    return _loaded


def __getattr__(name: str) -> dict[str, GpuModel]:
    """``MODELS``: one entry per MIG table (and L4). ``VARIANTS``: other products sharing a table,
    each with its own key, NVML name and PCI id, so a simulated node can hold one (``A100-PCIE-40GB``)."""
    if name == "MODELS":
        return _catalog()[0]
    if name == "VARIANTS":
        return _catalog()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


MODELS: dict[str, GpuModel]
VARIANTS: dict[str, GpuModel]


def model(key: str) -> GpuModel:
    """A catalogued GPU model or variant by key (case-insensitive); the error lists the known keys."""
    models, variants = _catalog()
    for k, m in (*models.items(), *variants.items()):
        if k.lower() == key.lower():
            return m
    raise InvalidConfigError(f"unknown GPU model {key!r}; known models: {', '.join((*models, *variants))}")


def model_for_name(name: str, pci_device_id: int | None = None) -> GpuModel | None:
    """The catalogued model of a GPU as NVML reports it, if any.

    The PCI device id decides when given (a card's name differs between drivers and form
    factors, its id does not); the NVML name, or one of the model's variant names, otherwise.
    """
    models = _catalog()[0]
    if pci_device_id is not None:
        by_id = next((m for m in models.values() if pci_device_id in m.pci_device_ids), None)
        if by_id is not None:
            return by_id
    return next((m for m in models.values() if name == m.name or name in (v for v, _ in m.variants)), None)


UNKNOWN_ARCHITECTURE = "undefined"
"""What GFD's ``gpu.family`` says for a compute capability it does not know."""

_ARCHITECTURES: dict[int, tuple[tuple[int, str], ...]] = {
    1: ((0, "tesla"),),
    2: ((0, "fermi"),),
    3: ((0, "kepler"),),
    5: ((0, "maxwell"),),
    6: ((0, "pascal"),),
    7: ((0, "volta"), (5, "turing")),
    8: ((0, "ampere"), (9, "ada-lovelace")),
    9: ((0, "hopper"),),
    10: ((0, "blackwell"),),
    12: ((0, "blackwell"),),
    13: ((0, "rubin"),),
}
"""Compute capability major -> (first minor, architecture), ascending: 7.0-7.4 volta, 7.5+ turing."""


def architecture(compute_capability: tuple[int, int]) -> str:
    """The GPU architecture of a CUDA compute capability, in GFD's spelling (``ada-lovelace``).

    The one table every layer uses: feature discovery publishes it as is (``gpu.family``), the
    DRA driver capitalises it. Unknown capabilities are ``undefined``, as GFD labels them.
    """
    major, minor = compute_capability
    name = UNKNOWN_ARCHITECTURE
    for first_minor, arch in _ARCHITECTURES.get(major, ()):
        if minor >= first_minor:
            name = arch
    return name


@dataclass(frozen=True)
class Placement:
    """Where one MIG GPU instance sits: its profile, first memory slice and compute instances."""

    profile: MigProfile
    start: int
    compute: tuple[int, ...] = ()
    """Sizes (compute slices) of the compute instances a layout splits the GPU instance into
    (``1c.3g.20gb`` x 3 gives ``(1, 1, 1)``); empty: one compute instance over all of it."""

    @property
    def device_names(self) -> tuple[str, ...]:
        """The MIG devices this GPU instance yields, named as NVIDIA names them."""
        if not self.compute:
            return (self.profile.name,)
        return tuple(
            self.profile.name if c == self.profile.gi_slices else f"{c}c.{self.profile.name}" for c in self.compute
        )


def compute_starts(ci_slices: int, gi_slices: int) -> tuple[int, ...]:
    """Where a compute instance of ``ci_slices`` may start inside a GPU instance of ``gi_slices``.

    As ``nvidia-smi mig -lcipp`` lists them: aligned to the power of two at or above the size
    (1c anywhere, 2c on even slices, 3c and 4c at 0 or 4), and inside the GPU instance. A
    4-slice GPU instance offers no 3-slice compute instance (NVIDIA's go-nvml A100 and H100
    mocks list 1, 2 and 4 for it, and mig-parted's A100 table has no ``3c.4g``): empty.
    """
    if (ci_slices, gi_slices) == (3, 4) or ci_slices < 1:
        return ()
    align = 1
    while align < ci_slices:
        align *= 2
    return tuple(s for s in range(0, gi_slices, align) if s + ci_slices <= gi_slices)


def device_profile(gi_profile: str, ci_slices: int) -> str:
    """The name of the MIG device a compute instance of ``ci_slices`` in a GPU instance of
    ``gi_profile`` makes, as NVIDIA prints it (``3g.40gb`` with 1 slice: ``1c.3g.40gb``)."""
    return replace(parse_profile(gi_profile), compute_slices=ci_slices).canonical


def nvml_ci_profile_id(ci_slices: int) -> int:
    """The NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE constant that asks for ``ci_slices`` slices."""
    try:
        return _CI_ID[ci_slices]
    except KeyError:
        raise InvalidConfigError(f"NVML has no {ci_slices}-slice compute instance profile") from None


def layout_devices(layout: Mapping[str, int]) -> Counter[str]:
    """Profile -> count with names made canonical and equal profiles merged (``1c.1g.5gb`` is ``1g.5gb``).

    Raises InvalidConfigError for a name the grammar refuses or a negative count.
    """
    counts: Counter[str] = Counter()
    for name, count in layout.items():
        try:
            canonical = parse_profile(name).canonical
        except ValueError as exc:
            raise InvalidConfigError(str(exc)) from None
        if count < 0:
            raise InvalidConfigError(f"MIG profile {name}: count must be >= 0, got {count}")
        counts[canonical] += count
    return +counts


def place_layout(gpu: GpuModel, layout: Mapping[str, int]) -> tuple[Placement, ...]:
    """Place ``{profile: count}`` on one GPU, or explain why it cannot be placed.

    Compute-instance profiles (``1c.3g.20gb``) share GPU instances, as few as their sizes allow
    (see ``_group``); ``Placement.compute`` lists the compute instances to create in each, in
    the order that packs them.

    Raises InvalidConfigError naming the GPU model, the profile and the limit it breaks.
    """
    wanted = layout_devices(layout)
    items: list[tuple[ProfileName, MigProfile]] = []
    for name, count in wanted.items():
        parsed = parse_profile(name)
        prof = gpu.profile(name)
        if parsed.splits_instance and not compute_starts(parsed.compute_slices, parsed.gi_slices):
            raise InvalidConfigError(
                f"{gpu.key}: {name}: a {parsed.gi_slices}-slice GPU instance has no "
                f"{parsed.compute_slices}-slice compute instance"
            )
        items.extend([(parsed, prof)] * count)
    instances = _group(items)
    per_profile = Counter(prof.name for prof, _ in instances)
    for prof_name, n in per_profile.items():
        prof = gpu.profile(prof_name)
        if n > prof.max_instances:
            raise InvalidConfigError(f"{gpu.key}: {n} x {prof_name} does not fit: at most {prof.max_instances} per GPU")
    _check_shared_units(gpu, [prof for prof, _ in instances], wanted)
    order = sorted(range(len(instances)), key=lambda i: (-instances[i][0].memory_slices, len(instances[i][0].starts)))
    found = _search([instances[i][0] for i in order], 0, [False] * gpu.memory_slices, [])
    if found is None:
        memory = sum(prof.memory_slices for prof, _ in instances)
        raise InvalidConfigError(
            f"{gpu.key}: layout {_fmt(wanted)} has no legal placement "
            f"({memory} of {gpu.memory_slices} memory slices requested)"
        )
    placed = [replace(p, compute=instances[i][1]) for i, p in zip(order, found, strict=True)]
    return tuple(sorted(placed, key=lambda pl: pl.start))


def _group(items: list[tuple[ProfileName, MigProfile]]) -> list[tuple[MigProfile, tuple[int, ...]]]:
    """GPU instances with the compute-instance sizes each holds, in creation order (empty: one
    full compute instance).

    A full-size compute instance has its GPU instance to itself. Smaller ones of the same GPU
    instance profile share as few GPU instances as their sizes allow: mig-parted reaches that by
    trying orders until the hardware accepts one; here the search runs on the placement rules
    (``compute_starts``, each compute instance at the first free start, as the driver places
    one created without a placement), so the order returned is one that packs.
    """
    out: list[tuple[MigProfile, tuple[int, ...]]] = []
    split: dict[str, list[int]] = {}
    profiles: dict[str, MigProfile] = {}
    for parsed, prof in sorted(items, key=lambda it: (-it[0].gi_slices, -it[0].compute_slices, it[1].name)):
        if parsed.splits_instance:
            split.setdefault(prof.name, []).append(parsed.compute_slices)
            profiles[prof.name] = prof
        else:
            out.append((prof, ()))
    for name, sizes in split.items():
        prof = profiles[name]
        bins = _fewest_bins(tuple(sizes), prof.gi_slices)
        if bins is None:  # some size cannot go in this GPU instance at all: checked by the caller
            bins = tuple((size,) for size in sizes)
        out.extend((prof, order) for order in bins)
    return out


def _fewest_bins(sizes: tuple[int, ...], gi_slices: int) -> tuple[tuple[int, ...], ...] | None:
    """Compute-instance sizes split over as few GPU instances of ``gi_slices`` as possible, each
    as an order that first-free placement packs; None when one size fits no GPU instance."""
    for count in range(1, len(sizes) + 1):
        found = _fill([[] for _ in range(count)], sorted(sizes, reverse=True), gi_slices)
        if found is not None:
            return found
    return None


def _fill(bins: list[list[int]], rest: list[int], gi_slices: int) -> tuple[tuple[int, ...], ...] | None:
    if not rest:
        orders = [_packing_order(tuple(sorted(b)), gi_slices) for b in bins]
        if any(o is None or not o for o in orders):
            return None
        return tuple(o for o in orders if o is not None)
    size, tail = rest[0], rest[1:]
    tried: set[tuple[int, ...]] = set()
    for b in bins:
        key = tuple(sorted(b))
        if key in tried or sum(b) + size > gi_slices:
            continue  # an identical bin was tried already, or this one is full
        tried.add(key)
        b.append(size)
        found = _fill(bins, tail, gi_slices)
        b.pop()
        if found is not None:
            return found
    return None


@functools.cache
def _packing_order(sizes: tuple[int, ...], gi_slices: int) -> tuple[int, ...] | None:
    """An order of ``sizes`` in which each compute instance, put at the first free legal start,
    fits one GPU instance of ``gi_slices``; None when no order does."""
    for order in sorted(set(itertools.permutations(sizes))):
        used: list[tuple[int, int]] = []
        for size in order:
            free = [s for s in compute_starts(size, gi_slices) if not _overlaps(used, s, size)]
            if not free:
                break
            used.append((free[0], size))
        else:
            return order
    return None


def _overlaps(used: list[tuple[int, int]], start: int, size: int) -> bool:
    return any(start < s + n and s < start + size for s, n in used)


_ENGINES = ("copy engines", "decoders", "encoders", "JPEG engines", "optical flow accelerators")


def _check_shared_units(gpu: GpuModel, instances: list[MigProfile], wanted: Mapping[str, int]) -> None:
    """Compute slices and media engines are shared by every instance on the GPU.

    No GPU instance can hold more engines of a kind than the whole-GPU profile has, so the
    largest count any profile lists is the GPU's supply (``+me.all`` takes them all, which is
    why it only combines with ``-me`` instances). At most one instance takes the media
    extensions.
    """
    media = sum(1 for p in instances if p.media_extensions)
    if media > 1:
        raise InvalidConfigError(f"{gpu.key}: at most one +me profile per GPU, layout asks for {media}")
    compute = sum(p.gi_slices for p in instances)
    if compute > gpu.compute_slices:
        raise InvalidConfigError(
            f"{gpu.key}: layout {_fmt(wanted)} needs {compute} compute slices, the GPU has {gpu.compute_slices}"
        )
    for i, engine in enumerate(_ENGINES):
        supply = max(p.engines[i] for p in gpu.mig_profiles)
        need = sum(p.engines[i] for p in instances)
        if need > supply:
            raise InvalidConfigError(f"{gpu.key}: layout {_fmt(wanted)} needs {need} {engine}, the GPU has {supply}")


def _search(wanted: list[MigProfile], i: int, used: list[bool], acc: list[Placement]) -> list[Placement] | None:
    if i == len(wanted):
        return list(acc)
    prof = wanted[i]
    for start in prof.starts:
        span = range(start, start + prof.memory_slices)
        if span.stop > len(used) or any(used[s] for s in span):
            continue
        for s in span:
            used[s] = True
        acc.append(Placement(prof, start))
        result = _search(wanted, i + 1, used, acc)
        acc.pop()
        for s in span:
            used[s] = False
        if result is not None:
            return result
    return None


def _fmt(layout: Mapping[str, int]) -> str:
    return "{" + ", ".join(f"{n}: {c}" for n, c in layout.items() if c) + "}"
