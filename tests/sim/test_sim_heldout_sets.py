"""The held-out sets written after the first two (tests/sim/heldout3 .. heldout17, issue 26 item 5): in each,
every case builds from its report's evidence and the doctor runs on it, the set has the mix the issue asks
for, its reports are new against the corpus and every earlier set, and the expectations are the ones frozen
with the set's first score. The scores themselves are recorded in each set's SCORE.md, never asserted: a set
measures the doctor, it is not a goal the checks are written to."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest
from sim.heldout import harness as base

LINKS = {"driver", "toolkit", "device-plugin", "gfd", "exporter", "mig", "node", "none"}
#: Every held-out set in the order it was written; a set's reports must be new against all before it.
ORDER = (
    "heldout",
    "heldout2",
    "heldout3",
    "heldout4",
    "heldout5",
    "heldout6",
    "heldout7",
    "heldout8",
    "heldout9",
    "heldout10",
    "heldout11",
    "heldout12",
    "heldout13",
    "heldout14",
    "heldout15",
    "heldout16",
    "heldout17",
    "heldout18",
    "heldout19",
    "heldout20",
    "heldout21",
    "heldout22",
    "heldout23",
    "heldout24",
    "heldout25",
    "heldout26",
    "heldout27",
    "heldout28",
    "heldout29",
    "heldout30",
    "heldout31",
    "heldout32",
    "heldout33",
    "heldout34",
    "heldout35",
    "heldout36",
    "heldout37",
    "heldout38",
    "heldout39",
    "heldout40",
    "heldout41",
    "heldout42",
    "heldout43",
    "heldout44",
    "heldout45",
    "heldout46",
    "heldout47",
    "heldout48",
    "heldout49",
    "heldout50",
    "heldout51",
    "heldout52",
    "heldout53",
    "heldout54",
    "heldout55",
    "heldout56",
    "heldout57",
    "heldout58",
    "heldout59",
    "heldout60",
    "heldout61",
)
#: Sets written at the same time, each blind to the other: a report one cites may be cited by the other, since
#: neither the doctor nor either set's author saw the other set before both were frozen.
BESIDE = {
    "heldout15": {"heldout14"},
    "heldout24": {"heldout23"},
    "heldout26": {"heldout25"},
    "heldout28": {"heldout27"},
    "heldout30": {"heldout29"},
    "heldout32": {"heldout31"},
    "heldout34": {"heldout33"},
    "heldout36": {"heldout35"},
    "heldout38": {"heldout37"},
    "heldout39": {"heldout37", "heldout38"},
    "heldout40": {"heldout41", "heldout42"},
    "heldout41": {"heldout40", "heldout42"},
    "heldout42": {"heldout40", "heldout41"},
    "heldout43": {"heldout44", "heldout45"},
    "heldout44": {"heldout43", "heldout45"},
    "heldout45": {"heldout43", "heldout44"},
    "heldout46": {"heldout47", "heldout48"},
    "heldout47": {"heldout46", "heldout48"},
    "heldout48": {"heldout46", "heldout47"},
    "heldout49": {"heldout50"},
    "heldout50": {"heldout49"},
    "heldout53": {"heldout54"},
    "heldout54": {"heldout53"},
    "heldout57": {"heldout58", "heldout59"},
    "heldout58": {"heldout57", "heldout59"},
    "heldout59": {"heldout57", "heldout58"},
    "heldout60": {"heldout61"},
    "heldout61": {"heldout60"},
}
#: Sets smaller than the issue's 20, written in pairs (or threes) beside each other in one stop (16 each; heldout27 10,
#: heldout29 12, heldout31 10, heldout32 9, heldout34 12, heldout35 10, heldout36 8, heldout37 8, heldout38 10,
#: heldout40 9, heldout41 9 and heldout44 8: their writers found no more uncited, odd-numbered reports with a readable
#: resolution in their trackers in time; heldout33 10, heldout39 8 and heldout42 9: their writers found no more usable
#: forum threads or one-cluster write-ups in the stored pages; heldout43 8: its writer found three uncited, odd-numbered
#: reports with a readable resolution in the ML platforms' and serving stacks' trackers; heldout45 9: its writer found
#: four uncited, odd-numbered NVIDIA pull requests that state the failure they fix, and no NVIDIA forum thread in the
#: stored pages; heldout46 10: its writer found five uncited, odd-numbered reports in NVIDIA's nvidia-docker and
#: NVSentinel trackers, four with a readable resolution and one whose state the report itself calls healthy, the rest
#: of its share being cited by earlier sets, even-numbered or unresolved; heldout47 8: its writer found three uncited,
#: odd-numbered reports with a readable resolution in the platform and infrastructure-as-code trackers (aks-engine,
#: Charmed Kubernetes), most others there being cited; heldout48 6: its writer found two uncited non-English pages with
#: a Kubernetes GPU failure and a readable fix in the stored pages, each used in both two-fault cases, and four
#: descriptions of working clusters; heldout49 5: its writer found two uncited, odd-numbered reports with a readable
#: resolution in small projects' trackers (a one-person LLM operator, a community chart catalogue), each used in both
#: two-fault cases, and three descriptions of working clusters, the homelab repositories' GPU reports it found being
#: even-numbered pull requests or cited; heldout50 4: its writer found no uncited forum, Q&A or one-cluster page with
#: a Kubernetes GPU failure and a readable fix in the stored pages, only four descriptions of working clusters; heldout51
#: 6: its writer found three uncited, odd-numbered reports with a readable resolution in the Kubernetes, runtime,
#: GPU-sharing and batch-operator trackers (two HAMi issues and a Koordinator question), two of them used in both
#: two-fault cases, and three descriptions of working clusters from two pages; heldout52 6: its writer found no
#: uncited Q&A or forum thread with a Kubernetes GPU failure in the stored pages, and two write-ups kept in
#: repositories (a homelab's device plugin notes, a platform team's EKS AMI matrix), each giving two successive states
#: of its cluster, and one build log of a working cluster giving two; heldout53 8: its writer found three uncited,
#: odd-numbered reports with a readable resolution in the platform trackers (Harvester, the GPU Operator's and Kata's
#: on RKE2 and OVH VMs), two of them used in both two-fault cases, and three descriptions of working clusters;
#: heldout54 3: its writer found no uncited, odd-numbered non-English page with a Kubernetes GPU failure in the
#: stored pages, only two describing working clusters, one giving two states; heldout55 2: its writer checked some 150
#: issues of NVIDIA's trackers and found one uncited, odd-numbered report with a readable resolution, giving a fault
#: and, from its other log, a healthy state; heldout56 3: its writer found one uncited, odd-numbered report with a
#: readable resolution in the toolkit's, NFD's, mig-parted's, DRA driver's, NVSentinel's, DCGM's and runtimes' trackers,
#: and one page describing a working cluster in two states; heldout57 8: its writer took the vendors' troubleshooting
#: pages, six documented symptoms with their fixes and two documented working states; heldout58 3: its writer found one
#: uncited, odd-numbered report with a readable resolution in some 90 searches of NVIDIA's trackers, and one page
#: describing two working states; heldout59 6: its writer found three in the clouds', distributions' and schedulers'
#: trackers, two of them on one platform combined in its two-fault case, and two pages describing working clusters;
#: heldout60 5: its writer, cut short, took three of NVIDIA's documentation pages; heldout61 7: its writer took five
#: documented states from AKS's GPU pages and one from RKE2's).
SMALLER = {
    "heldout23": 16,
    "heldout24": 16,
    "heldout25": 16,
    "heldout26": 16,
    "heldout27": 10,
    "heldout28": 16,
    "heldout29": 12,
    "heldout30": 16,
    "heldout31": 10,
    "heldout32": 9,
    "heldout33": 10,
    "heldout34": 12,
    "heldout35": 10,
    "heldout36": 8,
    "heldout37": 8,
    "heldout38": 10,
    "heldout39": 8,
    "heldout40": 9,
    "heldout41": 9,
    "heldout42": 9,
    "heldout43": 8,
    "heldout44": 8,
    "heldout45": 9,
    "heldout46": 10,
    "heldout47": 8,
    "heldout48": 6,
    "heldout49": 5,
    "heldout50": 4,
    "heldout51": 6,
    "heldout52": 6,
    "heldout53": 8,
    "heldout54": 3,
    "heldout55": 2,
    "heldout56": 3,
    "heldout57": 8,
    "heldout58": 3,
    "heldout59": 6,
    "heldout60": 5,
    "heldout61": 7,
}
#: Sets with no fault case at all, so no two-fault case: heldout50's and heldout54's writers found no uncited forum,
#: Q&A or one-cluster page with a Kubernetes GPU failure and a readable fix in their shares, only descriptions of
#: working clusters; such a set measures the doctor's false alarms alone.
HEALTHY_ONLY = {"heldout50", "heldout54"}
#: Sets with faults but no two-fault case: heldout52's two failure write-ups each describe one node or one node group,
#: on platforms too unlike (a kubeadm homelab, an EKS node group) to be one cluster without inventing it; heldout55
#: heldout56 and heldout58 have one fault report each.
SINGLE_FAULTS = {"heldout52", "heldout55", "heldout56", "heldout58"}
#: Sets with one two-fault case: heldout57's troubleshooting pages, heldout59's trackers, heldout60's NVIDIA pages and
#: heldout61's AKS pages each gave one pair of faults that one cluster shows naturally.
FEWER_TWO_FAULTS = {"heldout57": 1, "heldout59": 1, "heldout60": 1, "heldout61": 1}
#: Sets with fewer than three healthy cases: heldout55's one report gives one healthy state, heldout56's, heldout57's,
#: heldout58's, heldout59's and heldout60's pages two.
FEWER_HEALTHY = {"heldout55": 1, "heldout56": 2, "heldout57": 2, "heldout58": 2, "heldout59": 2, "heldout60": 2}
#: The sets this module checks (heldout and heldout2 keep their own, older test modules).
SETS = ORDER[2:]
SIM = Path(__file__).parent


def _harness(name: str) -> ModuleType:
    return importlib.import_module(f"sim.{name}.harness")


def _case_params() -> list[tuple[str, Path]]:
    return [(name, path) for name in SETS for path in _harness(name).cases()]


@pytest.mark.parametrize("name", SETS)
def test_the_set_is_big_enough_and_mixed(name: str) -> None:
    harness = _harness(name)
    cases = [harness.load(p) for p in harness.cases()]
    assert len(cases) >= SMALLER.get(name, 20)
    two = [c for c in cases if c.kind == "two-faults"]
    if name in HEALTHY_ONLY:
        assert all(c.kind == "healthy" for c in cases)
    elif name not in SINGLE_FAULTS:
        assert len(two) >= FEWER_TWO_FAULTS.get(name, 2)
    assert all(len({n for e in c.expects for n in e.nodes}) >= 2 for c in two)
    assert sum(c.kind == "healthy" for c in cases) >= FEWER_HEALTHY.get(name, 3)
    assert all(e.root in LINKS for c in cases for e in c.expects)
    # a fault case says where and what repairs it
    assert all(e.nodes and e.fix_match and e.fix_does for c in cases if c.kind != "healthy" for e in c.expects)


@pytest.mark.parametrize("name", SETS)
def test_sources_are_new(name: str) -> None:
    """No case of a set comes from a report the corpus or an earlier held-out set already cites."""
    harness = _harness(name)
    earlier = [d for d in ORDER[: ORDER.index(name)] if d not in BESIDE.get(name, set())]
    files = [
        SIM / "SOURCES.md",
        *(SIM / d / "SOURCES.md" for d in earlier),
        *(p for d in earlier for p in base.cases(SIM / d)),
    ]
    cited = "".join(p.read_text() for p in files if p.exists())
    for path in harness.cases():
        case = harness.load(path)
        if case.kind != "healthy" and "#" not in case.source:
            assert case.source not in cited, (case.name, case.source)  # a whole page, by its address
        elif case.kind != "healthy":
            repo, number = case.source.split("#")
            # the number must end there: #264 is not #2646
            cites = re.compile(rf"{re.escape(repo)}(#|/issues/|/pull/){number}(?!\d)")
            assert not cites.search(cited), (case.name, case.source)


@pytest.mark.parametrize(("name", "path"), _case_params(), ids=lambda v: v if isinstance(v, str) else v.stem)
def test_expectations_are_frozen(name: str, path: Path) -> None:
    assert _harness(name).frozen()[path.stem] == base.expect_digest(path), (
        f"{name}/{path.name}: its expect block changed after it was scored; add a note to SCORE.md instead"
    )


@pytest.mark.parametrize(("name", "path"), _case_params(), ids=lambda v: v if isinstance(v, str) else v.stem)
def test_the_doctor_runs_and_is_scored(name: str, path: Path) -> None:
    result = base.score(_harness(name).load(path))
    assert isinstance(result.root_right, bool)
    assert (result.fix_right is None) == (result.case.root == "none")
