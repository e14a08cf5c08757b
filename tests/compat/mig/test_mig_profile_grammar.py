"""MIG profile names: gpuchain's parser accepts and refuses exactly what NVIDIA's does.

The cases are NVIDIA's own (go-nvlib's TestParseMigProfile table, the parser mig-parted runs
on every `mig-devices` key; fixtures/SOURCES.md has the commit). Whether a well-formed name
exists on a GPU is the catalog's question and is tested in tests/gpu.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuchain.gpu.catalog import ProfileName, parse_profile
from gpuchain.mig.config import parse_config

FIXTURES = Path(__file__).parent / "fixtures"
CASES = yaml.safe_load((FIXTURES / "go-nvlib-profile-format.yaml").read_text())["cases"]


def test_the_upstream_table_is_all_here() -> None:
    assert len(CASES) == 52
    assert sum(c["format_valid"] for c in CASES) == 15


@pytest.mark.parametrize("case", CASES, ids=lambda c: repr(c["profile"]))
def test_format_validity_matches_nvidia(case: dict[str, object]) -> None:
    profile = str(case["profile"])
    if case["format_valid"]:
        parse_profile(profile)
    else:
        with pytest.raises(ValueError, match="is not a MIG profile name"):
            parse_profile(profile)


@pytest.mark.parametrize("case", CASES, ids=lambda c: repr(c["profile"]))
def test_a_config_file_refuses_what_nvidia_refuses_with_file_line_and_field(case: dict[str, object]) -> None:
    text = (
        "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n"
        f"        {yaml.safe_dump(str(case['profile'])).splitlines()[0]}: 1\n"
    )
    if case["format_valid"]:
        parse_config(text, "mig.yaml")
    else:
        with pytest.raises(ValueError, match=r"^mig\.yaml:6: mig-configs\.x\.0\.mig-devices: .* is not a MIG profile"):
            parse_config(text, "mig.yaml")


@pytest.mark.parametrize(
    ("text", "parsed", "canonical"),
    [
        ("1g.10gb", ProfileName(compute_slices=1, gi_slices=1, memory_gb=10), "1g.10gb"),
        ("1c.1g.10gb", ProfileName(compute_slices=1, gi_slices=1, memory_gb=10), "1g.10gb"),
        ("2c.3g.40gb", ProfileName(compute_slices=2, gi_slices=3, memory_gb=40), "2c.3g.40gb"),
        (
            "1g.24gb+me.all",
            ProfileName(compute_slices=1, gi_slices=1, memory_gb=24, attributes=("me.all",)),
            "1g.24gb+me.all",
        ),
        (
            "1g.24gb-me",
            ProfileName(compute_slices=1, gi_slices=1, memory_gb=24, attributes=(), negated=("me",)),
            "1g.24gb-me",
        ),
        ("4g.96gb+gfx", ProfileName(compute_slices=4, gi_slices=4, memory_gb=96, attributes=("gfx",)), "4g.96gb+gfx"),
        (
            "1g.5gb+me,gfx",
            ProfileName(compute_slices=1, gi_slices=1, memory_gb=5, attributes=("gfx", "me")),
            "1g.5gb+gfx,me",
        ),
    ],
)
def test_names_parse_into_slices_memory_and_attributes(text: str, parsed: ProfileName, canonical: str) -> None:
    """Equal profiles are equal however written, as NVIDIA's matcher compares them
    (``1c.1g.10gb`` is ``1g.10gb``; attribute order does not matter)."""
    assert parse_profile(text) == parsed
    assert parsed.canonical == canonical
