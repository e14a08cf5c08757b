"""The exporter role: DCGM-compatible GPU metrics with pod attribution on the process's metrics endpoint.

Metric names and labels follow dcgm-exporter, so NVIDIA's Grafana dashboard works as is. The
collector samples on threads of its own; scrapes render what it holds (``exporter.server``). The
endpoint is the node's (``Node.serve_metrics``): in the node agent it serves every role's metrics.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Mapping

from gpuchain.agent.node import Node, RoleError
from gpuchain.agent.settings import ExporterSettings
from gpuchain.exporter.collector import GpuMetricsCollector
from gpuchain.exporter.counters import CollectorsFileError, load_collectors
from gpuchain.exporter.expected import gfd_gpu_count
from gpuchain.exporter.usage import PodIdentity, pod_directory
from gpuchain.kube.kinds import POD

log = logging.getLogger("gpuchain.exporter")

NAME = "exporter"


def collector_of(settings: ExporterSettings, node: Node) -> GpuMetricsCollector:
    """The collector the settings describe, not yet started. Raises RoleError for a bad collectors file."""
    try:
        counter_set = load_collectors(settings.collectors)
    except CollectorsFileError as exc:
        raise RoleError(str(exc)) from None
    pods = node.pods()
    hostname = settings.hostname or node.name or socket.gethostname()
    directory = _pods_on(node, hostname) if settings.per_process and settings.pods_from_api else None
    collector = GpuMetricsCollector(
        node.backend,
        counters=counter_set,
        hostname=hostname,
        pod_lister=pods.list if pods else None,
        interval=settings.interval,
        call_timeout=settings.call_timeout,
        processes=settings.per_process,
        pod_directory=directory,
        expected_gpus=gfd_gpu_count,
    )
    for name in counter_set.skipped:
        log.info("%s: %s is not available without DCGM; skipped", counter_set.source, name)
    return collector


def _pods_on(node: Node, hostname: str) -> Callable[[], Mapping[str, PodIdentity]]:
    """A reader of this node's pods by UID, through the API server (one List per collection)."""
    cluster = node.cluster()
    return lambda: pod_directory(cluster.list(POD, field_selector=f"spec.nodeName={hostname}"))


async def run(settings: ExporterSettings, node: Node, stop: asyncio.Event, started: Callable[[], None]) -> None:
    """Collect until ``stop``, serving the metrics on the node's endpoint."""
    collector = collector_of(settings, node)
    collector.start()
    node.metrics.add(NAME, collector)
    try:
        socket_path = node.pods_socket
        attribution = f"pod labels from {socket_path}" if socket_path else "no pod labels (no pod-resources socket)"
        port = node.server.server_port if node.server else node.settings.metrics_port  # the node agent opens it later
        where = f"http://{node.settings.metrics_address}:{port}" if port is not None else "no endpoint"
        simulated = " (simulated)" if node.simulated else ""
        log.info(
            "serving %s/metrics and /health from the %s backend; %s%s", where, node.backend.name, attribution, simulated
        )
        started()
        await stop.wait()
    finally:
        node.metrics.remove(NAME)
        await asyncio.to_thread(collector.stop)
