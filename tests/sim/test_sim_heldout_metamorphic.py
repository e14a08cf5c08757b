"""Each held-out case renamed, moved and surrounded by unrelated workloads (`sim.heldout.metamorphic`), beside the
live answer.

The transformations keep each case's meaning, so a doctor that answers from the chain's state answers every one
exactly as live. ``METAMORPHIC_DIFFERS`` names each case whose answer a transformation changes, with the
transformation and what differs (``root``: its root link or nodes; ``fix``: the root is right and the repairing fix
is lost; ``healthy``: a healthy case's error findings come or go; ``findings``: the answer stands but an error or
warning finding comes or goes), each with its cause in a comment; a new difference
fails here, and so does one that is gone. None is listed: every held-out case is answered alike under all three.
"""

from __future__ import annotations

import re

import pytest
from sim.heldout import metamorphic, variants

from gpuchain.kube import DAEMONSET, EVENT, NAMESPACE, NODE, POD

#: (transformation, case) -> what the transformation changes in the doctor's answer (see the module's docstring).
METAMORPHIC_DIFFERS: dict[tuple[str, str], str] = {}


def _differs(row: metamorphic.Row, name: str) -> str | None:
    live, got = row.live, row.variants[name]
    if got == live:
        return "findings" if name in row.findings else None
    return "healthy" if row.healthy else ("root" if got[0] != live[0] else "fix")


@pytest.mark.parametrize("directory", variants.sets(), ids=lambda d: d.name)
def test_a_transformed_case_is_answered_as_the_original(directory):
    rows = list(metamorphic.rows([directory.name]))
    assert rows, f"{directory}: no case"
    got = {(name, r.case): what for r in rows for name in r.variants if (what := _differs(r, name)) is not None}
    cases = {r.case for r in rows}
    known = {k: v for k, v in METAMORPHIC_DIFFERS.items() if k[1] in cases}
    assert got == known, (
        "a transformation that keeps a case's meaning changed its answer: the doctor keys on a name or a shape, "
        f"not the chain's state (new entries are defects to fix; a gone one leaves METAMORPHIC_DIFFERS): now {got}, "
        f"listed {known}"
    )


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("ip-10-0-1-2.ec2.internal", r"ip-10-\d+-\d+-\d+\.ec2\.internal"),
        ("ip-192-168-88-15.us-west-2.compute.internal", r"ip-192-\d+-\d+-\d+\.us-west-2\.compute\.internal"),
        ("gke-ml-gpu-pool-1f2e3d4c-9xkq", r"gke-[a-z]+-[a-z]+-[a-z]+-[0-9a-f]{8}-[0-9a-z]{4}"),
        ("aks-gpupool-12345678-vmss000001", r"aks-[a-z]+-\d{8}-vmss\d{6}"),
        ("k8s-gpupool-25814736-0", r"k8s-[a-z]+-\d{8}-\d"),
        ("juju-7c3f2a-3", r"juju-[0-9a-f]{6}-\d"),
        ("cn-hangzhou.10.0.1.7", r"cn-hangzhou\.10\.\d+\.\d+\.\d+"),
        ("worker-gpu-0.ocp.example.com", r"worker-[a-z]+-\d\.ocp\.example\.com"),
    ],
)
def test_a_renamed_node_keeps_its_platforms_shape(name, shape):
    renamed = metamorphic.renamed_node(name)
    assert renamed != name
    assert re.fullmatch(shape, renamed), renamed


def _case(stem: str):
    directory = next(d for d in variants.sets() if any(d.glob(f"{stem}*.yaml")))
    return variants.loader(directory)(next(directory.glob(f"{stem}*.yaml")))


def test_every_transformation_changes_what_it_says():
    """The answers above compare something: nodes, namespaces and workloads really are changed."""
    case = _case("ho-10-")
    nodes = {n["metadata"]["name"] for n in case.cluster.snapshot(NODE)}
    stack = metamorphic.stack_namespaces(case.cluster.snapshot(DAEMONSET))
    assert stack == ["nvidia-device-plugin"]

    renamed = metamorphic.rename_nodes(case)
    assert not nodes & {n["metadata"]["name"] for n in renamed.cluster.snapshot(NODE)}
    assert {p["spec"].get("nodeName") for p in renamed.cluster.snapshot(POD)} <= {
        metamorphic.renamed_node(n) for n in nodes
    }
    assert renamed.nodes == [metamorphic.renamed_node(n) for n in case.nodes]

    moved = metamorphic.move_namespaces(case)
    spaces = {o["metadata"]["name"] for o in moved.cluster.snapshot(NAMESPACE)}
    assert "nvidia-device-plugin" not in spaces
    assert "nvidia-device-plugin" not in {p["metadata"]["namespace"] for p in moved.cluster.snapshot(POD)}

    noisy = metamorphic.add_noise(case)
    added = [p for p in noisy.cluster.snapshot(POD) if p["metadata"]["namespace"] == "storefront"]
    assert {p["status"]["phase"] for p in added} == {"Running", "Succeeded", "Pending"}
    assert not any("nvidia.com" in str(c.get("resources")) for p in added for c in p["spec"]["containers"])
    reasons = {e["reason"] for e in noisy.cluster.snapshot(EVENT) if e["metadata"]["namespace"] == "storefront"}
    assert reasons == {"BackOff", "FailedScheduling"}
