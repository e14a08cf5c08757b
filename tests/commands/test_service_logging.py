"""A service's INFO log is its own events: the HTTP client's line per request is DEBUG."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from gpuchain.commands._output import PER_REQUEST_LOGGERS, configure_logging

REQUEST = 'HTTP Request: GET https://127.0.0.1:6443/api/v1/nodes "HTTP/1.1 200 OK"'


@pytest.fixture
def requests_logger() -> Iterator[logging.Logger]:
    """httpx2's logger, its filters put back afterwards (configure_logging adds one)."""
    (name,) = PER_REQUEST_LOGGERS
    logger = logging.getLogger(name)
    kept = list(logger.filters)
    yield logger
    logger.filters[:] = kept


def test_http_requests_are_debug_lines(requests_logger: logging.Logger, caplog: pytest.LogCaptureFixture) -> None:
    configure_logging(logging.INFO)
    configure_logging(logging.INFO)  # a second call adds no second filter
    assert len(requests_logger.filters) == 1
    caplog.set_level(logging.INFO)
    requests_logger.info(REQUEST)
    requests_logger.warning("server closed the connection")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("WARNING", "server closed the connection")]
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    requests_logger.info(REQUEST)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("DEBUG", REQUEST)]
