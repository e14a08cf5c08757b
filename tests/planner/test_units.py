"""Sizes and rates as people type them, and the errors that say what to type instead."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuchain.planner import MIB, PlanInputError, format_mib, parse_memory, parse_rate


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3GiB", 3 * 1024**3),
        ("3GB", 3 * 1000**3),
        ("512MiB", 512 * MIB),
        ("3 gib", 3 * 1024**3),
        ("1.5GiB", 1536 * MIB),
        (".5 TiB", 512 * 1024**3),
        ("4864MiB", 4864 * MIB),
        ("100B", 100),
    ],
)
def test_parse_memory_reads_binary_and_decimal_units(text: str, expected: int) -> None:
    assert parse_memory(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3", r"--model-memory: '3' has no unit; write e.g. 3GiB or 3GB"),
        ("3G", r"--model-memory: unknown unit 'G' in '3G'; use one of B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"),
        ("three GiB", r"--model-memory: 'three GiB' is not a size"),
        ("-3GiB", r"is not a size"),
        ("0GiB", r"--model-memory: '0GiB' must be larger than zero"),
        ("", r"is not a size"),
    ],
)
def test_parse_memory_errors_name_the_field_and_the_fix(text: str, message: str) -> None:
    with pytest.raises(PlanInputError, match=message):
        parse_memory(text, "--model-memory")


@pytest.mark.parametrize(("text", "expected"), [("5%", 0.05), ("0.05", 0.05), ("100%", 1.0), ("0%", 0.0), ("1", 1.0)])
def test_parse_rate_reads_percent_or_fraction(text: str, expected: float) -> None:
    assert parse_rate(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("5", r"'5' is ambiguous; write 5% or a fraction like 0.05"),
        ("150%", r"above 100%"),
        ("five", r"is not a rate"),
        ("-5%", r"is not a rate"),
    ],
)
def test_parse_rate_refuses_what_it_would_have_to_guess(text: str, message: str) -> None:
    with pytest.raises(PlanInputError, match=message):
        parse_rate(text, "--failure-rate")


def test_format_mib_switches_to_gib_at_one_gib() -> None:
    assert format_mib(4864) == "4.75 GiB"
    assert format_mib(40960) == "40 GiB"
    assert format_mib(512) == "512 MiB"
    assert format_mib(-1024) == "-1 GiB"


@given(st.integers(min_value=1, max_value=10**7), st.sampled_from(["MiB", "mib", "GiB", "KiB", "MB", "GB"]))
def test_parse_memory_scales_integers_exactly(n: int, unit: str) -> None:
    factor = {"kib": 1024, "mib": MIB, "gib": 1024 * MIB, "mb": 10**6, "gb": 10**9}[unit.lower()]
    assert parse_memory(f"{n}{unit}") == n * factor
