"""A fault-injecting front for the test control plane's real kube-apiserver.

Components under test talk plain HTTP to the proxy, without credentials (``--server`` / a
kubeconfig-less URL, as the tests' ``LiveCluster.from_url`` and ``RuntimeConfig.server`` do); the
proxy forwards each request over TLS as the admin user, one upstream connection per request, and
streams the answer back (watches included). ``mode`` decides what a request gets instead:

- ``"pass"``: the API server's own answer;
- ``"503"``: HTTP 503 with a Status body, as an API server that lost etcd answers;
- ``"gone"``: every watch is answered as the real API server answers a watch from a compacted
  resourceVersion: HTTP 200 and one ERROR event carrying Status 410 Expired (k8s.io/apiserver's
  cacher ``newErrWatcher``); everything else (lists, gets, writes) passes.

Changing the mode cuts every stream in flight, so a watch opened before the fault meets it. The
proxy counts requests by (method, "watch" | "list" | "get" | ...) for the tests' restart counts.
"""

from __future__ import annotations

import asyncio
import collections
import json
import ssl
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager

from peers.apiserver import ApiServer

MODES = ("pass", "503", "gone")

_GONE_EVENT = (
    json.dumps(
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "too old resource version: 1 (2)",
                "reason": "Expired",
                "code": 410,
            },
        }
    ).encode()
    + b"\n"
)
_UNAVAILABLE = json.dumps(
    {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server is currently unable to handle the request",
        "reason": "ServiceUnavailable",
        "code": 503,
    }
).encode()


def _verb(method: str, target: str) -> str:
    """What a request does, for the counts: watch, list (a collection GET), get, or the method."""
    url = urllib.parse.urlsplit(target)
    query = urllib.parse.parse_qs(url.query)
    if method != "GET":
        return method
    if query.get("watch", [""])[0] in ("true", "1"):
        return "watch"
    parts = [p for p in url.path.split("/") if p]
    # /api/v1/nodes, /api/v1/namespaces/ns/pods, /apis/g/v/plural, /apis/g/v/namespaces/ns/plural
    core = parts[:1] == ["api"]
    base = 2 if core else 3
    rest = parts[base:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    return "list" if len(rest) == 1 else "get"


class FaultProxy:
    """The proxy in front of ``server``, on its own thread and event loop (see the module)."""

    def __init__(self, server: ApiServer) -> None:
        upstream = urllib.parse.urlsplit(server.url)
        self._host, self._port = upstream.hostname or "127.0.0.1", upstream.port or 443
        self._ssl = ssl.create_default_context(cafile=str(server.ca))
        self._ssl.load_cert_chain(str(server.workdir / "admin.crt"), str(server.workdir / "admin.key"))
        self.mode = "pass"
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._streams: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self.url = ""

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.run_until_complete(server.wait_closed())
            self._loop.close()

    def start(self) -> None:
        self._thread.start()
        self._started.wait(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _shutdown(self) -> None:
        """Cut every stream and wait for its handler, so none is left pending when the loop closes."""
        self._cut_all()
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if handlers:
            await asyncio.wait(handlers, timeout=5)

    def set_mode(self, mode: str) -> None:
        """Answer from now on as ``mode`` says, cutting every stream in flight."""
        assert mode in MODES, mode
        self.mode = mode
        self._loop.call_soon_threadsafe(self._cut_all)

    def count(self, *verbs: str) -> int:
        """Requests seen so far that were one of ``verbs``."""
        with self._lock:
            return sum(self.counts[v] for v in verbs)

    def _cut_all(self) -> None:
        for writer in list(self._streams):
            writer.close()
        self._streams.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._streams.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _version = lines[0].split(" ", 2)
            headers = [line.split(":", 1) for line in lines[1:] if line]
            length = next((int(v) for k, v in headers if k.strip().lower() == "content-length"), 0)
            assert not any(k.strip().lower() == "transfer-encoding" for k, _ in headers), "chunked request"
            body = await reader.readexactly(length) if length else b""
            verb = _verb(method, target)
            with self._lock:
                self.counts[verb] += 1
            if self.mode == "503":
                await self._answer(writer, "503 Service Unavailable", _UNAVAILABLE)
                return
            if self.mode == "gone" and verb == "watch":
                await self._answer(writer, "200 OK", _GONE_EVENT)
                return
            up_reader, upstream = await asyncio.open_connection(self._host, self._port, ssl=self._ssl)
            self._streams.add(upstream)
            skip = {"connection", "keep-alive", "proxy-connection", "host", "authorization"}
            kept = [f"{k}:{v}" for k, v in headers if k.strip().lower() not in skip]
            request = [f"{method} {target} HTTP/1.1", f"Host: {self._host}:{self._port}", *kept, "Connection: close"]
            upstream.write(("\r\n".join(request) + "\r\n\r\n").encode("latin-1") + body)
            await upstream.drain()
            while chunk := await up_reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ssl.SSLError):
            pass
        finally:
            for w in (writer, upstream):
                if w is not None:
                    self._streams.discard(w)
                    w.close()

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, status: str, body: bytes) -> None:
        head = (
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()


@contextmanager
def fault_proxy(server: ApiServer) -> Iterator[FaultProxy]:
    """A started ``FaultProxy`` in front of ``server``, stopped on exit."""
    proxy = FaultProxy(server)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
