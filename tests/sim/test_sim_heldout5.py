"""The fifth held-out set (tests/sim/heldout5, issue 26 item 5): every case builds from its report's
evidence and the doctor runs on it, the set has the mix the issue asks for, and the expectations are the
ones frozen with the first score. The score itself is recorded in SCORE.md, never asserted: this set
measures the doctor, it is not a goal the checks are written to."""

from __future__ import annotations

import pytest
from sim.heldout import harness as base
from sim.heldout5 import harness

LINKS = {"driver", "toolkit", "device-plugin", "gfd", "exporter", "mig", "node", "none"}
EARLIER = ("heldout", "heldout2", "heldout3", "heldout4")


def test_the_set_is_big_enough_and_mixed() -> None:
    cases = [harness.load(p) for p in harness.cases()]
    assert len(cases) >= 20
    two = [c for c in cases if c.kind == "two-faults"]
    assert len(two) >= 2
    assert all(len({n for e in c.expects for n in e.nodes}) >= 2 for c in two)
    assert sum(c.kind == "healthy" for c in cases) >= 3
    assert all(e.root in LINKS for c in cases for e in c.expects)
    # a fault case says where and what repairs it
    assert all(e.nodes and e.fix_match and e.fix_does for c in cases if c.kind != "healthy" for e in c.expects)


def test_sources_are_new() -> None:
    """No case of this set comes from a report the corpus or an earlier held-out set already cites."""
    sim = harness.HERE.parent
    earlier = [p for d in EARLIER for p in base.cases(sim / d)]
    sources = [sim / "SOURCES.md", *(sim / d / "SOURCES.md" for d in EARLIER if (sim / d / "SOURCES.md").exists())]
    cited = "".join(p.read_text() for p in [*sources, *earlier])
    for path in harness.cases():
        case = harness.load(path)
        if case.kind != "healthy":
            repo, number = case.source.split("#")
            assert f"{repo}#{number}" not in cited and f"{repo}/issues/{number}" not in cited, case.name


@pytest.mark.parametrize("path", harness.cases(), ids=lambda p: p.stem)
def test_expectations_are_frozen(path) -> None:  # type: ignore[no-untyped-def]
    assert harness.frozen()[path.stem] == base.expect_digest(path), (
        f"{path.name}: its expect block changed after it was scored; add a note to SCORE.md instead"
    )


@pytest.mark.parametrize("path", harness.cases(), ids=lambda p: p.stem)
def test_the_doctor_runs_and_is_scored(path) -> None:  # type: ignore[no-untyped-def]
    result = base.score(harness.load(path))
    assert isinstance(result.root_right, bool)
    assert (result.fix_right is None) == (result.case.root == "none")
