"""The doctor reads with ``list_readonly``: on MemoryCluster it holds the store's own objects, so
it must never change one. Every scenario is diagnosed (and checklisted) and the store compared."""

from __future__ import annotations

import json

import pytest

from gpuchain.doctor import gather, run_doctor
from gpuchain.doctor.verify import checklist
from gpuchain.kube import MemoryCluster
from gpuchain.sim import build, load_scenario, scenario_names


def stored(cluster: MemoryCluster) -> str:
    """Every stored object, serialised in a stable order."""
    return json.dumps({k.plural + "." + k.api_version: cluster.snapshot(k) for k in cluster.kinds()}, sort_keys=True)


@pytest.mark.parametrize("name", scenario_names())
def test_the_doctor_changes_no_object_it_reads(name: str) -> None:
    sim = build(load_scenario(name))
    before = stored(sim.cluster)
    report = run_doctor(sim.cluster, reader=sim.read_log)
    checklist(gather(sim.cluster))
    assert stored(sim.cluster) == before
    assert report.api_calls.get("list", 0) <= 10


def test_the_snapshot_holds_the_stores_objects_uncopied() -> None:
    """What makes 10,000 nodes cheap, and why the test above matters: no deep copy per list."""
    sim = build(load_scenario("healthy"))
    first, again = gather(sim.cluster), gather(sim.cluster)
    assert first.nodes and all(a is b for a, b in zip(first.nodes, again.nodes, strict=True))
    assert all(a is b for a, b in zip(first.pods, again.pods, strict=True))
