"""The evidence catalog (src/gpuchain/doctor/catalog.yaml, issue 26): each entry's pattern matches
the message as its source writes it, and every log line a finding quotes is cited to an entry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sim.heldout import harness

from gpuchain.doctor import Severity, catalog, run_doctor
from gpuchain.sim import build, load_scenario, scenario_names

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("entry", catalog.entries(), ids=lambda e: e.id)
def test_every_pattern_matches_its_quoted_source_line(entry: catalog.Entry) -> None:
    line = catalog.printed(entry.line, entry.args)
    assert entry.regex.search(line), f"{entry.id}: {entry.pattern!r} does not match {line!r}"
    assert catalog.find(line, entry.id) == catalog.Match(entry, line.strip())


@pytest.mark.parametrize("entry", catalog.entries(), ids=lambda e: e.id)
def test_every_entry_names_its_source_and_an_acting_fix(entry: catalog.Entry) -> None:
    assert re.fullmatch(r"[\w.-]+(/[\w.-]+)? \S+@\S+", entry.source), entry.source
    assert entry.cause.endswith(".") and entry.component and entry.line
    # A fix is the change that repairs: never the diagnosis again, nor the next thing to look at.
    assert not re.search(r"\b(check|look at|investigate|see) (the )?(log|what)", entry.fix, re.IGNORECASE)
    assert "fix what" not in entry.fix


def test_a_line_matches_the_first_entry_given_and_unknown_errors_are_kept_apart() -> None:
    text = "I0101 starting\nE0101 12:00:00.000000 1 main.go:1] Incompatible platform detected\n"
    found = catalog.find(text)
    assert found is not None and found.entry.id == "k8s-device-plugin.incompatible-platform"
    assert catalog.unknown_error(text) is None
    assert catalog.find("nothing here") is None and catalog.unknown_error("all is well") is None
    odd = 'time="2026-01-01T00:00:00Z" level=info msg="start"\ntime="2026-01-01T00:00:01Z" level=fatal msg="boom"'
    assert catalog.unknown_error(odd) == 'time="2026-01-01T00:00:01Z" level=fatal msg="boom"'
    with pytest.raises(KeyError):
        catalog.find(text, "no.such-entry")


def test_every_catalog_id_the_doctor_names_exists() -> None:
    """The checks name entries by id; an id the catalog lacks would fail only when that check runs."""
    prefixes = {e.id.split(".")[0] for e in catalog.entries()}
    known = {e.id for e in catalog.entries()}
    named = set()
    for path in (ROOT / "src/gpuchain/doctor").rglob("*.py"):
        named |= {m for m in re.findall(r'"([a-z0-9-]+\.[a-z0-9-]+)"', path.read_text()) if m.split(".")[0] in prefixes}
    assert named, "the checks name no catalog entry"
    assert named <= known, sorted(named - known)


#: How a finding quotes what a component wrote (its log, a container message, an Event).
QUOTES = ("log: ", "says: ", "toolkit log: ", "device plugin log: ", "exporter log: ")


def _cited(finding: object) -> None:
    evidence = list(finding.evidence)  # type: ignore[attr-defined]
    cited = [catalog.entry(e.split()[1]) for e in evidence if e.startswith("catalog: ")]
    for e in evidence:
        quoted = next((e.removeprefix(q) for q in QUOTES if e.startswith(q)), None)
        if quoted is None:
            continue
        assert any(c.regex.search(quoted) for c in cited), (
            f"{finding.id} quotes {quoted!r} without the catalog entry that knows it: {evidence}"  # type: ignore[attr-defined]
        )


@pytest.mark.parametrize("name", scenario_names())
def test_every_log_based_finding_cites_a_catalog_entry(name: str) -> None:
    sim = build(load_scenario(name))
    for finding in run_doctor(sim.cluster, reader=sim.read_log).findings:
        _cited(finding)


@pytest.mark.parametrize("path", harness.cases(), ids=lambda p: p.stem)
def test_every_log_based_finding_on_the_held_out_set_cites_a_catalog_entry(path: Path) -> None:
    """The held-out cases carry the components' lines as the public reports quote them."""
    case = harness.load(path)
    for finding in run_doctor(case.cluster, reader=case.read_log).findings:
        _cited(finding)


def test_an_error_line_no_entry_knows_is_reported_as_unrecognised_with_the_line() -> None:
    """A failing container's last error line that the catalog does not know is a warning that quotes
    it and names its component, never a nearby link's known fault."""
    from gpuchain.doctor import diagnose
    from gpuchain.doctor.snapshot import gather
    from gpuchain.doctor.structs import Snapshot

    sim = build(load_scenario("op-plugin-inotify"))
    snap = gather(sim.cluster)
    odd = "E0101 12:00:00.000000       1 main.go:9] frobnicator exploded"
    for pod in snap.pods:
        for cs in pod.get("status", {}).get("containerStatuses") or []:
            term = (cs.get("lastState") or {}).get("terminated")
            if term and "FS watcher" in term.get("message", ""):
                term["message"] = f"starting\n{odd}"
    report = diagnose(Snapshot(**snap.__dict__))
    odd_ones = [f for f in report.findings if f.id == "log.unrecognised"]
    assert odd_ones and all(f.severity is Severity.WARNING and f"unrecognised: {odd}" in f.evidence for f in odd_ones)
    assert all(f.link == "device-plugin" and "unrecognised error from device-plugin" in f.cause for f in odd_ones)
    not_ready = next(f for f in report.findings if f.id == "device-plugin.not-ready")
    assert not_ready.action is None and not any(e.startswith("catalog: ") for e in not_ready.evidence)


def test_a_catalog_fix_names_the_daemonset_that_owns_the_failing_pod() -> None:
    """An entry whose fix sets a key on "<its DaemonSet>" gets the failing pod's owner filled in, so the command
    pastes as it stands: the device plugin refused NVML's MIG memory info (heldout18's h18-10, the plugin of
    NVIDIA's static DaemonSet) is repaired on daemonset/nvidia-device-plugin-daemonset."""
    entry = next(e for e in catalog.entries() if "<its DaemonSet>" in e.fix)
    assert "daemonset/ds-x " in entry.repair("n", namespace="ns", daemonset="ds-x")
    assert "<its DaemonSet>" in entry.repair("n", namespace="ns"), "a value nothing fills stays for the user"
    from sim.heldout18 import harness as eighteenth

    path = next(p for p in eighteenth.cases() if p.name.startswith("h18-10-"))
    case = eighteenth.load(path)
    root = next(f for f in run_doctor(case.cluster, reader=case.read_log).findings if f.id == "device-plugin.not-ready")
    assert "set env daemonset/nvidia-device-plugin-daemonset NVIDIA_MIG_MONITOR_DEVICES=all" in root.fix
