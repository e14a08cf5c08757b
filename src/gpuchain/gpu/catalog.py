"""What each GPU model is, and which MIG layouts it can hold.

Facts (names, memory, PCI ids, MIG profiles, their instance limits and placements) follow what
NVML and `nvidia-smi mig -lgip/-lgipp` report for each card. Layout checks are exact: a layout
fits when every instance gets a legal start slot without overlap, which is how the hardware
decides, not a sum of slices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuchain.gpu.errors import InvalidConfigError

MEMORY_SLICES = 8
"""MIG memory slices on every catalogued card; placements are counted in these units."""


def resource_safe(profile: str) -> str:
    """A MIG profile name as it appears in resource names and labels (``1g.10gb+me`` -> ``1g.10gb.me``).

    ``+`` is not allowed in Kubernetes resource names or label values, so NVIDIA writes it as ``.``.
    """
    return profile.replace("+", ".")


@dataclass(frozen=True)
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

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")

    @property
    def resource_suffix(self) -> str:
        """The name in `nvidia.com/mig-<suffix>` (see ``resource_safe``)."""
        return resource_safe(self.name)


@dataclass(frozen=True)
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

    @property
    def pci_device_ids(self) -> tuple[int, ...]:
        """Every PCI device id of this model, the main one first."""
        return (self.pci_device_id, *(pci for _, pci in self.variants))

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    def profile(self, name: str) -> MigProfile:
        """Look up a MIG profile by name; the error lists the valid names for this card."""
        for p in self.mig_profiles:
            if p.name == name:
                return p
        if not self.mig_profiles:
            raise InvalidConfigError(f"{self.key} does not support MIG (asked for profile {name!r})")
        valid = ", ".join(p.name for p in self.mig_profiles)
        raise InvalidConfigError(f"{self.key} has no MIG profile {name!r}; valid profiles: {valid}")


def _p(
    name: str,
    gi: int,
    mem_slices: int,
    mib: int,
    max_n: int,
    sms: int,
    starts: tuple[int, ...],
    gi_id: int,
    ci_id: int,
    engines: tuple[int, int, int, int, int],
) -> MigProfile:
    ce, dec, enc, jpeg, ofa = engines
    return MigProfile(name, gi, mem_slices, mib, max_n, sms, starts, gi_id, ci_id, ce, dec, enc, jpeg, ofa)


# NVML ids: GI 1_SLICE=0, 2_SLICE=1, 3_SLICE=2, 4_SLICE=3, 7_SLICE=4, 1_SLICE_REV1 (+me)=7,
# 1_SLICE_REV2 (double memory)=9; CI 1_SLICE=0, 2_SLICE=1, 3_SLICE=2, 4_SLICE=3, 7_SLICE=4.
_ALL_1G = (0, 1, 2, 3, 4, 5, 6)

_A100_40GB_MIG = (
    _p("1g.5gb", 1, 1, 4864, 7, 14, _ALL_1G, 0, 0, (1, 0, 0, 0, 0)),
    _p("1g.5gb+me", 1, 1, 4864, 1, 14, _ALL_1G, 7, 0, (1, 1, 0, 1, 1)),
    _p("1g.10gb", 1, 2, 9856, 4, 14, (0, 2, 4, 6), 9, 0, (1, 1, 0, 0, 0)),
    _p("2g.10gb", 2, 2, 9856, 3, 28, (0, 2, 4), 1, 1, (2, 1, 0, 0, 0)),
    _p("3g.20gb", 3, 4, 19968, 2, 42, (0, 4), 2, 2, (3, 2, 0, 0, 0)),
    _p("4g.20gb", 4, 4, 19968, 1, 56, (0,), 3, 3, (4, 2, 0, 0, 0)),
    _p("7g.40gb", 7, 8, 40192, 1, 98, (0,), 4, 4, (7, 5, 0, 1, 1)),
)

_A100_80GB_MIG = (
    _p("1g.10gb", 1, 1, 9728, 7, 14, _ALL_1G, 0, 0, (1, 0, 0, 0, 0)),
    _p("1g.10gb+me", 1, 1, 9728, 1, 14, _ALL_1G, 7, 0, (1, 1, 0, 1, 1)),
    _p("1g.20gb", 1, 2, 19968, 4, 14, (0, 2, 4, 6), 9, 0, (1, 1, 0, 0, 0)),
    _p("2g.20gb", 2, 2, 19968, 3, 28, (0, 2, 4), 1, 1, (2, 1, 0, 0, 0)),
    _p("3g.40gb", 3, 4, 40192, 2, 42, (0, 4), 2, 2, (3, 2, 0, 0, 0)),
    _p("4g.40gb", 4, 4, 40192, 1, 56, (0,), 3, 3, (4, 2, 0, 0, 0)),
    _p("7g.80gb", 7, 8, 80896, 1, 98, (0,), 4, 4, (7, 5, 0, 1, 1)),
)

_H100_80GB_MIG = (
    _p("1g.10gb", 1, 1, 9984, 7, 16, _ALL_1G, 0, 0, (1, 1, 0, 1, 0)),
    _p("1g.10gb+me", 1, 1, 9984, 1, 16, _ALL_1G, 7, 0, (1, 1, 0, 1, 1)),
    _p("1g.20gb", 1, 2, 20096, 4, 26, (0, 2, 4, 6), 9, 0, (1, 1, 0, 1, 0)),
    _p("2g.20gb", 2, 2, 20096, 3, 32, (0, 2, 4), 1, 1, (2, 2, 0, 2, 0)),
    _p("3g.40gb", 3, 4, 40448, 2, 60, (0, 4), 2, 2, (3, 3, 0, 3, 0)),
    _p("4g.40gb", 4, 4, 40448, 1, 64, (0,), 3, 3, (4, 4, 0, 4, 0)),
    _p("7g.80gb", 7, 8, 81152, 1, 132, (0,), 4, 4, (8, 7, 0, 7, 1)),
)

_H200_141GB_MIG = (
    _p("1g.18gb", 1, 1, 16384, 7, 16, _ALL_1G, 0, 0, (1, 1, 0, 1, 0)),
    _p("1g.18gb+me", 1, 1, 16384, 1, 16, _ALL_1G, 7, 0, (1, 1, 0, 1, 1)),
    _p("1g.35gb", 1, 2, 33280, 4, 26, (0, 2, 4, 6), 9, 0, (1, 1, 0, 1, 0)),
    _p("2g.35gb", 2, 2, 33280, 3, 32, (0, 2, 4), 1, 1, (2, 2, 0, 2, 0)),
    _p("3g.71gb", 3, 4, 71424, 2, 60, (0, 4), 2, 2, (3, 3, 0, 3, 0)),
    _p("4g.71gb", 4, 4, 71424, 1, 64, (0,), 3, 3, (4, 4, 0, 4, 0)),
    _p("7g.141gb", 7, 8, 143360, 1, 132, (0,), 4, 4, (8, 7, 0, 7, 1)),
)

MODELS: dict[str, GpuModel] = {
    m.key: m
    for m in (
        GpuModel(
            "A100-40GB",
            "NVIDIA A100-SXM4-40GB",
            40960,
            0x20B010DE,
            (8, 0),
            108,
            12,
            _A100_40GB_MIG,
            variants=(("A100-SXM4-40GB", 0x20B010DE), ("NVIDIA A100-PCIE-40GB", 0x20F110DE)),
        ),
        GpuModel(
            "A100-80GB",
            "NVIDIA A100-SXM4-80GB",
            81920,
            0x20B210DE,
            (8, 0),
            108,
            12,
            _A100_80GB_MIG,
            variants=(("NVIDIA A100 80GB PCIe", 0x20B510DE),),
        ),
        GpuModel("H100-80GB", "NVIDIA H100 80GB HBM3", 81559, 0x233010DE, (9, 0), 132, 18, _H100_80GB_MIG),
        GpuModel("H200-141GB", "NVIDIA H200", 143771, 0x233510DE, (9, 0), 132, 18, _H200_141GB_MIG),
        GpuModel("L4", "NVIDIA L4", 23034, 0x27B810DE, (8, 9), 58, 0),
    )
}


def model(key: str) -> GpuModel:
    """A catalogued GPU model by key (case-insensitive); the error lists the known keys."""
    for k, m in MODELS.items():
        if k.lower() == key.lower():
            return m
    raise InvalidConfigError(f"unknown GPU model {key!r}; known models: {', '.join(MODELS)}")


def model_for_name(name: str, pci_device_id: int | None = None) -> GpuModel | None:
    """The catalogued model of a GPU as NVML reports it, if any.

    The PCI device id decides when given (a card's name differs between drivers and form
    factors, its id does not); the NVML name, or one of the model's variant names, otherwise.
    """
    if pci_device_id is not None:
        by_id = next((m for m in MODELS.values() if pci_device_id in m.pci_device_ids), None)
        if by_id is not None:
            return by_id
    return next((m for m in MODELS.values() if name == m.name or name in (v for v, _ in m.variants)), None)


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
    """Where one MIG instance sits: its profile and first memory slice."""

    profile: MigProfile
    start: int


def place_layout(gpu: GpuModel, layout: Mapping[str, int]) -> tuple[Placement, ...]:
    """Place ``{profile: count}`` on one GPU, or explain why it cannot be placed.

    Raises InvalidConfigError naming the GPU model, the profile and the limit it breaks.
    Larger instances are placed first, as their legal starts are fewest.
    """
    wanted: list[MigProfile] = []
    for name, count in layout.items():
        if count < 0:
            raise InvalidConfigError(f"{gpu.key}: MIG profile {name}: count must be >= 0, got {count}")
        prof = gpu.profile(name)
        if count > prof.max_instances:
            raise InvalidConfigError(f"{gpu.key}: {count} x {name} does not fit: at most {prof.max_instances} per GPU")
        wanted.extend([prof] * count)
    media = sum(1 for p in wanted if p.media_extensions)
    if media > 1:
        raise InvalidConfigError(f"{gpu.key}: at most one +me profile per GPU, layout asks for {media}")
    compute = sum(p.gi_slices for p in wanted)
    if compute > 7:
        raise InvalidConfigError(f"{gpu.key}: layout {_fmt(layout)} needs {compute} compute slices, the GPU has 7")
    wanted.sort(key=lambda p: (-p.memory_slices, len(p.starts), p.name))
    found = _search(wanted, 0, [False] * MEMORY_SLICES, [])
    if found is None:
        memory = sum(p.memory_slices for p in wanted)
        raise InvalidConfigError(
            f"{gpu.key}: layout {_fmt(layout)} has no legal placement "
            f"({memory} of {MEMORY_SLICES} memory slices requested)"
        )
    return tuple(sorted(found, key=lambda pl: pl.start))


def _search(wanted: list[MigProfile], i: int, used: list[bool], acc: list[Placement]) -> list[Placement] | None:
    if i == len(wanted):
        return list(acc)
    prof = wanted[i]
    for start in prof.starts:
        span = range(start, start + prof.memory_slices)
        if span.stop > MEMORY_SLICES or any(used[s] for s in span):
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
