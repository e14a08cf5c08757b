"""MemoryCluster stays bounded: compacted watch history answered 410 Gone when too old, as the API
server does, no second copy of stored objects, and watchers that fall behind are closed."""

from __future__ import annotations

import asyncio
import tracemalloc

import pytest

from gpuchain.kube import CONFIGMAP, NODE, GoneError, WatchEvent
from gpuchain.kube import memory as memory_module
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kube.objects import Obj, json_copy


def node(name: str, **labels: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)}}


async def _drain(cluster: MemoryCluster, resource_version: str, limit: int = 100) -> list[WatchEvent]:
    seen: list[WatchEvent] = []
    async for ev in cluster.watch(NODE, resource_version=resource_version, timeout=0.2):
        seen.append(ev)
        if len(seen) == limit:
            break
    return seen


async def test_a_watch_resumes_within_the_history_and_is_gone_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_module, "HISTORY", 5)
    cluster = MemoryCluster([node("n1")])
    rvs = [
        cluster.patch(NODE, name="n1", patch={"metadata": {"labels": {"step": str(i)}}})["metadata"]["resourceVersion"]
        for i in range(10)
    ]
    # The last 5 events are kept: resuming from the rv just before them sees all 5.
    events = await _drain(cluster, rvs[4])
    assert [e.object["metadata"]["labels"]["step"] for e in events] == ["5", "6", "7", "8", "9"]
    with pytest.raises(GoneError, match=r"too old resource version: \d+ \(\d+\)"):
        await _drain(cluster, rvs[3])


async def test_history_is_kept_per_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the API server's per-resource watch cache: busy ConfigMaps do not expire a Node watch."""
    monkeypatch.setattr(memory_module, "HISTORY", 5)
    cluster = MemoryCluster()
    since = cluster.create(node("n1"))["metadata"]["resourceVersion"]
    cluster.patch(NODE, name="n1", patch={"metadata": {"labels": {"a": "1"}}})
    for i in range(50):
        cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}", "namespace": "x"}})
    assert cluster.count(CONFIGMAP) == 50
    events = await _drain(cluster, since)
    assert [(e.type, e.object["metadata"]["labels"]) for e in events] == [("MODIFIED", {"a": "1"})]


async def test_history_holds_no_second_copy_of_what_is_stored() -> None:
    """Memory for 300 large objects is about their own size, not twice it (store + history)."""
    big = {f"k{i}": "x" * 200 for i in range(200)}
    objects = [{**node(f"n{i}"), "status": {"capacity": dict(big)}} for i in range(300)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        copies = json_copy(objects)
        one_copy = tracemalloc.get_traced_memory()[0] - before
        del copies
        before = tracemalloc.get_traced_memory()[0]
        cluster = MemoryCluster(objects)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cluster.count(NODE) == 300
    assert held < 1.3 * one_copy


async def test_memory_is_flat_under_endless_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-lived writer (an agent republishing its slice) does not grow the cluster past its bound."""
    monkeypatch.setattr(memory_module, "HISTORY", 20)
    cluster = MemoryCluster([node("n1")])
    payload = "y" * 5_000

    def write(n: int) -> None:
        for i in range(n):
            cluster.patch(
                NODE, name="n1", patch={"metadata": {"annotations": {"seq": str(i), "blob": payload + str(i)}}}
            )

    tracemalloc.start()
    try:
        write(100)
        warm = tracemalloc.get_traced_memory()[0]
        write(1_000)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert after - warm < 20 * len(payload)  # less than one history's worth more, after 10x the writes


async def test_a_watcher_that_falls_behind_is_closed_and_can_watch_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_module, "WATCH_BACKLOG", 3)
    cluster = MemoryCluster([node("n1")])
    stream = cluster.watch(NODE)
    first = await anext(stream)  # the initial ADDED; the watcher is now registered
    assert first.type == "ADDED"
    for i in range(10):  # the reader does not read meanwhile
        await asyncio.to_thread(cluster.patch, NODE, name="n1", patch={"metadata": {"labels": {"i": str(i)}}})
    got = [ev async for ev in stream]
    assert 1 <= len(got) <= 3  # what it had buffered, then the stream ended
    last = got[-1].resource_version
    assert last is not None
    resumed = await _drain(cluster, last)
    assert [e.object["metadata"]["labels"]["i"] for e in resumed] == [
        str(i) for i in range(10) if i > int(got[-1].object["metadata"]["labels"]["i"])
    ]


async def test_watchers_get_their_own_copies() -> None:
    cluster = MemoryCluster([node("n1", a="1")])
    events = await _drain(cluster, "0")
    events[0].object["metadata"]["labels"]["a"] = "changed"
    assert cluster.get(NODE, name="n1")["metadata"]["labels"] == {"a": "1"}
    assert (await _drain(cluster, "0"))[0].object["metadata"]["labels"] == {"a": "1"}


def test_copies_share_nothing_even_where_the_original_shares_a_subtree() -> None:
    """MemoryCluster copies every object in and out with json_copy: an object whose two fields hold
    the same dict (as a rendered template often does) must come out as two independent dicts."""
    labels = {"app": "x"}
    pod = {"metadata": {"labels": labels}, "spec": {"template": {"metadata": {"labels": labels}}}, "t": (1, 2)}
    copied = json_copy(pod)
    assert copied == pod
    assert copied["metadata"]["labels"] is not copied["spec"]["template"]["metadata"]["labels"]
    copied["metadata"]["labels"]["app"] = "y"
    assert copied["spec"]["template"]["metadata"]["labels"] == {"app": "x"} and labels == {"app": "x"}


def test_a_tree_marshal_cannot_write_is_still_copied() -> None:
    class Opaque:
        pass

    leaf = Opaque()
    tree = {"a": [{"b": leaf}]}
    copied = json_copy(tree)
    assert copied == tree and copied["a"] is not tree["a"] and copied["a"][0]["b"] is leaf
