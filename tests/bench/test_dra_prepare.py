"""Smoke test of ``bench.dra.prepare``: a couple of rounds run end to end and print every row with
its figures and ratios. No timing is asserted: the figures are the bench's to report (docs/performance.md)."""

from __future__ import annotations

import re

import pytest

from bench.dra.prepare import CALLS, main

ROW = re.compile(
    r"^(?P<label>.+?)\s+(?P<p50>\d+\.\d{3})\s+(?P<p99>\d+\.\d{3})\s+(?P<r50>\d+\.\d{2}) / (?P<r99>\d+\.\d{2})$"
)


def test_every_call_is_reported_against_its_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--rounds", "3"])
    out = capsys.readouterr().out
    assert "3 alternated rounds" in out
    rows = {m["label"]: m for m in map(ROW.match, out.splitlines()) if m}
    assert list(rows) == [label for label, _ in CALLS]
    for label, baseline in CALLS:
        if CALLS[baseline][0] == label:
            assert (rows[label]["r50"], rows[label]["r99"]) == ("1.00", "1.00")


def test_too_few_rounds_for_a_p99_is_refused() -> None:
    with pytest.raises(SystemExit):
        main(["--rounds", "1"])
