"""The operator's runtime on kopf, wired to the pure reconcile.

kopf does the watching (ClusterPolicies, the operand DaemonSets, Nodes) and the connection;
every event only "pokes" a coalescer, which runs `reconcile` for each ClusterPolicy at most once
per ``min_interval`` seconds (and every ``resync`` seconds regardless). So a burst of node
heartbeats costs one reconcile, and since reconcile is idempotent it never matters which event
woke it. Only low-level event handlers are used: kopf persists no progress or diff-base
annotations on our objects, so a quiet cluster sees zero writes from the operator.

kopf's own pacing is replaced where it would kill the operator or hammer the API server
(issue 25), in ``kopf_settings``:

- a request that fails (503, a refused connection, 429, ...) is retried forever, on a jittered
  backoff capped at ``max_retry_seconds``. kopf's default is 8 retries, 54 s in all, after which
  a watcher's failed list raises out of kopf and the operator exits 1: after a minute of 503 the
  operator was gone until the kubelet restarted it, in crash-loop backoff;
- a watch stream that kopf restarts (after a 410 Gone, or a 429 it gave up on) restarts at once
  the first time, then on the same backoff while it keeps restarting: kopf's fixed 0.1 s made a
  flapping watch re-list ten times a second, each re-list waking a reconcile.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import kopf
from kopf._cogs.configs.configuration import WatchingSettings  # the type of OperatorSettings.watching; not re-exported

from gpuchain.common.supervise import Backoff, wait_event
from gpuchain.kube import CLUSTER_POLICY, Cluster, name_of
from gpuchain.operator.operands import MANAGED_BY
from gpuchain.operator.reconcile import DEFAULT_NAMESPACE, ReconcileResult, reconcile

log = logging.getLogger("gpuchain.operator")


@dataclass(kw_only=True)
class RuntimeConfig:
    """How the runtime paces itself and where operands go."""

    namespace: str = DEFAULT_NAMESPACE
    min_interval: float = 2.0
    resync: float = 60.0
    server: str | None = None  #: API server URL without credentials (tests); None: in-cluster / kubeconfig
    retry_seconds: float = 1.0
    """The first wait before kopf retries a failed API request or restarts a watch that keeps failing."""
    max_retry_seconds: float = 5.0
    """The longest such wait: the operator sees the API server back within about this long."""


class EndlessRetries:
    """kopf's ``networking.error_backoffs``: a wait before every retry, without end.

    kopf iterates it afresh for each request that fails, and gives up on a request only when the
    iteration ends; it has no length, so kopf counts no attempts and never escalates."""

    def __init__(self, first: float, cap: float) -> None:
        self.first = first
        self.cap = cap

    def __iter__(self) -> Iterator[float]:
        backoff = Backoff(self.first, cap=self.cap)
        while True:
            yield backoff.next()


class PacedWatching(WatchingSettings):
    """kopf's watching settings, whose ``reconnect_backoff`` (read by each watch stream before it
    starts again, after a 410 Gone or a 429 kopf gave up on) is zero for a stream's first restart
    and a jittered backoff while it keeps restarting; a stream quiet for twice the cap starts over.

    kopf reads it from the stream's own task, which is what tells one stream from another."""

    def __init__(self, base: WatchingSettings, *, first: float, cap: float) -> None:
        self._first, self._cap = first, cap
        self._streams: weakref.WeakKeyDictionary[asyncio.Task[Any], tuple[Backoff, float]] = weakref.WeakKeyDictionary()
        super().__init__(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})

    @property
    def reconnect_backoff(self) -> float:
        task = asyncio.current_task()
        if task is None:  # not read from a stream: kopf's constant
            return self._first
        now = time.monotonic()
        backoff, last = self._streams.get(task, (None, 0.0))
        wait = 0.0
        if backoff is None or now - last > 2 * self._cap:
            backoff = Backoff(self._first, cap=self._cap)
        else:
            wait = backoff.next()
        self._streams[task] = (backoff, now + wait)
        return wait

    @reconnect_backoff.setter
    def reconnect_backoff(self, value: float) -> None:
        """kopf's constructor sets its default; the pacing above replaces it."""


