"""The operator's runtime on kopf, wired to the pure reconcile.

kopf does the watching (ClusterPolicies, the operand DaemonSets, Nodes) and the connection;
every event only "pokes" a coalescer, which runs `reconcile` for each ClusterPolicy at most once
per ``min_interval`` seconds (and every ``resync`` seconds regardless). So a burst of node
heartbeats costs one reconcile, and since reconcile is idempotent it never matters which event
woke it. Only low-level event handlers are used: kopf persists no progress or diff-base
annotations on our objects, so a quiet cluster sees zero writes from the operator.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kopf

from gpuchain.common.supervise import wait_event
from gpuchain.kube import CLUSTER_POLICY, Cluster, name_of
from gpuchain.operator.operands import MANAGED_BY
from gpuchain.operator.reconcile import DEFAULT_NAMESPACE, ReconcileResult, reconcile

log = logging.getLogger("gpuchain.operator")


@dataclass
class RuntimeConfig:
    """How the runtime paces itself and where operands go."""

    namespace: str = DEFAULT_NAMESPACE
    min_interval: float = 2.0
    resync: float = 60.0
    server: str | None = None  #: API server URL without credentials (tests); None: in-cluster / kubeconfig


def reconcile_all(cluster: Cluster, namespace: str) -> list[ReconcileResult]:
    """Reconcile every ClusterPolicy (extra ones are marked ignored)."""
    return [reconcile(cluster, name_of(p), namespace) for p in cluster.list(CLUSTER_POLICY)]


class Coalescer:
    """Runs ``work`` in a thread after pokes, no more often than ``min_interval``, and every ``resync``."""

    def __init__(self, work: Callable[[], object], min_interval: float, resync: float) -> None:
        self._work = work
        self._min_interval = min_interval
        self._resync = resync
        self._poked = asyncio.Event()
        self.runs = 0

    def poke(self) -> None:
        """Ask for a reconcile soon."""
        self._poked.set()

    async def run(self) -> None:
        """Loop forever (until cancelled)."""
        while True:
            await wait_event(self._poked, self._resync)
            self._poked.clear()
            try:
                await asyncio.to_thread(self._work)
            except Exception:  # a failed pass is retried on the next poke or resync
                log.exception("reconcile failed")
            self.runs += 1
            await asyncio.sleep(self._min_interval)


def build_registry(cluster: Cluster, config: RuntimeConfig) -> tuple[kopf.OperatorRegistry, Coalescer]:
    """A kopf registry whose handlers drive `reconcile_all` through a `Coalescer`."""
    registry = kopf.OperatorRegistry()
    coalescer = Coalescer(lambda: reconcile_all(cluster, config.namespace), config.min_interval, config.resync)
    tasks: list[asyncio.Task[None]] = []

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if config.server:
            return kopf.ConnectionInfo(server=config.server)
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        tasks.append(asyncio.create_task(coalescer.run()))

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        for task in tasks:
            task.cancel()

    def poke(**_: Any) -> None:
        coalescer.poke()

    kopf.on.event(group="gpuchain.io", version="v1", plural="clusterpolicies", registry=registry)(poke)
    kopf.on.event(group="apps", version="v1", plural="daemonsets", labels=dict(MANAGED_BY), registry=registry)(poke)
    kopf.on.event(group="", version="v1", plural="nodes", registry=registry)(poke)
    return registry, coalescer


async def run(
    cluster: Cluster,
    config: RuntimeConfig,
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
) -> None:
    """Run the operator until ``stop_flag`` is set (or forever)."""
    registry, _ = build_registry(cluster, config)
    await kopf.operator(
        registry=registry,
        clusterwide=True,
        standalone=True,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
    )
