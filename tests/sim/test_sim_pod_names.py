"""Simulated DaemonSet pod names look like the real controller's and never collide.

The suffix alphabet is Kubernetes' generateName one (``alphanums`` in
kubernetes/kubernetes staging/src/k8s.io/apimachinery/pkg/util/rand/rand.go: no vowels, no 0, 1
or 3), five characters long as the API server appends them.
"""

from __future__ import annotations

import re

from gpuchain.kube import POD
from gpuchain.sim import build, load_scenario
from gpuchain.sim.shapes import pod_name, unique_pod_name

NAME = re.compile(r"^nvidia-device-plugin-daemonset-[bcdfghjklmnpqrstvwxz2456789]{5}$")
DS = "nvidia-device-plugin-daemonset"


def test_a_name_is_the_daemonset_and_five_generate_name_characters() -> None:
    assert all(NAME.match(pod_name(DS, node=f"gpu-{i}", attempt=attempt)) for i in range(200) for attempt in range(3))


def test_a_taken_name_is_drawn_again_and_recorded() -> None:
    taken = {pod_name(DS, node="gpu-0")}
    name = unique_pod_name(DS, node="gpu-0", taken=taken)
    assert name == pod_name(DS, node="gpu-0", attempt=1) and name in taken and len(taken) == 2


def test_twenty_thousand_nodes_get_distinct_names_where_plain_suffixes_collide() -> None:
    nodes = [f"gpu-{i}" for i in range(20_000)]
    plain = {pod_name(DS, node=n) for n in nodes}
    assert len(plain) < len(nodes)  # the collisions this guards against do happen at this size
    taken: set[str] = set()
    names = [unique_pod_name(DS, node=n, taken=taken) for n in nodes]
    assert len(set(names)) == len(nodes) and all(NAME.match(n) for n in names)
    again: set[str] = set()
    assert [unique_pod_name(DS, node=n, taken=again) for n in nodes] == names  # deterministic


def test_a_built_cluster_names_its_operand_pods_the_same_way_every_time() -> None:
    first = sorted(p["metadata"]["name"] for p in build(load_scenario("healthy")).cluster.snapshot(POD))
    assert first == sorted(p["metadata"]["name"] for p in build(load_scenario("healthy")).cluster.snapshot(POD))
    assert len(set(first)) == len(first)
