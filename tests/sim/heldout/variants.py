"""Every held-out case diagnosed as a user's dump of it, not only live (issue 26: the doctor is measured outside the
project on cluster dumps in kubectl's layout, and a right answer live that a dump of the same cluster loses is a miss
there).

Two ways a cluster reaches the doctor as files, each scored against the case's frozen expectation beside the live
score:

- ``gpuchain``: ``gpuchain doctor dump DIR`` then ``gpuchain doctor --from-dump DIR`` (`write_dump` with its extras:
  the ClusterPolicy, NVIDIADriver, RuntimeClass, ResourceSlice, ConfigMap listings, previous runs' logs);
- ``kubectl``: what ``kubectl cluster-info dump --all-namespaces --output-directory=DIR`` writes and nothing more
  (kubernetes staging/src/k8s.io/kubectl/pkg/cmd/clusterinfo/clusterinfo_dump.go: nodes, and per namespace events,
  replication controllers, services, DaemonSets, Deployments, ReplicaSets, pods, and every pod's current log).

Two more, measured on demand (``--also``), not pinned by a test: kubectl's dump as a ticket often has it, weaker
than the cluster was:

- ``kubectl-noevents``: every Event gone (the API server keeps them an hour, kube-apiserver ``--event-ttl``, so a dump
  of an older incident has none); what the doctor then knows of the pods is their status alone;
- ``kubectl-nologs``: every log empty (what rests on log text, and what the pods' and DaemonSets' states carry).

``python -m sim.heldout.variants [--also kubectl-noevents,kubectl-nologs] [SET ...]`` (from tests/, SET as
``heldout12``) prints each variant's totals beside the live ones and every case whose answer a variant changes.
"""

from __future__ import annotations

import importlib
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sim.heldout import harness as base

from gpuchain.doctor.diagnose import diagnose
from gpuchain.doctor.dump import read_dump, write_dump

SIM = base.HERE.parent
#: Variant -> whether its dump carries gpuchain's extras.
VARIANTS = {"gpuchain": True, "kubectl": False}
#: Variants measured on demand: kubectl's dump with the files of one kind emptied (the glob, and what an empty one
#: holds).
STRIPPED = {
    "kubectl-noevents": ("events.json", lambda text: json.dumps({**json.loads(text), "items": []})),
    "kubectl-nologs": ("logs*.txt", lambda text: ""),
}


def via_dump(case: base.Case, variant: str) -> base.Result:
    """``case`` written as ``variant``'s dump, read back and diagnosed, then scored as the live run is."""
    with tempfile.TemporaryDirectory(prefix="gpuchain-variant-") as where:
        write_dump(case.cluster, where, extras=VARIANTS.get(variant, False))
        if variant in STRIPPED:
            glob, empty = STRIPPED[variant]
            for path in Path(where).rglob(glob):
                path.write_text(empty(path.read_text()))
        return base.score(case, diagnose(read_dump(where)))


def loader(directory: Path) -> Callable[[Path], base.Case]:
    """The loader of the held-out set in ``directory`` (its harness's; the first sets use the base one)."""
    try:
        return importlib.import_module(f"sim.{directory.name}.harness").load  # type: ignore[no-any-return]
    except ModuleNotFoundError:
        return base.load


def sets(names: list[str] | None = None) -> list[Path]:
    """The held-out set directories (all, or those named), in number order."""
    found = [d for d in SIM.iterdir() if d.is_dir() and d.name.startswith("heldout") and any(d.glob("*.yaml"))]
    found.sort(key=lambda d: int(d.name.removeprefix("heldout") or 1))
    return [d for d in found if not names or d.name in names]


@dataclass(frozen=True)
class Row:
    """One case's answer live and through each variant: ``(root right, fix right)`` (fix None: healthy)."""

    set: str
    case: str
    healthy: bool
    live: tuple[bool, bool | None]
    variants: dict[str, tuple[bool, bool | None]]


def rows(directories: list[Path], variants: tuple[str, ...] = tuple(VARIANTS)) -> Iterator[Row]:
    """Each case of ``directories`` scored live and through ``variants`` (each from a freshly loaded case)."""
    for directory in directories:
        load = loader(directory)
        for path in base.cases(directory):
            live = base.score(load(path))
            got = {}
            for variant in variants:
                r = via_dump(load(path), variant)
                got[variant] = (r.root_right, r.fix_right)
            yield Row(directory.name, live.case.name, live.case.root == "none", (live.root_right, live.fix_right), got)


class Totals:
    """Per way of answering (live, each variant): faults, root right, fix right, healthy, healthy quiet."""

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}

    def add(self, row: Row) -> None:
        """Count ``row``'s live answer and each variant's."""
        for name, (root, fix) in [("live", row.live), *row.variants.items()]:
            t = self.counts.setdefault(name, [0, 0, 0, 0, 0])
            if row.healthy:
                t[3] += 1
                t[4] += root
            else:
                t[0] += 1
                t[1] += root
                t[2] += bool(fix)

    def lines(self, more: Callable[[str], str] = lambda name: "") -> list[str]:
        """One line per way of answering; ``more`` adds to a line (by its name)."""
        return [
            f"{name:16} root {root}/{faults}  fix {fix}/{faults}  healthy quiet {quiet}/{healthy}{more(name)}"
            for name, (faults, root, fix, healthy, quiet) in self.counts.items()
        ]


def changed(row: Row) -> str | None:
    """The line saying how the variants answer ``row`` otherwise than live (None: none does)."""
    differ = {k: v for k, v in row.variants.items() if v != row.live}
    if not differ:
        return None
    said = ", ".join(f"{k} {_mark(v)}" for k, v in differ.items())
    return f"{row.set}/{row.case}: live {_mark(row.live)}; {said}"


def main(argv: list[str]) -> None:
    """Print every case a variant answers otherwise than live, then the totals."""
    also: list[str] = []
    if argv[:1] == ["--also"]:
        also, argv = argv[1].split(","), argv[2:]
    unknown = [v for v in also if v not in STRIPPED]
    if unknown:
        raise SystemExit(f"--also: no variant {', '.join(unknown)} (there are {', '.join(STRIPPED)})")
    totals = Totals()
    for row in rows(sets(argv or None), (*VARIANTS, *also)):
        totals.add(row)
        line = changed(row)
        if line:
            print(line, flush=True)
    print()
    print("\n".join(totals.lines()))


def _mark(answer: tuple[bool, bool | None]) -> str:
    root, fix = answer
    return f"root {'yes' if root else 'no'}" + ("" if fix is None else f" fix {'yes' if fix else 'no'}")


if __name__ == "__main__":
    main(sys.argv[1:])