def kopf_settings(config: RuntimeConfig) -> kopf.OperatorSettings:
    """kopf's settings for the operator: Events only from WARNING up, watches renewed every 5
    minutes, and the retry and restart pacing the module describes."""
    settings = kopf.OperatorSettings()
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.networking.error_backoffs = EndlessRetries(config.retry_seconds, config.max_retry_seconds)
    settings.watching = PacedWatching(settings.watching, first=config.retry_seconds, cap=config.max_retry_seconds)
    return settings


def reconcile_all(cluster: Cluster, namespace: str) -> list[ReconcileResult]:
    """Reconcile every ClusterPolicy (extra ones are marked ignored), with one INFO line for each
    pass that wrote something: the operator's log says what it changed, and a quiet pass is quiet."""
    results = [reconcile(cluster, name=name_of(p), namespace=namespace) for p in cluster.list(CLUSTER_POLICY)]
    for result in results:
        if result.changed:
            log.info("ClusterPolicy %s (%s): wrote %s", result.policy, result.state, ", ".join(result.changed))
    return results


class Coalescer:
    """Runs ``work`` in a thread after pokes, no more often than ``min_interval``, and every ``resync``."""

    def __init__(self, work: Callable[[], object], *, min_interval: float, resync: float) -> None:
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
    coalescer = Coalescer(
        lambda: reconcile_all(cluster, config.namespace), min_interval=config.min_interval, resync=config.resync
    )
    tasks: list[asyncio.Task[None]] = []

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if config.server:
            return kopf.ConnectionInfo(server=config.server)
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(**_: Any) -> None:
        tasks.append(asyncio.create_task(coalescer.run()))

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        for task in tasks:
            task.cancel()

    seen: dict[str, str] = {}  # uid -> resourceVersion last seen, of every object watched

    def poke(**kwargs: Any) -> None:
        """Poke the coalescer unless the event shows an object as it was already seen: each time
        kopf starts a watch afresh (a 410 Gone) it lists again, and a list that shows nothing new
        wakes no reconcile."""
        uid: str = kwargs["uid"]
        if kwargs["type"] == "DELETED":
            seen.pop(uid, None)
        else:
            version: str = kwargs["meta"].get("resourceVersion", "")
            if version and seen.get(uid) == version:
                return
            if len(seen) >= SEEN_LIMIT:  # objects deleted while a watch was down are never seen DELETED
                seen.clear()
            seen[uid] = version
        coalescer.poke()

    kopf.on.event(group="gpuchain.io", version="v1", plural="clusterpolicies", id=POKE, registry=registry)(poke)
    kopf.on.event(group="apps", version="v1", plural="daemonsets", labels=dict(MANAGED_BY), id=POKE, registry=registry)(
        poke
    )
    kopf.on.event(group="", version="v1", plural="nodes", id=POKE, registry=registry)(poke)
    return registry, coalescer


POKE = "poke"
"""The id of the event handlers, which kopf names in its log."""
SEEN_LIMIT = 100_000
"""The most objects whose last version the handlers keep; past it they forget all (one extra poke)."""


def _not_a_poke_done(record: logging.LogRecord) -> bool:
    """Drop kopf's INFO line "Handler 'poke' succeeded.": kopf writes one for every event of every
    watched object (each Node heartbeat, each object of every re-list), and a poke cannot fail."""
    return record.getMessage() != f"Handler {POKE!r} succeeded."


async def run(
    cluster: Cluster,
    *,
    config: RuntimeConfig,
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
) -> None:
    """Run the operator until ``stop_flag`` is set (or forever)."""
    objects_log = logging.getLogger("kopf.objects")  # kopf's logger for what concerns one object
    if _not_a_poke_done not in objects_log.filters:
        objects_log.addFilter(_not_a_poke_done)
    registry, _ = build_registry(cluster, config)
    await kopf.operator(
        registry=registry,
        settings=kopf_settings(config),
        clusterwide=True,
        standalone=True,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
    )
