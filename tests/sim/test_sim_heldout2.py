"""The second held-out set (tests/sim/heldout2, issue 26 item 5), written from reports outside the
project's corpus by someone who did not write the checks: every case builds from its report's
evidence, its expectations are the ones frozen before the first score, its reports are cited nowhere
else under tests/sim, and the doctor runs on every case. The score itself is recorded in
heldout2/SCORE.md, not enforced: a low score is a finding, not a failure."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from sim.heldout import harness

from gpuchain.sim.scenario import builtin_dir

HERE = Path(__file__).parent / "heldout2"
_REPORT = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#[0-9]+")


def test_the_set_is_big_enough_and_mixed() -> None:
    cases = [harness.load(p) for p in harness.cases(HERE)]
    assert len(cases) >= 20
    assert sum(c.kind == "two-faults" for c in cases) >= 2
    assert sum(c.kind == "healthy" for c in cases) >= 3
    two = [c for c in cases if c.kind == "two-faults"]
    assert all(len({n for e in c.expects for n in e.nodes}) >= 2 for c in two)


def test_reports_are_new_to_the_project() -> None:
    """No report behind a case here is cited by the first held-out set, the built-in scenarios or the
    corpus's SOURCES.md."""
    mine = {m for p in harness.cases(HERE) for m in _REPORT.findall(p.read_text())}
    cited = [Path(__file__).parent / "SOURCES.md", *harness.cases(), *builtin_dir().glob("*.yaml")]
    elsewhere = {m for p in cited for m in _REPORT.findall(p.read_text())}
    assert mine, "the cases name their reports"
    assert not mine & elsewhere


@pytest.mark.parametrize("path", harness.cases(HERE), ids=lambda p: p.stem)
def test_expectations_are_frozen(path: Path) -> None:
    assert harness.frozen(HERE)[path.stem] == harness.expect_digest(path), (
        f"{path.name}: its expect block changed after it was frozen; add a note to SCORE.md instead"
    )


@pytest.mark.parametrize("path", harness.cases(HERE), ids=lambda p: p.stem)
def test_the_doctor_runs_on_the_case(path: Path) -> None:
    """Scored without a floor: the result must exist (root judged, a fix judged for a fault)."""
    result = harness.score(harness.load(path))
    healthy = yaml.safe_load(path.read_text())["expect"] == {"root": "none", "nodes": []}
    assert isinstance(result.root_right, bool)
    assert (result.fix_right is None) == healthy
