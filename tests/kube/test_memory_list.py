"""MemoryCluster's list: the API server's order kept across creates and deletes (the order is
cached between lists), and ``list_readonly`` handing out the stored objects without a copy."""

from __future__ import annotations

import random

from gpuchain.kube import NODE, POD
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kube.objects import Obj


def pod(name: str, ns: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": {}}


def names(objs: list[Obj]) -> list[tuple[str, str]]:
    return [(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objs]


def test_list_order_follows_every_create_and_delete() -> None:
    """Sorted by namespace then name, as etcd's keys, however writes and lists interleave."""
    rng = random.Random(7)
    cluster = MemoryCluster()
    present: set[tuple[str, str]] = set()
    for step in range(300):
        key = (rng.choice(["a", "b", "default"]), f"p{rng.randrange(40)}")
        if key in present and rng.random() < 0.5:
            cluster.delete(POD, name=key[1], namespace=key[0])
            present.discard(key)
        elif key not in present:
            cluster.create(pod(key[1], key[0]))
            present.add(key)
        else:  # a write that keeps the key: the order stays valid
            cluster.patch(POD, name=key[1], patch={"metadata": {"labels": {"step": str(step)}}}, namespace=key[0])
        if step % 7 == 0:
            assert names(cluster.list_readonly(POD)) == sorted(present)
            assert names(cluster.list(POD, namespace="b")) == sorted(k for k in present if k[0] == "b")
    assert names(cluster.list(POD)) == sorted(present)


def test_an_empty_namespace_lists_every_namespace() -> None:
    """As LiveCluster sends it (``namespace or "*"``)."""
    cluster = MemoryCluster([pod("x", "a"), pod("y", "b")])
    assert names(cluster.list(POD, namespace="")) == [("a", "x"), ("b", "y")]


def test_list_readonly_shares_and_list_copies() -> None:
    cluster = MemoryCluster([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a": "1"}}}])
    assert cluster.list_readonly(NODE)[0] is cluster.list_readonly(NODE)[0]
    copy = cluster.list(NODE)[0]
    assert copy == cluster.list_readonly(NODE)[0] and copy is not cluster.list_readonly(NODE)[0]
    copy["metadata"]["labels"]["a"] = "changed"
    assert cluster.list_readonly(NODE)[0]["metadata"]["labels"] == {"a": "1"}
    assert cluster.calls.by_verb["list"] == 6
