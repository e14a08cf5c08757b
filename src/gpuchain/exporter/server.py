"""The HTTP face of the exporter: ``/metrics`` and ``/health`` on port 9400 by default.

Scrapes only render what the background collector already holds, so a slow GPU never makes a
scrape slow. The server is one asyncio loop on one thread, built for a node where every
Prometheus replica, an agent and a few curl loops scrape at once, and where a client may connect
and never speak:

- a real listen backlog (``BACKLOG``; the stdlib server's 5 overflowed at 50 scrapers);
- idle and slow connections cost no thread: each waits on the loop, and is closed after
  ``request_timeout`` seconds without a complete request or a drained response;
- at most ``max_connections`` at once, so a flood of idle sockets cannot exhaust file
  descriptors; one more closes the connection that has waited longest for its request (an idle
  keep-alive or a client that never speaks), so a real scrape is served while a flood of idle
  connections is held; only when every connection is in the middle of an answer does the new one
  get ``503``;
- renders are shared: the body is rendered again only when the collector's ``generation``
  moved (a new sample, an XID, a counted error), and scrapes that arrive while a render runs
  (on a worker thread, so the loop keeps accepting) get that render's body, so 50 concurrent
  scrapers between two collections cost one render, not fifty.

HTTP/1.1 keep-alive is honoured (Prometheus reuses its connection); requests have no body.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import signal
import socket
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

from gpuchain.common.numbers import positive_seconds
from gpuchain.exporter.exposition import CONTENT_TYPE, Collects, render

log = logging.getLogger(__name__)

DEFAULT_PORT = 9400
BACKLOG = 1024
"""Pending connections the kernel queues before refusing (capped by net.core.somaxconn)."""
DEFAULT_MAX_CONNECTIONS = 256
DEFAULT_REQUEST_TIMEOUT = 10.0
"""Seconds a connection may take to send a request (or be idle between keep-alive requests),
and to take its response."""
GZIP_LEVEL = 6
"""Compressed once per render; a 56-MIG-device exposition shrinks about tenfold."""
MAX_HEAD = 16 * 1024
"""Largest request line plus headers accepted."""

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


class MetricsSource(Protocol):
    """What the server serves: the exporter's ``GpuMetricsCollector``, or another agent's metrics
    (``gpu-health``'s repair loop) that want the same server instead of a second one."""

    @property
    def registry(self) -> Collects:
        """Rendered on a scrape of ``/metrics``."""
        ...

    @property
    def generation(self) -> Hashable:
        """Changes whenever a scrape's output would; the rendered body is reused while it stays."""
        ...

    def health(self) -> tuple[bool, str]:
        """``/health``: ok, and the reason in words."""
        ...


@dataclass(frozen=True)
class _Body:
    generation: Hashable
    plain: bytes
    gzipped: bytes


class _Render:
    """The rendered metrics, shared: reused while ``generation()`` stays the same, and one render
    in progress serves every scrape that arrives while it runs. Each render is also gzipped once,
    for clients that accept it (Prometheus always does)."""

    def __init__(self, produce: Callable[[], bytes], generation: Callable[[], Hashable]) -> None:
        self._produce = produce
        self._generation = generation
        self._running: asyncio.Future[_Body] | None = None
        self._last: _Body | None = None
        self.renders = 0
        self.waiting = 0
        """Scrapes waiting for the render in progress."""

    async def body(self) -> _Body:
        last = self._last
        if last is not None and last.generation == self._generation():
            return last
        if self._running is None:
            self._running = asyncio.ensure_future(asyncio.to_thread(self._render))
            self.renders += 1
            self._running.add_done_callback(self._done)
        self.waiting += 1
        try:
            return await asyncio.shield(self._running)
        finally:
            self.waiting -= 1

    def _render(self) -> _Body:
        generation = self._generation()  # before rendering: a change during it renders again next time
        plain = self._produce()
        return _Body(generation, plain, gzip.compress(plain, GZIP_LEVEL, mtime=0))

    def _done(self, future: asyncio.Future[_Body]) -> None:
        self._running = None
        if not future.cancelled() and future.exception() is None:
            self._last = future.result()


class MetricsServer:
    """Serves one metrics source (``MetricsSource``); ``port=0`` picks a free port (see ``server_port``).

    Binding happens in the constructor, so a busy port is an OSError there. ``serve_forever()``
    runs the loop on the calling thread until ``shutdown()``; ``start_background()`` runs it on
    a daemon thread.
    """

    def __init__(
        self,
        collector: MetricsSource,
        *,
        host: str = "0.0.0.0",
        port: int = DEFAULT_PORT,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        backlog: int = BACKLOG,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections: must be at least 1, got {max_connections}")
        self.collector = collector
        self.max_connections = max_connections
        self.request_timeout = positive_seconds("request timeout", request_timeout)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family, backlog=backlog)
        self.server_port: int = self.socket.getsockname()[1]
        self.active = 0
        """Connections open now."""
        self.refused = 0
        """Connections turned away with 503: ``max_connections`` were open, none waiting for a request."""
        self.evicted = 0
        """Connections closed while waiting for a request, to make room for a new one at the cap."""
        self._waiting: dict[asyncio.StreamWriter, None] = {}
        """Connections waiting for a request head, longest-waiting first (a dict keeps order)."""
        self._render = _Render(lambda: render(self.collector.registry), lambda: self.collector.generation)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._finished = threading.Event()
        self._finished.set()

    @property
    def renders(self) -> int:
        """How many times the metrics were rendered (scrapes that shared a render count once)."""
        return self._render.renders

    # ---- lifecycle ------------------------------------------------------------------------

    def serve_forever(self, stop_signals: bool = False) -> None:
        """Serve on this thread until ``shutdown()``, or with ``stop_signals`` (main thread only)
        until SIGTERM or SIGINT."""
        self._finished.clear()
        try:
            asyncio.run(self._serve(stop_signals))
        finally:
            self._finished.set()

    def start_background(self) -> threading.Thread:
        """Serve on a daemon thread; returns once it accepts connections."""
        thread = threading.Thread(target=self.serve_forever, daemon=True, name="gpuchain-exporter-http")
        thread.start()
        self._started.wait(10)
        return thread

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop serving (from any thread) and wait until the loop has closed its connections."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        self._finished.wait(timeout)

    def server_close(self) -> None:
        """Close the listening socket."""
        self.socket.close()

    async def _serve(self, stop_signals: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if stop_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, self._stop.set)
        clients: set[asyncio.Task[None]] = set()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            if task is not None:  # tracked so shutdown() can end idle keep-alive connections
                clients.add(task)
                task.add_done_callback(clients.discard)
            await self._connection(reader, writer)

        server = await asyncio.start_server(handle, sock=self.socket, limit=MAX_HEAD)
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            for task in list(clients):
                task.cancel()
            await asyncio.gather(*clients, return_exceptions=True)
            self._started.clear()

    # ---- one connection -------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.active >= self.max_connections:
            if not self._waiting:
                self.refused += 1
                await self._close_with(writer, 503, b"too many connections; try again\n")
                return
            oldest = next(iter(self._waiting))
            del self._waiting[oldest]
            self.evicted += 1
            oldest.transport.abort()  # its reader ends at once; its own task counts it out
        self.active += 1
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass
        except Exception:  # a bug in rendering must cost one connection, never the server
            log.exception("serving a scrape failed")
        finally:
            self.active -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; True when the connection stays open for another."""
        self._waiting[writer] = None
        try:
            async with asyncio.timeout(self.request_timeout):  # cheaper than wait_for: no extra task
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            await self._close_with(writer, 431, b"request head too large\n")
            return False
        except asyncio.IncompleteReadError:
            return False
        finally:
            self._waiting.pop(writer, None)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await self._close_with(writer, 400, b"bad request line\n")
            return False
        method, target, version = parts
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        connection = headers.get("connection", "").lower()
        keep = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
        gzip_ok = "gzip" in headers.get("accept-encoding", "").lower()
        encoding = None
        if method not in ("GET", "HEAD"):
            code, ctype, body = 405, "text/plain; charset=utf-8", b"only GET and HEAD\n"
        else:
            code, ctype, body, encoding = await self._route(target.split("?", 1)[0], gzip_ok)
        self._write(writer, code, ctype, b"" if method == "HEAD" else body, keep, len(body), encoding)
        async with asyncio.timeout(self.request_timeout):
            await writer.drain()
        return keep

    async def _route(self, path: str, gzip_ok: bool) -> tuple[int, str, bytes, str | None]:
        """(status, content type, body, content encoding) for a GET of ``path``."""
        text = "text/plain; charset=utf-8"
        if path == "/metrics":
            body = await self._render.body()
            if gzip_ok:
                return 200, CONTENT_TYPE, body.gzipped, "gzip"
            return 200, CONTENT_TYPE, body.plain, None
        if path == "/health":
            ok, reason = self.collector.health()
            return (200 if ok else 503), text, f"{'OK' if ok else 'KO'}: {reason}\n".encode(), None
        return 404, text, b"not found: try /metrics or /health\n", None

    @staticmethod
    def _write(
        writer: asyncio.StreamWriter,
        code: int,
        ctype: str,
        body: bytes,
        keep: bool,
        length: int | None = None,
        encoding: str | None = None,
    ) -> None:
        coded = f"Content-Encoding: {encoding}\r\nVary: Accept-Encoding\r\n" if encoding else ""
        head = (
            f"HTTP/1.1 {code} {_REASONS.get(code, '')}\r\nContent-Type: {ctype}\r\n{coded}"
            f"Content-Length: {len(body) if length is None else length}\r\n"
            f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + body)

    async def _close_with(self, writer: asyncio.StreamWriter, code: int, body: bytes) -> None:
        self._write(writer, code, "text/plain; charset=utf-8", body, keep=False)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.drain(), 1)
        writer.close()
