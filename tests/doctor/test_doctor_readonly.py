"""The doctor reads with ``list_readonly``: on MemoryCluster it holds the store's own objects, so
it must never change one. Every scenario is diagnosed (and checklisted) and the store compared.
On a live cluster it leaves out fields no reader of a snapshot looks at: every scenario and every
held-out case gives the same report and checklist read that way as read whole."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from sim.heldout import harness

from gpuchain.doctor import gather, run_doctor
from gpuchain.doctor.verify import checklist
from gpuchain.kube import LiveCluster, MemoryCluster
from gpuchain.kube.kinds import kind_of
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


class Decoded(LiveCluster):
    """``LiveCluster.list_readonly`` (its decoding, and what it leaves out) over a MemoryCluster's
    objects: each list request is answered with the JSON of the store's ``list()``, one page; no
    request reaches the network."""

    store: MemoryCluster

    def _page(self, resource: type[Any], params: dict[str, Any], ns: dict[str, Any], read: Any = None) -> bytes:
        # One page, never read ahead: nothing waits on ``read``.
        info = resource._api_info.resource
        kind = kind_of({"apiVersion": f"{info.group}/{info.version}".lstrip("/"), "kind": info.kind})
        namespace = ns.get("namespace")
        items = self.store.list(
            kind,
            namespace=None if namespace in (None, "*") else namespace,
            label_selector=params.get("labelSelector"),
            field_selector=params.get("fieldSelector"),
        )
        return json.dumps({"kind": "List", "metadata": {}, "items": items}).encode()


SIM = Path(__file__).parents[1] / "sim"


def _held_out() -> list[Path]:
    return sorted(SIM.glob("heldout*/*.yaml"))


def _load(path: Path) -> harness.Case:
    """A held-out case built by its own set's loader (a later set adds kinds of edits)."""
    module = (
        importlib.import_module(f"sim.{path.parent.name}.harness")
        if path.parent.name not in ("heldout", "heldout2")
        else harness
    )
    return module.load(path)


def _whole_and_decoded(store: MemoryCluster, read_log: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The report and checklist (JSON) read whole, then through the live decoding."""
    out = []
    decoded = Decoded.from_url("http://127.0.0.1:9")
    decoded.store = store
    for cluster in (store, decoded):
        report = run_doctor(cluster, reader=read_log).to_dict()
        del report["seconds"], report["apiCalls"]
        out.append({"report": report, "checklist": checklist(gather(cluster)).to_dict()})
    return out[0], out[1]


@pytest.mark.parametrize("name", scenario_names())
def test_what_the_live_read_leaves_out_changes_no_finding(name: str) -> None:
    sim = build(load_scenario(name))
    whole, decoded = _whole_and_decoded(sim.cluster, sim.read_log)
    assert decoded == whole


@pytest.mark.parametrize("path", _held_out(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_what_the_live_read_leaves_out_changes_no_finding_on_held_out_cases(path: Path) -> None:
    case = _load(path)
    whole, decoded = _whole_and_decoded(case.cluster, case.read_log)
    assert decoded == whole
