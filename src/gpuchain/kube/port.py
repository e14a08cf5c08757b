"""The `Cluster` port: the only way gpuchain reads or writes Kubernetes objects.

Adapters implement the primitive verbs (`get`, `list`, `watch`, `create`, `patch`,
`patch_status`, `delete`, `evict`, `logs`); `apply`, `set_condition` and `record_event` are built
on them here, so both adapters share one apply rule (see `gpuchain.kube.objects`), one way to
write a condition and one Event shape.
"""

from __future__ import annotations

import abc
import builtins
import collections
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

from gpuchain.kube.errors import InvalidError, NotFoundError
from gpuchain.kube.kinds import EVENT, Kind, kind_of
from gpuchain.kube.objects import Obj, apply_intent, name_of, namespace_of, needs_apply

WatchType = Literal["ADDED", "MODIFIED", "DELETED"]

#: Verbs that change cluster state; `ApiCalls.writes` sums them.
WRITE_VERBS = frozenset({"create", "patch", "delete", "evict"})


@dataclass(frozen=True)
class WatchEvent:
    """One change seen by a watch. ``object`` is the full object after (or, for DELETED, before) it."""

    type: WatchType
    object: Obj

    @property
    def resource_version(self) -> str | None:
        """The object's resourceVersion at this event (None where the server keeps none, e.g. kmock)."""
        rv = self.object.get("metadata", {}).get("resourceVersion")
        return str(rv) if rv else None


@dataclass(frozen=True)
class ApplyResult:
    """What apply() did: the live object afterwards, and whether it created or changed anything."""

    object: Obj
    changed: bool
    created: bool = False


@dataclass
class ApiCalls:
    """API requests made through one Cluster, per verb (get, list, watch, create, patch, delete, evict, logs)."""

    by_verb: collections.Counter[str] = field(default_factory=collections.Counter)

    def count(self, verb: str) -> None:
        """Record one request."""
        self.by_verb[verb] += 1

    @property
    def total(self) -> int:
        """All requests."""
        return sum(self.by_verb.values())

    @property
    def writes(self) -> int:
        """Requests that change state (create, patch, delete, evict)."""
        return sum(n for verb, n in self.by_verb.items() if verb in WRITE_VERBS)

    def snapshot(self) -> dict[str, int]:
        """A plain copy, e.g. to diff before/after one reconcile."""
        return dict(self.by_verb)

    def reset(self) -> None:
        """Start counting from zero."""
        self.by_verb.clear()


def now_rfc3339() -> str:
    """Current UTC time as Kubernetes writes timestamps (second precision, Z suffix)."""
    import datetime  # here: a device plugin alone, which writes nothing, never loads it

    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_tail_lines(tail_lines: int | None) -> None:
    """Refuse a negative ``tail_lines`` before any request (the API answers 422 for it too)."""
    if tail_lines is not None and tail_lines < 0:
        raise InvalidError(f"tail_lines: must be >= 0 (or None for the whole log), got {tail_lines}")


def _event_order(event: Obj) -> tuple[str, int]:
    """Oldest first: by lastTimestamp (second precision), then resourceVersion when it is numeric."""
    rv = str(event.get("metadata", {}).get("resourceVersion") or "")
    return str(event.get("lastTimestamp", "")), int(rv) if rv.isdigit() else 0


