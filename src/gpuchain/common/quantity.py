"""Kubernetes resource quantities (``500m``, ``1Gi``, ``2``): read, added, and written in the API
server's canonical form.

The operator compares what it wants with what the API server kept field by field, and the server
keeps a quantity rewritten canonically (``1024Mi`` becomes ``1Gi``, ``1.5`` becomes ``1500m``): a
sum written in any other form would be written again on every pass. So a sum is written the way
the server would write it back (apimachinery ``resource.Quantity.CanonicalizeBytes``): binary
suffixes while the value is a whole multiple of 1Ki, else decimal suffixes with the largest
exponent (a multiple of 3) that leaves a whole mantissa, never a decimal point. A binary value that
is no multiple of 1Ki is written by the server as plain digits, which it reads back as a decimal
quantity: 5000 bytes summed from ``4Ki`` and ``904`` come back ``5k``, so that is what is written.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from fractions import Fraction

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)")


def parse_quantity(text: str | int) -> tuple[Fraction, bool]:
    """The value of a non-negative quantity and whether it is written with a binary suffix;
    ValueError for anything else (exponent forms included)."""
    found = _QUANTITY.fullmatch(str(text).strip())
    if found is None:
        raise ValueError(f"{text!r} is not a resource quantity such as 500m, 2 or 1Gi")
    number, suffix = Fraction(found.group(1)), found.group(2)
    if suffix in _BINARY:
        return number * 1024 ** _BINARY[suffix], True
    return number * Fraction(10) ** _DECIMAL[suffix], False


def format_quantity(value: Fraction, binary: bool) -> str:
    """``value`` as the API server writes it back (see the module docstring); below a nano it is
    rounded up, as the server does."""
    if binary and value.denominator == 1 and value >= 1024 and value.numerator % 1024 == 0:
        whole, power = value.numerator, 0
        while power < max(_BINARY.values()) and whole % 1024 == 0:
            whole, power = whole // 1024, power + 1
        return f"{whole}{next(s for s, p in _BINARY.items() if p == power)}"
    for suffix, exponent in sorted(_DECIMAL.items(), key=lambda item: -item[1]):
        mantissa = value / Fraction(10) ** exponent
        if mantissa.denominator == 1:
            return f"{mantissa.numerator}{suffix}"
    return f"{math.ceil(value * 10**9)}n"


def add_quantities(quantities: Iterable[str | int]) -> str:
    """The sum, in canonical form; binary when any term is written with a binary suffix."""
    total, binary = Fraction(0), False
    for quantity in quantities:
        value, is_binary = parse_quantity(quantity)
        total += value
        binary = binary or is_binary
    return format_quantity(total, binary)
