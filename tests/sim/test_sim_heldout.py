"""The held-out set (tests/sim/heldout, issue 26): every case builds from its report's evidence, its
expectations are the ones frozen with the first score, and the doctor's score does not fall below
the one recorded in SCORE.md."""

from __future__ import annotations

import pytest
from sim.heldout import harness

#: The last recorded score (SCORE.md): root link and nodes right, repairing fix, healthy clean.
FLOOR = {"root": 17, "fix": 17, "healthy": 5}


def test_the_set_is_big_enough_and_mixed() -> None:
    cases = [harness.load(p) for p in harness.cases()]
    assert len(cases) >= 20
    assert sum(c.kind == "two-faults" for c in cases) >= 2
    assert sum(c.kind == "healthy" for c in cases) >= 3
    two = [c for c in cases if c.kind == "two-faults"]
    assert all(len({n for e in c.expects for n in e.nodes}) >= 2 for c in two)


@pytest.mark.parametrize("path", harness.cases(), ids=lambda p: p.stem)
def test_expectations_are_frozen(path) -> None:  # type: ignore[no-untyped-def]
    assert harness.frozen()[path.stem] == harness.expect_digest(path), (
        f"{path.name}: its expect block changed after it was scored; add a note to SCORE.md instead"
    )


def test_score_does_not_fall_below_the_recorded_one() -> None:
    results = [harness.score(harness.load(p)) for p in harness.cases()]
    faults = [r for r in results if r.case.root != "none"]
    healthy = [r for r in results if r.case.root == "none"]
    got = {
        "root": sum(r.root_right for r in faults),
        "fix": sum(bool(r.fix_right) for r in faults),
        "healthy": sum(r.root_right for r in healthy),
    }
    assert all(got[k] >= FLOOR[k] for k in FLOOR), harness.table(results)
