"""The small cluster the doctor's rule and fix tests start from: a scenario of a few nodes on one stack,
edited the way the real components would leave it, then diagnosed as on a live cluster (the list calls,
then the logs the doctor asks for, through the port)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sim.heldout import harness

from gpuchain.doctor import run_doctor
from gpuchain.doctor.model import Report
from gpuchain.sim import build, parse_scenario
from gpuchain.sim.build import SimCluster

#: A change to the built cluster: a held-out edit (tests/sim/heldout's format: pod states, logs, labels)
#: or a function of the simulation.
Edit = Mapping[str, Any] | Callable[[SimCluster], object]


def diagnosed(scenario: str, *edits: Edit) -> Report:
    """The doctor's report on ``scenario`` (its YAML text) built, after ``edits`` in order."""
    sim = build(parse_scenario(scenario))
    for edit in edits:
        if callable(edit):
            edit(sim)
        else:
            harness._apply(sim.cluster, dict(edit))
    return run_doctor(sim.cluster, reader=sim.read_log)
