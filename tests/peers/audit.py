"""Counting a component's writes on the real API server, from the server's own audit log.

The control plane of peers/apiserver.py logs every write request (see AUDIT_POLICY) as JSON lines.
A test sets a mark, lets the component work, and asks for the writes made since::

    audit = AuditLog(apiserver)
    start = audit.mark()
    run_the_component()
    assert audit.writes(since=start) == []          # or: audit.counts(since=start)[("patch", "nodes", "", user)]

The log also holds every list, get and watch request and each request's answer, so a test can
find what the server refused a role (``audit.refused(start)``), and tell that a controller's passes
happened (``audit.requests(start, verbs=frozenset({"list"}))``) and a zero count is not a component
that stopped working.

A mark is a request of its own (``GET /audit-mark/<token>``) that the log records, and it counts
by each request's RequestReceived line, which the server writes before it acts on the request: a
write the component sent after the start mark came back lies after the start mark's line, and one
whose answer the component had before the end mark was sent lies before the end mark's line. So a
count between two marks is exact, with no sleep and no race against the log's writer.

The controller manager's requests (it runs with the admin kubeconfig, as the tests do) are left
out by their user agent, so a count is the component's own and does not depend on what a
controller happens to do meanwhile.
"""

from __future__ import annotations

import collections
import json
import secrets
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from peers.apiserver import ApiServer

#: The verbs that change what the server stores.
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})

#: User agents whose requests are not the component's: the test control plane's own controllers, and
#: the API server's own upkeep (its endpoint reconciler rewrites default/kubernetes now and then).
CONTROL_PLANE_AGENTS = ("kube-controller-manager/", "kube-apiserver/")


@dataclass(frozen=True)
class Mark:
    """A point in the audit log: the byte offset just after a mark's RequestReceived line."""

    offset: int


@dataclass(frozen=True)
class Request:
    """One request as the audit log recorded it when it arrived."""

    verb: str  #: create, update, patch, delete, deletecollection, list
    resource: str  #: plural, e.g. "nodes", "daemonsets"
    subresource: str  #: "" or e.g. "status", "eviction"
    namespace: str
    name: str
    user: str
    user_agent: str

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        sub = f"/{self.subresource}" if self.subresource else ""
        return f"{self.verb} {self.resource}{sub} {where}{self.name} by {self.user} ({self.user_agent})"


class AuditLog:
    """The writes the API server of ``server`` recorded, between marks a test sets."""

    def __init__(self, server: ApiServer) -> None:
        self._server = server
        self._path = server.audit_log
        # Marks only move forward, so each looks for its line after the last one found (the log
        # holds every test's requests of the session).
        self._scanned = self._path.stat().st_size if self._path.exists() else 0

    def mark(self, timeout: float = 10.0) -> Mark:
        """Set a mark now: make the mark request and wait until the log holds it."""
        token = secrets.token_hex(8)
        uri = f"/audit-mark/{token}"
        ctx = ssl.create_default_context(cafile=str(self._server.ca))
        ctx.load_cert_chain(str(self._server.workdir / "admin.crt"), str(self._server.workdir / "admin.key"))
        try:
            urllib.request.urlopen(self._server.url + uri, context=ctx, timeout=timeout).close()
        except urllib.error.HTTPError as exc:  # 404: there is no such path, which is the point
            if exc.code != 404:
                raise
        deadline = time.monotonic() + timeout
        while True:
            offset = self._scanned
            with self._path.open("rb") as log:
                log.seek(offset)
                for line in log:
                    offset += len(line)
                    if uri.encode() in line and json.loads(line).get("requestURI") == uri:
                        self._scanned = offset
                        return Mark(offset)
            if time.monotonic() > deadline:
                raise AssertionError(f"the audit log {self._path} did not record the mark {uri} in {timeout}s")
            time.sleep(0.02)

    def _events(self, since: Mark, until: Mark | None) -> Iterator[dict[str, Any]]:
        """The audit events between two marks (``until`` None: a mark set now), oldest first,
        without the control plane's own (CONTROL_PLANE_AGENTS)."""
        end = until if until is not None else self.mark()
        with self._path.open("rb") as log:
            log.seek(since.offset)
            lines = log.read(end.offset - since.offset).splitlines()
        for line in lines:
            event = json.loads(line)
            if not str(event.get("userAgent", "")).startswith(CONTROL_PLANE_AGENTS):
                yield event

    def requests(self, since: Mark, until: Mark | None = None, verbs: frozenset[str] = WRITE_VERBS) -> list[Request]:
        """The requests with one of ``verbs`` between two marks (``until`` None: a mark set now),
        oldest first, without the control plane's own (CONTROL_PLANE_AGENTS)."""
        return [
            _request(event)
            for event in self._events(since, until)
            if event.get("stage") == "RequestReceived" and event.get("verb") in verbs
        ]

    def refused(self, since: Mark, until: Mark | None = None) -> list[Request]:
        """The requests the server answered 403 Forbidden between two marks (any verb AUDIT_POLICY
        logs: writes, list, get, watch): what a role lacked."""
        return [
            _request(event)
            for event in self._events(since, until)
            if event.get("stage") == "ResponseComplete" and (event.get("responseStatus") or {}).get("code") == 403
        ]

    def writes(self, since: Mark, until: Mark | None = None) -> list[Request]:
        """The write requests (WRITE_VERBS) between two marks; see ``requests``."""
        return self.requests(since, until)

    def counts(self, since: Mark, until: Mark | None = None) -> collections.Counter[tuple[str, str, str, str]]:
        """The writes between two marks, counted by (verb, resource, subresource, user)."""
        return collections.Counter((w.verb, w.resource, w.subresource, w.user) for w in self.writes(since, until))


def _request(event: dict[str, Any]) -> Request:
    ref = event.get("objectRef") or {}
    return Request(
        verb=str(event["verb"]),
        resource=str(ref.get("resource", "")),
        subresource=str(ref.get("subresource", "")),
        namespace=str(ref.get("namespace", "")),
        name=str(ref.get("name", "")),
        user=str(event.get("user", {}).get("username", "")),
        user_agent=str(event.get("userAgent", "")),
    )