class Cluster(abc.ABC):
    """A Kubernetes API. Sync verbs for everything, plus an async `watch` stream.

    Objects in and out are plain JSON dicts (``apiVersion``/``kind``/``metadata``/...), copies:
    mutating a returned dict never changes the cluster (``list_readonly`` excepted: its objects
    may be shared and must not be changed). Cluster-scoped kinds ignore
    ``namespace``. Every request is counted in ``calls`` by verb.
    """

    def __init__(self) -> None:
        self.calls = ApiCalls()

    # -- primitive verbs (adapters) -------------------------------------------------------------

    @abc.abstractmethod
    def get(self, kind: Kind, *, name: str, namespace: str | None = None) -> Obj:
        """The object, or NotFoundError."""

    @abc.abstractmethod
    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        """Objects of ``kind`` (in ``namespace``, or all namespaces when None) matching the selectors.

        Selectors use the API syntax: ``label_selector="nvidia.com/gpu.present=true"``,
        ``field_selector="spec.nodeName=node-1"``.
        """

    def list_readonly(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[Obj]:
        """``list()`` for a caller that only reads what it gets: the objects may be the adapter's
        own (shared with its store, and with other readers), so changing them is forbidden.

        A real API server hands out fresh objects anyway (each response is decoded anew), so
        adapters answer ``list()``; the in-memory cluster answers its stored objects uncopied,
        which spares a reader of 10,000 nodes and their pods a deep copy of every object per call
        (as client-go's listers share their cache). Counted as one ``list`` request per response.
        An adapter may leave out what no reader of a snapshot looks at, ``metadata.managedFields``
        (the server's record of who wrote which field), a Node's ``status.images``, a Pod's
        ``spec.volumes`` and its containers' ``volumeMounts``, its ``status.podIPs``/``hostIPs``
        (``podIP``/``hostIP`` stay) and its container statuses' ``containerID``, ``imageID``,
        ``volumeMounts`` and ``started``, its containers' probes' handlers and termination-message and pull
        policies, its conditions' timestamps, its ``qosClass`` and ``startTime`` and the defaults
        the API server fills into its spec (DNS policy, scheduler name, service account, service
        links, preemption policy, grace period): the live one does (`gpuchain.kube.live`), and
        reads in pages.
        """
        return self.list(kind, namespace=namespace, label_selector=label_selector, field_selector=field_selector)

    @abc.abstractmethod
    def watch(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        resource_version: str | None = None,
        timeout: float | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Stream changes. Without ``resource_version`` it starts with an ADDED event per existing
        object (as the API does); with one, only later changes. Ends after ``timeout`` seconds of
        total watching (None: until the consumer stops iterating).

        The selectors are ``list``'s. An agent that follows one Node passes
        ``field_selector="metadata.name=<node>"``: the server then sends only that Node's events
        (not every Node's on a large cluster), and RBAC can limit the watch to that one name.
        An object that stops matching a selector is seen as DELETED.
        """

    @abc.abstractmethod
    def create(self, obj: Obj) -> Obj:
        """Create ``obj``; AlreadyExistsError if the name is taken. Returns the stored object."""

    @abc.abstractmethod
    def patch(self, kind: Kind, *, name: str, patch: Obj, namespace: str | None = None) -> Obj:
        """JSON merge patch (RFC 7386): dicts merge, lists replace, ``None`` deletes a key.

        ``{"metadata": {"labels": {"a": "1", "b": None}}}`` sets label a and removes label b.
        A ``metadata.resourceVersion`` in the patch is a precondition: ConflictError if the object
        changed since it was read (use it when the patch replaces a list read earlier, e.g. taints).
        The status subresource is not touched; use patch_status for that.
        """

    @abc.abstractmethod
    def patch_status(
        self, kind: Kind, *, name: str, status: Obj, namespace: str | None = None, strategic: bool = False
    ) -> Obj:
        """Patch ``.status`` through the status subresource: a JSON merge patch, or with
        ``strategic=True`` a strategic merge patch, where ``status.conditions`` merges by ``type``
        (one condition set, every other writer's kept; see objects.strategic_merge_patch).

        Strategic merge is for built-in kinds (Node, Pod): an API server answers 415 for custom
        resources, which MemoryCluster does not imitate.
        """

    @abc.abstractmethod
    def delete(self, kind: Kind, *, name: str, namespace: str | None = None) -> None:
        """Delete the object; NotFoundError if it does not exist."""

    @abc.abstractmethod
    def evict(self, name: str, namespace: str) -> None:
        """Evict a pod through the Eviction API (PodDisruptionBudgets honoured).

        Raises EvictionBlockedError naming the budget when it allows no disruption now.
        """

    @abc.abstractmethod
    def logs(
        self,
        name: str,
        *,
        namespace: str,
        container: str | None = None,
        tail_lines: int | None = None,
        previous: bool = False,
    ) -> str:
        """A pod container's log, as ``kubectl logs [-c container] [--tail N] [--previous]`` prints it.

        ``container`` may be left out for a pod with one container. ``previous`` reads the last
        terminated instance (a crash-looping container's earlier run). NotFoundError for an unknown
        pod; BadRequestError for a container the pod lacks, a pod with several containers and none
        named, or ``previous`` when the container never restarted. Counted as verb ``logs`` (a read).
        """

    @abc.abstractmethod
    def pod_proxy_get(self, name: str, *, namespace: str, port: int, path: str) -> str:
        """What a pod serves on ``port`` at ``path``, through the API server's pod proxy
        (``GET /api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/{path}``, the ``get`` verb of
        ``pods/proxy``): how the doctor reads an exporter's ``/metrics`` with no network route to the
        node. NotFoundError for an unknown pod; KubeError with the code for a pod that does not
        answer. Counted as verb ``proxy`` (a read)."""

    # -- built on the verbs -------------------------------------------------------------------

    def get_or_none(self, kind: Kind, *, name: str, namespace: str | None = None) -> Obj | None:
        """get() that answers None instead of raising NotFoundError."""
        try:
            return self.get(kind, name=name, namespace=namespace)
        except NotFoundError:
            return None

    def apply(self, obj: Obj, *, live: Obj | None = None, known_live: bool = False) -> ApplyResult:
        """Create ``obj`` or merge it onto the live object, writing only if something differs.

        The comparison is "are the desired fields already there" (see objects.is_subset), so an
        unchanged reconcile makes zero writes. Pass ``live`` (with ``known_live=True``; ``live``
        None then means "absent") when the caller already listed the objects, to skip the get.
        """
        kind = kind_of(obj)
        name, namespace = name_of(obj), namespace_of(obj)
        current = live if known_live else self.get_or_none(kind, name=name, namespace=namespace)
        if current is None:
            return ApplyResult(self.create(apply_intent(obj)), changed=True, created=True)
        if not needs_apply(obj, current):
            return ApplyResult(current, changed=False)
        intent = apply_intent(obj)
        intent["metadata"].pop("name", None)
        intent["metadata"].pop("namespace", None)
        return ApplyResult(self.patch(kind, name=name, patch=intent, namespace=namespace), changed=True)

    def set_condition(self, kind: Kind, *, name: str, condition: Obj, namespace: str | None = None) -> Obj:
        """Upsert one ``status.conditions`` entry (matched on ``type``) without rewriting the others.

        One strategic-merge status patch, no read first: a condition another writer (the kubelet's
        Ready heartbeat) sets at the same moment is kept, which rewriting the whole list through a
        merge patch could lose. The caller owns the condition's fields, lastTransitionTime included.
        Built-in kinds only (see patch_status).
        """
        if not condition.get("type") or not condition.get("status"):
            raise InvalidError(f"condition: needs 'type' and 'status', got {sorted(condition)}")
        return self.patch_status(
            kind, name=name, status={"conditions": [condition]}, namespace=namespace, strategic=True
        )

    def record_event(
        self,
        regarding: Obj,
        *,
        reason: str,
        message: str,
        type: Literal["Normal", "Warning"] = "Normal",
        component: str = "gpuchain",
    ) -> Obj:
        """Create a core/v1 Event about ``regarding`` (shown by ``kubectl describe``).

        Events of cluster-scoped objects (Nodes, ClusterPolicy) go to the ``default`` namespace,
        as kubelet and controllers do.
        """
        namespace = namespace_of(regarding) or "default"
        meta = regarding.get("metadata", {})
        stamp = now_rfc3339()
        involved = {
            "apiVersion": regarding.get("apiVersion"),
            "kind": regarding.get("kind"),
            "name": meta.get("name"),
        }
        if namespace_of(regarding):
            involved["namespace"] = namespace
        if meta.get("uid"):
            involved["uid"] = meta["uid"]
        import secrets  # here: hashlib and OpenSSL's libcrypto (0.5-3 MiB), for a writer of Events only

        event = {
            "apiVersion": EVENT.api_version,
            "kind": EVENT.kind,
            "metadata": {"name": f"{meta.get('name', 'object')}.{secrets.token_hex(8)}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": type,
            "source": {"component": component},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        return self.create(event)

    def events_for(self, regarding: Obj) -> builtins.list[Obj]:
        """Events recorded about ``regarding`` (by kind and name), oldest first."""
        namespace = namespace_of(regarding) or "default"
        name, kind = name_of(regarding), regarding.get("kind")
        found = [
            e
            for e in self.list(EVENT, namespace=namespace)
            if e.get("involvedObject", {}).get("name") == name and e.get("involvedObject", {}).get("kind") == kind
        ]
        return sorted(found, key=_event_order)
