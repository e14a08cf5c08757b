"""MIG catalog: profile facts and exact layout placement."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuchain.gpu import catalog
from gpuchain.gpu.errors import InvalidConfigError


def test_seven_1g5gb_fit_an_a100_40gb_and_eight_do_not() -> None:
    a100 = catalog.model("A100-40GB")
    placed = catalog.place_layout(a100, {"1g.5gb": 7})
    assert [p.start for p in placed] == [0, 1, 2, 3, 4, 5, 6]
    with pytest.raises(InvalidConfigError, match=r"A100-40GB: 8 x 1g.5gb does not fit: at most 7 per GPU"):
        catalog.place_layout(a100, {"1g.5gb": 8})


@pytest.mark.parametrize(
    ("key", "layout"),
    [
        ("A100-40GB", {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),  # all-balanced
        ("A100-80GB", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        ("H100-80GB", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        ("H200-141GB", {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
        ("H100-80GB", {"4g.40gb": 1, "3g.40gb": 1}),
        ("H100-80GB", {"3g.40gb": 2}),
        ("H100-80GB", {"1g.20gb": 4}),
        ("H100-80GB", {"2g.20gb": 3, "1g.10gb": 1}),
        ("H100-80GB", {"7g.80gb": 1}),
    ],
)
def test_known_good_layouts_place(key: str, layout: dict[str, int]) -> None:
    placed = catalog.place_layout(catalog.model(key), layout)
    assert sorted(p.profile.name for p in placed) == sorted(n for n, c in layout.items() for _ in range(c))


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({"4g.40gb": 1, "4g.40gb+x": 1}, "no MIG profile '4g.40gb\\+x'"),
        ({"7g.80gb": 1, "1g.10gb": 1}, "needs 8 compute slices"),
        ({"4g.40gb": 2}, "at most 1 per GPU"),
        ({"1g.10gb+me": 1, "1g.10gb": 6, "2g.20gb": 1}, "needs 9 compute slices, the GPU has 7"),
        ({"3g.40gb": 2, "1g.10gb": 1}, "no legal placement \\(9 of 8 memory slices"),
    ],
)
def test_bad_layouts_name_the_problem(layout: dict[str, int], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        catalog.place_layout(catalog.model("H100-80GB"), layout)


def test_l4_has_no_mig() -> None:
    with pytest.raises(InvalidConfigError, match="L4 does not support MIG"):
        catalog.place_layout(catalog.model("l4"), {"1g.10gb": 1})


def test_unknown_model_lists_known_ones() -> None:
    with pytest.raises(InvalidConfigError, match="known models: A100-40GB"):
        catalog.model("V100")


def test_profile_facts_match_nvidia_smi() -> None:
    h100 = catalog.model("H100-80GB")
    assert h100.profile("1g.10gb").memory_mib == 9984
    assert h100.profile("1g.10gb").max_instances == 7
    assert h100.profile("7g.80gb").multiprocessors == 132
    assert h100.profile("1g.20gb").nvml_gi_profile_id == 9
    assert h100.profile("1g.10gb+me").resource_suffix == "1g.10gb.me"
    assert catalog.model("A100-40GB").profile("3g.20gb").memory_mib == 19968


@given(st.sampled_from(sorted(catalog.MODELS)), st.data())
def test_every_placement_is_legal(key: str, data: st.DataObject) -> None:
    """Whatever layout is accepted, its instances sit on legal starts without overlapping."""
    gpu = catalog.model(key)
    if not gpu.mig_profiles:
        return
    layout = {p.name: data.draw(st.integers(0, p.max_instances), label=p.name) for p in gpu.mig_profiles}
    try:
        placed = catalog.place_layout(gpu, layout)
    except InvalidConfigError:
        return
    used: set[int] = set()
    for p in placed:
        assert p.start in p.profile.starts
        span = set(range(p.start, p.start + p.profile.memory_slices))
        assert not span & used and max(span) < gpu.memory_slices
        used |= span
    assert sum(p.profile.gi_slices for p in placed) <= gpu.compute_slices
    assert sum(p.profile.memory_mib for p in placed) <= gpu.memory_mib


@pytest.mark.parametrize(
    ("name", "pci", "key"),
    [
        ("NVIDIA A100 80GB PCIe", 0x20B510DE, "A100-80GB"),
        ("a renamed card", 0x20B510DE, "A100-80GB"),
        ("A100-SXM4-40GB", None, "A100-40GB"),
        ("NVIDIA A100-PCIE-40GB", 0x20F110DE, "A100-40GB"),
        ("NVIDIA H100 80GB HBM3", 0x233010DE, "H100-80GB"),
    ],
)
def test_models_are_found_by_pci_id_first_then_name(name: str, pci: int | None, key: str) -> None:
    found = catalog.model_for_name(name, pci)
    assert found is not None and found.key == key


def test_unknown_cards_are_not_guessed() -> None:
    assert catalog.model_for_name("NVIDIA L40S", 0x26B910DE) is None


def test_pcie_cards_share_their_sxm_table_and_each_pci_id_is_listed_once() -> None:
    h100 = catalog.model_for_name("NVIDIA H100 PCIe", 0x233110DE)
    assert h100 is not None and h100.key == "H100-80GB"
    a100 = catalog.model("A100-40GB")
    assert len(a100.pci_device_ids) == len(set(a100.pci_device_ids))
    assert catalog.model("A100-PCIE-40GB").pci_device_id == 0x20F110DE
    assert catalog.model("A100-PCIE-40GB").mig_profiles == a100.mig_profiles


#: NVIDIA MIG User Guide, "Supported MIG Profiles", A30 table
#: (docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html):
#: profile -> (NVDEC, JPEG, OFA, copy engines, instances available).
A30_GUIDE = {
    "1g.6gb": (0, 0, 0, 1, 4),
    "1g.6gb+me": (1, 1, 1, 1, 1),
    "2g.12gb": (2, 0, 0, 2, 2),
    "2g.12gb+me": (2, 1, 1, 2, 1),
    "4g.24gb": (4, 1, 1, 4, 1),
}


def test_a30_profiles_have_the_engines_nvidias_guide_lists() -> None:
    rows = {
        p.name: (p.decoders, p.jpeg, p.ofa, p.copy_engines, p.max_instances) for p in catalog.model("A30").mig_profiles
    }
    assert rows == A30_GUIDE


def test_a_profile_name_is_parsed_once() -> None:
    # place_layout asks for it inside its search loops.
    prof = catalog.model("A30").profile("1g.6gb+me")
    assert prof.parsed is prof.parsed and prof.media_extensions


def test_every_attribute_gi_id_is_one_a_catalogued_profile_uses() -> None:
    # Ids 7..16 are go-nvml's NVML_GPU_INSTANCE_PROFILE_*_REV1/_GFX/_NO_ME/_ALL_ME constants
    # (NVIDIA/go-nvlib vendored go-nvml const.go at 3c16156); an id no profile uses has no such check.
    used = {
        p.nvml_gi_profile_id for m in (*catalog.MODELS.values(), *catalog.VARIANTS.values()) for p in m.mig_profiles
    }
    assert set(catalog._ATTRIBUTE_GI_ID.values()) <= used


@given(st.sampled_from([k for k, m in catalog.MODELS.items() if m.mig_capable]), st.data())
def test_every_physically_placeable_layout_is_accepted(key: str, data: st.DataObject) -> None:
    """Build a layout by placing instances on legal, free starts; the search must find a placement too.

    The engines a GPU has are those of its whole-GPU profile (the one spanning every memory slice: in the
    MIG guide's tables that row has all the card's copy engines, decoders, JPEG and OFA units), a fact of
    the data, not the supply rule place_layout applies.
    """
    gpu = catalog.model(key)
    used = [False] * gpu.memory_slices
    layout: Counter[str] = Counter()
    compute = media = 0
    engines = [0] * 5
    whole = [p for p in gpu.mig_profiles if p.memory_slices == gpu.memory_slices and p.gi_slices == gpu.compute_slices]
    assert whole, key
    supply = [max(p.engines[i] for p in whole) for i in range(5)]
    for _ in range(data.draw(st.integers(1, 8), label="tries")):
        prof = data.draw(st.sampled_from(gpu.mig_profiles), label="profile")
        free = [
            s
            for s in prof.starts
            if s + prof.memory_slices <= gpu.memory_slices and not any(used[s : s + prof.memory_slices])
        ]
        fits = layout[prof.name] < prof.max_instances and compute + prof.gi_slices <= gpu.compute_slices
        enough = all(engines[i] + prof.engines[i] <= supply[i] for i in range(5))
        if not free or not fits or not enough or (prof.media_extensions and media):
            continue
        engines = [engines[i] + prof.engines[i] for i in range(5)]
        start = data.draw(st.sampled_from(free), label="start")
        used[start : start + prof.memory_slices] = [True] * prof.memory_slices
        layout[prof.name] += 1
        compute += prof.gi_slices
        media += prof.media_extensions
    placed = catalog.place_layout(gpu, dict(layout))
    assert Counter(p.profile.name for p in placed) == layout


@pytest.mark.parametrize(
    ("cc", "family"),
    [
        ((7, 0), "volta"),
        ((7, 2), "volta"),
        ((7, 5), "turing"),
        ((8, 0), "ampere"),
        ((8, 6), "ampere"),
        ((8, 9), "ada-lovelace"),
        ((9, 0), "hopper"),
        ((10, 0), "blackwell"),
        ((12, 0), "blackwell"),
        ((6, 1), "pascal"),
        ((5, 2), "maxwell"),
        ((4, 0), "undefined"),
        ((11, 0), "undefined"),
    ],
)
def test_architecture_uses_gfd_names(cc: tuple[int, int], family: str) -> None:
    assert catalog.architecture(cc) == family


def test_every_catalogued_model_has_a_known_architecture() -> None:
    for m in catalog.MODELS.values():
        assert catalog.architecture(m.compute_capability) != catalog.UNKNOWN_ARCHITECTURE, m.key


DERIVATION_RULES = ("mib-from-name", "sms-per-slice", "hopper-pattern", "placements-like-a30", "engines-by-slices")


def test_every_derived_figure_names_its_rule() -> None:
    """A figure no source gave carries the rule that produced it (documented in mig_catalog.yaml)."""
    for m in catalog.MODELS.values():
        for p in m.mig_profiles:
            for rule in p.derived:
                assert rule in DERIVATION_RULES or rule.startswith(("sms", "engines")), (m.key, p.name, rule)


def test_variants_are_their_own_products_with_the_shared_table() -> None:
    for key, v in catalog.VARIANTS.items():
        primary = catalog.model_for_name(v.name, v.pci_device_id)
        assert primary is not None and primary.key in catalog.MODELS, key
        assert v.mig_profiles == primary.mig_profiles and v.pci_device_id in primary.pci_device_ids
