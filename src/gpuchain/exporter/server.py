"""The HTTP face of the exporter: ``/metrics`` and ``/health`` on port 9400 by default.

Scrapes only render what the background collector already holds, so a slow GPU never makes a
scrape slow; each request runs on its own thread so one slow client does not hold up another.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpuchain.exporter.collector import GpuMetricsCollector
from gpuchain.exporter.exposition import CONTENT_TYPE, render

DEFAULT_PORT = 9400


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, CONTENT_TYPE, render(self.server.collector.registry))
        elif path == "/health":
            ok, reason = self.server.collector.health()
            self._send(200 if ok else 503, "text/plain; charset=utf-8", f"{'OK' if ok else 'KO'}: {reason}\n".encode())
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics or /health\n")

    def _send(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds would flood the log; stay quiet."""


class MetricsServer(ThreadingHTTPServer):
    """Serves one collector; ``port=0`` picks a free port (see ``server_port``)."""

    daemon_threads = True

    def __init__(self, collector: GpuMetricsCollector, host: str = "0.0.0.0", port: int = DEFAULT_PORT) -> None:
        self.collector = collector
        super().__init__((host, port), _Handler)

    def start_background(self) -> threading.Thread:
        """Serve on a daemon thread (tests and embedding); ``shutdown()`` stops it."""
        thread = threading.Thread(target=self.serve_forever, daemon=True, name="gpuchain-exporter-http")
        thread.start()
        return thread
