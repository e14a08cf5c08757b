"""The hypothesis profiles of tests/conftest.py: CI draws the same examples on every run, so a red
run means a change broke something, never an unlucky draw."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st


def draws(profile: str) -> tuple[list[int], list[int]]:
    """What one property test draws on each of two runs under ``profile``."""
    seen: list[int] = []

    @settings(settings.get_profile(profile), max_examples=30)
    @given(st.integers())
    def probe(n: int) -> None:
        seen.append(n)

    probe()
    first = seen.copy()
    seen.clear()
    probe()
    return first, seen


def test_the_ci_profile_draws_the_same_examples_on_every_run() -> None:
    first, second = draws("ci")
    assert first == second and len(set(first)) > 10
    assert settings.get_profile("ci").database is None


def test_the_other_profiles_draw_anew() -> None:
    """Without the ci profile each run draws anew (the check above would pass on anything else)."""
    for profile in ("dev", "explore"):
        first, second = draws(profile)
        assert first != second, profile
