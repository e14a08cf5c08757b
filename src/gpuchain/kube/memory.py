"""MemoryCluster: an in-memory Kubernetes API for tests, benchmarks and the simulator.

It keeps what callers rely on from a real API server: resourceVersions (one counter, bumped
only on real change), uid, creationTimestamp, generation (bumped on spec changes), label and
field selectors, watch streams with ADDED/MODIFIED/DELETED and resume from a resourceVersion,
the status subresource, ownerReference garbage collection, and the Eviction API checking
PodDisruptionBudgets, strategic merge of ``status.conditions``, and container logs (which the
simulator or a test sets with ``set_logs``; they go with the pod). ``list_readonly`` hands out
the stored objects themselves (every write stores a new dict, so a reader's objects never change
under it); every other verb returns copies. It does not validate schemas,
require namespaces to exist, or honour finalizers (deletes are immediate).

Thread-safe: writes may come from any thread; watchers are fed on their own event loop.

Bounded, as a long-running simulator or agent on ``--cluster memory`` needs: each kind keeps its
last ``HISTORY`` watch events (older ones are compacted away, and a watch resuming from before
them is answered 410 Gone, "too old resource version", as the API server answers once its watch
cache has moved on), history shares objects with the store instead of copying them, and a
watcher that falls ``WATCH_BACKLOG`` events behind is closed (its stream ends; the client lists
and watches again), as the API server closes a watcher that does not keep up.
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import itertools
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

from gpuchain.kube.errors import (
    AlreadyExistsError,
    BadRequestError,
    ConflictError,
    EvictionBlockedError,
    GoneError,
    InvalidError,
    KubeError,
    NotFoundError,
)
from gpuchain.kube.kinds import PDB, POD, Kind, kind_of
from gpuchain.kube.objects import Obj, json_copy, labels_of, merge_patch, strategic_merge_patch
from gpuchain.kube.pdb import blocking_budget
from gpuchain.kube.port import Cluster, WatchEvent, WatchType, check_tail_lines, now_rfc3339
from gpuchain.kube.selectors import parse_field_selector, parse_label_selector

_Key = tuple[str | None, str]  # (namespace, name)
_LogKey = tuple[str, str, str, bool]  # (namespace, pod, container, previous)

_PDB_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."

HISTORY = 1_000
"""How many past events of each kind a watch can resume from before the cluster answers 410 Gone."""
WATCH_BACKLOG = 10_000
"""How many undelivered events a watcher may fall behind before its watch is closed."""

_History = collections.deque[tuple[int, WatchEvent, "Obj | None"]]


@dataclass(kw_only=True)
class _Watcher:
    kind: Kind
    namespace: str | None
    matches: Callable[[Obj], bool]
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[WatchEvent | None]
    """Events to deliver; None closes the watch."""


class MemoryCluster(Cluster):
    """An in-memory API server behind the `Cluster` port. ``MemoryCluster(objects)`` preloads."""

    def __init__(self, objects: Iterable[Obj] = ()) -> None:
        super().__init__()
        self._lock = threading.RLock()
        self._store: dict[Kind, dict[_Key, Obj]] = {}
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._history: dict[Kind, _History] = {}
        self._compacted: dict[Kind, int] = {}  # per kind: the newest resourceVersion no longer in history
        self._order: dict[Kind, list[_Key]] = {}  # per kind: keys in list order, dropped on create/delete
        self._watchers: list[_Watcher] = []
        self._logs: dict[_LogKey, str] = {}
        self._served: dict[tuple[str, str, int, str], str] = {}  #: (ns, pod, port, path) -> body
        for obj in objects:
            self.create(obj)
        self.calls.reset()

    # -- internals --------------------------------------------------------------------------

    def _bucket(self, kind: Kind) -> dict[_Key, Obj]:
        return self._store.setdefault(kind, {})

    @staticmethod
    def _key(kind: Kind, name: str, namespace: str | None) -> _Key:
        return (namespace or "default") if kind.namespaced else None, name

    def _next_rv(self) -> str:
        self._last_rv = next(self._rv)
        return str(self._last_rv)

    def _lookup(self, kind: Kind, name: str, namespace: str | None) -> Obj:
        obj = self._bucket(kind).get(self._key(kind, name, namespace))
        if obj is None:
            where = f"{namespace or 'default'}/" if kind.namespaced else ""
            raise NotFoundError(f'{kind.plural} "{where}{name}" not found')
        return obj

    def _emit(self, kind: Kind, type_: WatchType, obj: Obj, old: Obj | None) -> None:
        """Record the event and hand it to the watchers.

        ``obj`` and ``old`` are never changed in place once stored (every write stores a new
        dict), so history keeps them by reference; a watcher gets its own copy.
        """
        event = WatchEvent(type_, obj)
        history = self._history.setdefault(kind, collections.deque())
        history.append((self._last_rv, event, old))
        if len(history) > HISTORY:
            self._compacted[kind] = history.popleft()[0]
        for w in list(self._watchers):
            delivered = self._for_watcher(w, kind, event, old)
            if delivered is None:
                continue
            closing = w.queue.qsize() >= WATCH_BACKLOG
            try:
                w.loop.call_soon_threadsafe(w.queue.put_nowait, None if closing else _copied(delivered))
            except RuntimeError:  # the watcher's loop is closed: it will never read again
                closing = True
            if closing:
                self._watchers.remove(w)

    @staticmethod
    def _for_watcher(w: _Watcher, kind: Kind, event: WatchEvent, old: Obj | None) -> WatchEvent | None:
        """The event as this watcher sees it: objects leaving its selector appear DELETED."""
        if w.kind != kind:
            return None
        obj = event.object
        if w.namespace and kind.namespaced and obj["metadata"].get("namespace") != w.namespace:
            return None
        now = w.matches(obj)
        before = old is not None and w.matches(old)
        if event.type == "MODIFIED":
            if now and not before:
                return WatchEvent("ADDED", obj)
            if before and not now:
                return WatchEvent("DELETED", obj)
        return event if now or before else None

    def _store_new(self, kind: Kind, obj: Obj) -> Obj:
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise InvalidError(f"{kind.kind}: metadata.name is required (or metadata.generateName)")
            meta["name"] = prefix + uuid.uuid4().hex[:5]
        if kind.namespaced:
            meta["namespace"] = meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        key = self._key(kind, meta["name"], meta.get("namespace"))
        bucket = self._bucket(kind)
        if key in bucket:
            raise AlreadyExistsError(f'{kind.plural} "{meta["name"]}" already exists')
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta["generation"] = 1
        meta["resourceVersion"] = self._next_rv()
        bucket[key] = obj
        self._order.pop(kind, None)
        self._emit(kind, "ADDED", obj, None)
        return json_copy(obj)

    def _replace(self, kind: Kind, old: Obj, new: Obj) -> Obj:
        """Store ``new`` in place of ``old`` if they differ (bumping resourceVersion/generation)."""
        if new == old:
            return json_copy(old)
        spec_changed = {k: v for k, v in new.items() if k not in ("metadata", "status")} != {
            k: v for k, v in old.items() if k not in ("metadata", "status")
        }
        meta = new["metadata"]
        for field in ("name", "namespace", "uid", "creationTimestamp"):
            if field in old["metadata"]:
                meta[field] = old["metadata"][field]
        meta["generation"] = int(old["metadata"].get("generation", 1)) + (1 if spec_changed else 0)
        meta["resourceVersion"] = self._next_rv()
        self._bucket(kind)[self._key(kind, meta["name"], meta.get("namespace"))] = new
        self._emit(kind, "MODIFIED", new, old)
        return json_copy(new)

    def _remove(self, kind: Kind, obj: Obj) -> None:
        meta = obj["metadata"]
        del self._bucket(kind)[self._key(kind, meta["name"], meta.get("namespace"))]
        self._order.pop(kind, None)
        self._next_rv()
        gone = json_copy(obj)
        gone["metadata"]["resourceVersion"] = str(self._last_rv)
        self._emit(kind, "DELETED", gone, obj)
        if kind == POD and (self._logs or self._served):
            where = (meta.get("namespace"), meta["name"])
            self._logs = {k: v for k, v in self._logs.items() if k[:2] != where}
            self._served = {k: v for k, v in self._served.items() if k[:2] != where}
        self._collect_dependents(meta.get("uid"))

    def _collect_dependents(self, owner_uid: str | None) -> None:
        """Background garbage collection: delete objects whose ownerReferences name ``owner_uid``."""
        if not owner_uid:
            return
        for kind, bucket in list(self._store.items()):
            for obj in list(bucket.values()):
                refs = obj["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == owner_uid for r in refs):
                    self._remove(kind, obj)

    # -- the port ---------------------------------------------------------------------------

    def get(self, kind: Kind, *, name: str, namespace: str | None = None) -> Obj:
        self.calls.count("get")
        with self._lock:
            return json_copy(self._lookup(kind, name, namespace))

    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        self.calls.count("list")
        return [json_copy(obj) for obj in self._select(kind, namespace, label_selector, field_selector)]

    def list_readonly(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[Obj]:
        """The stored objects themselves: safe to share because no write changes a stored dict
        in place (each write stores a new one), and readers promise not to change them."""
        self.calls.count("list")
        return self._select(kind, namespace, label_selector, field_selector)

    def _select(
        self, kind: Kind, namespace: str | None, label_selector: str | None, field_selector: str | None
    ) -> builtins.list[Obj]:
        """The stored objects a list request matches, in the API server's order (namespace, name)."""
        by_label = parse_label_selector(label_selector)
        by_field = parse_field_selector(field_selector)
        everywhere = not namespace or not kind.namespaced
        with self._lock:
            bucket = self._bucket(kind)
            order = self._order.get(kind)
            if order is None:  # a create or delete since the last list
                order = self._order[kind] = sorted(bucket, key=lambda k: (k[0] or "", k[1]))
            found = [bucket[key] for key in order if everywhere or key[0] == namespace]
        if label_selector:
            found = [obj for obj in found if by_label(labels_of(obj))]
        if field_selector:
            found = [obj for obj in found if by_field(obj)]
        return found

    async def watch(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        resource_version: str | None = None,
        timeout: float | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        self.calls.count("watch")
        by_label = parse_label_selector(label_selector)
        by_field = parse_field_selector(field_selector)
        watcher = _Watcher(
            kind=kind,
            namespace=namespace,
            matches=lambda obj: by_label(labels_of(obj)) and by_field(obj),
            loop=asyncio.get_running_loop(),
            queue=asyncio.Queue(),
        )
        with self._lock:
            initial: list[WatchEvent] = []
            if resource_version in (None, "", "0"):
                for obj in sorted(self._bucket(kind).values(), key=lambda o: int(o["metadata"]["resourceVersion"])):
                    ev = self._for_watcher(watcher, kind, WatchEvent("ADDED", obj), None)
                    if ev is not None:
                        initial.append(_copied(ev))
            else:
                since = int(str(resource_version))
                history = self._history.get(kind, collections.deque())
                compacted = self._compacted.get(kind, 0)
                if since < compacted:  # an event after ``since`` is no longer known
                    oldest = history[0][0] if history else self._last_rv
                    raise GoneError(f"too old resource version: {since} ({oldest})")
                for rv, ev, old in history:
                    if rv > since:
                        seen = self._for_watcher(watcher, kind, ev, old)
                        if seen is not None:
                            initial.append(_copied(seen))
            self._watchers.append(watcher)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for ev in initial:
                yield ev
            while True:
                if deadline is None:
                    event = await watcher.queue.get()
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    try:  # asyncio.timeout: wait_for on Python 3.11 can swallow a cancel (CPython gh-86296)
                        async with asyncio.timeout(remaining):
                            event = await watcher.queue.get()
                    except TimeoutError:
                        return
                if event is None:  # closed for falling behind: the client lists and watches again
                    return
                yield event
        finally:
            with self._lock:
                if watcher in self._watchers:
                    self._watchers.remove(watcher)

    def create(self, obj: Obj) -> Obj:
        self.calls.count("create")
        kind = kind_of(obj)
        with self._lock:
            return self._store_new(kind, json_copy(obj))

    def patch(self, kind: Kind, *, name: str, patch: Obj, namespace: str | None = None) -> Obj:
        self.calls.count("patch")
        body = {k: v for k, v in patch.items() if k != "status"}
        with self._lock:
            old = self._lookup(kind, name, namespace)
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and str(wanted) != old["metadata"]["resourceVersion"]:
                # As the API server: a resourceVersion in a patch is a precondition, not a value to set.
                raise ConflictError(
                    f"{kind.kind} {name}: the object has been modified (resourceVersion "
                    f"{old['metadata']['resourceVersion']}, patch expected {wanted}); read it again and retry"
                )
            return self._replace(kind, old, merge_patch(old, body))

    def patch_status(
        self, kind: Kind, *, name: str, status: Obj, namespace: str | None = None, strategic: bool = False
    ) -> Obj:
        self.calls.count("patch")
        merge = strategic_merge_patch if strategic else merge_patch
        with self._lock:
            old = self._lookup(kind, name, namespace)
            return self._replace(kind, old, merge(old, patch={"status": status}))

    def delete(self, kind: Kind, *, name: str, namespace: str | None = None) -> None:
        self.calls.count("delete")
        with self._lock:
            self._remove(kind, self._lookup(kind, name, namespace))

    def evict(self, name: str, namespace: str) -> None:
        self.calls.count("evict")
        with self._lock:
            pod = self._lookup(POD, name, namespace)
            pdbs = [p for (ns, _), p in self._bucket(PDB).items() if ns == namespace]
            pods = [p for (ns, _), p in self._bucket(POD).items() if ns == namespace]
            blocker = blocking_budget(pod, pdbs=pdbs, pods=pods)
            if blocker is not None:
                raise EvictionBlockedError(namespace, pod=name, pdb=blocker["metadata"]["name"], message=_PDB_MESSAGE)
            self._remove(POD, pod)

    def logs(
        self,
        name: str,
        *,
        namespace: str,
        container: str | None = None,
        tail_lines: int | None = None,
        previous: bool = False,
    ) -> str:
        self.calls.count("logs")
        check_tail_lines(tail_lines)
        with self._lock:
            pod = self._lookup(POD, name, namespace)
            container = _log_container(pod, container)
            key = (namespace, name, container, previous)
            _check_log_status(pod, container, previous)
            if previous and key not in self._logs:
                raise BadRequestError(f'previous terminated container "{container}" in pod "{name}" not found')
            text = self._logs.get(key, "")
        if tail_lines is None:
            return text
        return "".join(text.splitlines(keepends=True)[-tail_lines:] if tail_lines else [])

    def pod_proxy_get(self, name: str, *, namespace: str, port: int, path: str) -> str:
        self.calls.count("proxy")
        with self._lock:
            self._lookup(POD, name, namespace)
            text = self._served.get((namespace, name, port, path.lstrip("/")))
        if text is None:
            # What the API server answers when nothing listens there (its proxy's dial error).
            refused = KubeError(f"error trying to reach service: dial tcp :{port}: connect: connection refused")
            refused.code = 503
            raise refused
        return text

    # -- test and simulator conveniences (not part of the port) ------------------------------

    def set_served(self, name: str, *, namespace: str, port: int, path: str, text: str) -> None:
        """Set what ``pod_proxy_get`` answers for an existing pod's ``port`` and ``path``. Not an
        API request, so not counted; deleting the pod drops it."""
        with self._lock:
            self._lookup(POD, name, namespace)
            self._served[(namespace, name, port, path.lstrip("/"))] = text

    def set_logs(self, name: str, *, namespace: str, container: str, text: str, previous: bool = False) -> None:
        """Set what ``logs()`` answers for a container of an existing pod (``previous``: its last
        terminated run). Not an API request, so not counted; deleting the pod drops its logs."""
        with self._lock:
            pod = self._lookup(POD, name, namespace)
            self._logs[(namespace, name, _log_container(pod, container), previous)] = text

    @property
    def resource_version(self) -> str:
        """The latest resourceVersion handed out (what a List response would carry)."""
        return str(self._last_rv)

    def kinds(self) -> builtins.list[Kind]:
        """Kinds that currently hold at least one object."""
        with self._lock:
            return [k for k, bucket in self._store.items() if bucket]

    def count(self, kind: Kind) -> int:
        """How many objects of ``kind`` exist, without counting an API call."""
        with self._lock:
            return len(self._bucket(kind))

    def snapshot(self, kind: Kind) -> builtins.list[Obj]:
        """Copies of all objects of ``kind``, without counting an API call (for assertions)."""
        with self._lock:
            return [json_copy(o) for o in self._bucket(kind).values()]


def _copied(event: WatchEvent) -> WatchEvent:
    """The event with its own copy of the object, which the receiver may change freely."""
    return WatchEvent(event.type, json_copy(event.object))


#: What the kubelet answers for a container waiting on its image, by the waiting reason (images.ErrImagePull and
#: ErrImagePullBackOff in kubelet_pods.go validateContainerLogStatus@v1.37.2); any other reason is quoted as it is.
_PULL_WAITS = {"ErrImagePull": "image can't be pulled", "ImagePullBackOff": "trying and failing to pull image"}


def _check_log_status(pod: Obj, container: str, previous: bool) -> None:
    """Refuse a log the kubelet has none of, as it does (kubelet_pods.go validateContainerLogStatus@v1.37.2): the
    current log of a container that never ran (waiting with no terminated run before: ContainerCreating,
    PodInitializing, an image pull) and the previous log of one that never ended. The API server answers 400 with the
    kubelet's words, which ``kubectl cluster-info dump`` writes in place of the log. A container the pod's status does
    not list yet is let through: a test's pod often has no status, and a stored log stands for what it ran."""
    status = pod.get("status") or {}
    fields = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")
    entries = [s for f in fields for s in status.get(f) or []]
    entry = next((s for s in entries if s.get("name") == container), None)
    if entry is None:
        return
    pod_name = pod["metadata"]["name"]
    state, last = entry.get("state") or {}, (entry.get("lastState") or {}).get("terminated")
    if previous:
        if last is None:
            raise BadRequestError(f'previous terminated container "{container}" in pod "{pod_name}" not found')
        return
    if "running" in state or "terminated" in state or last is not None:
        return
    reason = str((state.get("waiting") or {}).get("reason") or "")
    if "waiting" not in state:
        raise BadRequestError(f'container "{container}" in pod "{pod_name}" is waiting to start - no logs yet')
    raise BadRequestError(
        f'container "{container}" in pod "{pod_name}" is waiting to start: {_PULL_WAITS.get(reason, reason)}'
    )


def _log_container(pod: Obj, container: str | None) -> str:
    """The container a log request means, checked against the pod's spec as the API server does."""
    spec = pod.get("spec") or {}
    mains = [str(c.get("name")) for c in spec.get("containers") or []]
    others = [str(c.get("name")) for f in ("initContainers", "ephemeralContainers") for c in spec.get(f) or []]
    pod_name = pod["metadata"]["name"]
    if container is None:
        if len(mains) == 1:
            return mains[0]
        raise BadRequestError(f"a container name must be specified for pod {pod_name}, choose one of: {mains}")
    if container not in mains + others:
        raise BadRequestError(f"container {container} is not valid for pod {pod_name}")
    return container
