"""Resource quantities added and written as the API server writes them back (so a sum the operator
applies is not written again on every pass; tests/peers/test_steady_writes.py checks it on the
real server). Canonical forms from apimachinery's ``resource.Quantity`` (quantity_test.go)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gpuchain.common.quantity import add_quantities, format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("1024Mi", "1Gi"),
        ("1.5Gi", "1536Mi"),
        ("0.5", "500m"),
        ("1500", "1500"),
        ("1000", "1k"),
        ("1.5M", "1500k"),
        ("512Ki", "512Ki"),
        ("0.5Ki", "512"),  # below 1024 a binary quantity is written in decimal
        ("1.5Ki", "1536"),
        ("5000Ki", "5000Ki"),
        ("100m", "100m"),
        (2, "2"),
    ],
)
def test_one_quantity_is_written_canonically(text: str | int, canonical: str) -> None:
    assert add_quantities([text]) == canonical


def test_a_binary_sum_that_is_no_multiple_of_1ki_is_written_as_the_server_reads_it_back() -> None:
    # The server writes binary 5000 as "5000" (CanonicalizeBytes), reads that back as decimal and
    # then keeps "5k": writing "5000" would differ from what it returns on every pass.
    assert add_quantities(["4Ki", "904"]) == "5k"
    assert add_quantities(["1Ki", "512"]) == "1536"


def test_sums_keep_binary_suffixes_for_memory_and_milli_for_cpu() -> None:
    assert add_quantities(["64Mi", "64Mi"]) == "128Mi"
    assert add_quantities(["100Mi", "1Gi"]) == "1124Mi"
    assert add_quantities(["50m", "0.05", "1"]) == "1100m"


@pytest.mark.parametrize("bad", ["", "1e3", "-1", "one", "1 Gi", "1GB"])
def test_what_is_no_quantity_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a resource quantity"):
        parse_quantity(bad)


@given(st.integers(min_value=0, max_value=2**62), st.sampled_from([1, 1000, 1024**2]), st.booleans())
@example(5000, 1, True)  # binary, no multiple of 1Ki, a multiple of 1000: the server keeps 5k
def test_a_written_quantity_reads_back_the_same_and_is_written_the_same(units: int, scale: int, binary: bool) -> None:
    value = Fraction(units, scale)
    text = format_quantity(value, binary)
    back, back_binary = parse_quantity(text)
    assert back >= value and back - value < Fraction(1, 10**9)
    assert format_quantity(back, back_binary) == text, "a fixed point: the server writes it back unchanged"
