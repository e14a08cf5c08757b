"""kube.follow: how soon a watch starts again after a 410 or a failure, and what that logs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpuchain.kube import KubeError, MemoryCluster
from gpuchain.kube import follow as follow_module
from gpuchain.kube.errors import GoneError
from gpuchain.kube.follow import node_states
from gpuchain.kube.port import WatchEvent


class Failing(MemoryCluster):
    """Each watch raises the next of ``failures`` until none are left, then watches for real."""

    def __init__(self, failures: list[Exception]) -> None:
        super().__init__([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-0"}}])
        self.failures = failures
        self.watches = 0

    async def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[WatchEvent]:
        self.watches += 1
        if self.failures:
            raise self.failures.pop(0)
        async for event in super().watch(*args, **kwargs):
            yield event


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits the follow loop asks for (taken at once)."""
    asked: list[float] = []

    async def sleep(seconds: float) -> None:
        asked.append(seconds)

    monkeypatch.setattr(follow_module.asyncio, "sleep", sleep)
    return asked


async def _first_state(cluster: Failing) -> None:
    states = node_states(cluster, node_name="gpu-0", retry_seconds=1.0, max_retry_seconds=4.0)
    await asyncio.wait_for(anext(states), 5)
    await states.aclose()


async def test_the_first_410_relists_at_once_and_more_back_off_to_the_cap_logging_only_the_streaks_ends(
    waits: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    cluster = Failing([GoneError("expired") for _ in range(6)])
    with caplog.at_level(logging.DEBUG, logger="gpuchain.kube.follow"):
        await _first_state(cluster)
    assert cluster.watches == 7
    assert len(waits) == 5, "the first 410 waits for nothing"
    assert [0.5 <= w <= 1.0 for w in waits[:1]] == [True] and all(w <= 4.0 for w in waits)
    assert waits[3] >= 2.0 and waits[4] >= 2.0, "doubled to the cap"
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert len(loud) == 3, loud  # expired; expired again; watching again after 5 failed attempts


async def test_a_failing_watch_backs_off_from_the_first_failure_and_warns_once(
    waits: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    cluster = Failing([KubeError("503") for _ in range(4)])
    with caplog.at_level(logging.DEBUG, logger="gpuchain.kube.follow"):
        await _first_state(cluster)
    assert len(waits) == 4 and 0.5 <= waits[0] <= 1.0
    assert [r.levelno for r in caplog.records if r.levelno >= logging.INFO] == [logging.WARNING, logging.INFO]


async def test_a_410_after_a_healthy_watch_relists_at_once_again(waits: list[float]) -> None:
    cluster = Failing([GoneError("expired")])
    states = node_states(cluster, node_name="gpu-0", watch_seconds=0.05)
    await asyncio.wait_for(anext(states), 5)  # a 410, then a healthy watch: the backoff starts over
    cluster.failures.append(GoneError("expired"))  # met when the watch resumes after its timeout
    await asyncio.wait_for(anext(states), 5)
    await states.aclose()
    assert cluster.watches == 4 and waits == []
