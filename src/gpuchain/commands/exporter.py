"""`gpuchain exporter`: DCGM-compatible Prometheus metrics for this node's GPUs (or simulated ones)."""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import typer

from gpuchain.commands._agent import nvml_release_dir_option, release_follower
from gpuchain.commands._backend import (
    BackendKind,
    backend_or_fail,
    preset_option,
    topology_option,
)
from gpuchain.commands._cluster import mark, node_backend_option, resolve_backend
from gpuchain.commands._output import LogFormat, configure_logging, fail, log_format_option
from gpuchain.common.numbers import positive_seconds
from gpuchain.exporter import COLLECT_INTERVAL
from gpuchain.exporter.collector import GpuMetricsCollector
from gpuchain.exporter.counters import CollectorsFileError, load_collectors
from gpuchain.exporter.expected import gfd_gpu_count
from gpuchain.exporter.podresources import DEFAULT_SOCKET, PodResourcesClient
from gpuchain.exporter.server import DEFAULT_PORT, MetricsServer
from gpuchain.exporter.usage import PodIdentity, pod_directory
from gpuchain.gpu.nvmlrelease import FollowerThread

log = logging.getLogger("gpuchain.exporter")


def exporter(
    backend: BackendKind | None = node_backend_option(),
    preset: str | None = preset_option(),
    topology: str | None = topology_option(),
    port: int = typer.Option(DEFAULT_PORT, "--port", "-p", min=0, max=65535, help="Port for /metrics and /health."),
    address: str = typer.Option("0.0.0.0", "--address", help="Address to listen on."),
    collectors: Path | None = typer.Option(
        None, "--collectors", "-f", help="Metric set as a dcgm-exporter collectors CSV (default: the packaged set)."
    ),
    interval: float = typer.Option(
        COLLECT_INTERVAL, "--collect-interval", help="Seconds between background collections."
    ),
    call_timeout: float = typer.Option(5.0, "--call-timeout", help="Seconds one NVML or kubelet call may take."),
    pod_resources_socket: str | None = typer.Option(
        None,
        "--pod-resources-socket",
        help=f"Kubelet pod-resources socket for pod labels (default {DEFAULT_SOCKET}, used when it exists).",
    ),
    hostname: str | None = typer.Option(
        None, "--hostname", help="Value of the Hostname label (default $NODE_NAME, else this host's name)."
    ),
    per_process: bool = typer.Option(
        False,
        "--per-process",
        envvar="KUBERNETES_VIRTUAL_GPUS",
        help="Per-pod memory and SM share on shared GPUs from the GPUs' processes (needs hostPID to read "
        "/proc/<pid>/cgroup), as dcgm-exporter's --kubernetes-virtual-gpus (and its environment variable, "
        "so a ClusterPolicy's dcgmExporter.env and hostPID turn it on).",
    ),
    pods_from_api: bool = typer.Option(
        False,
        "--pods-from-api",
        help="With --per-process: name pods by UID from this node's Pod objects (needs RBAC to list pods), "
        "so processes of several pods time-sliced on one GPU are told apart.",
    ),
    release_dir: str = nvml_release_dir_option(),
    log_format: LogFormat = log_format_option(),
) -> None:
    """Serve DCGM-compatible GPU metrics with pod attribution on :9400/metrics.

    Metric names and labels follow dcgm-exporter, so NVIDIA's Grafana dashboard works as is.
    Runs on simulated GPUs by default; use --backend nvml on a GPU node.
    """
    try:
        positive_seconds("--collect-interval", interval)
        positive_seconds("--call-timeout", call_timeout)
    except ValueError as exc:
        fail(str(exc))
    try:
        counter_set = load_collectors(collectors)
    except CollectorsFileError as exc:
        fail(str(exc))
    socket_path = pod_resources_socket or (DEFAULT_SOCKET if os.path.exists(DEFAULT_SOCKET) else None)
    pods = PodResourcesClient(socket_path, timeout=call_timeout) if socket_path else None
    node_name = hostname or os.environ.get("NODE_NAME") or socket.gethostname()
    directory = _pods_on(node_name) if per_process and pods_from_api else None
    gpus = backend_or_fail(resolve_backend(backend).kind, preset, topology)
    collector = GpuMetricsCollector(
        gpus,
        counter_set,
        node_name,
        pod_lister=pods.list if pods else None,
        interval=interval,
        call_timeout=call_timeout,
        processes=per_process,
        pod_directory=directory,
        expected_gpus=gfd_gpu_count,
    )
    try:
        server = MetricsServer(collector, address, port)
    except OSError as exc:
        fail(f"cannot listen on {address}:{port}: {exc.strerror or exc}; pick another --port")
    configure_logging(logging.INFO, log_format)
    collector.start()
    where = f"http://{address}:{server.server_port}"
    attribution = f"pod labels from {socket_path}" if socket_path else "no pod labels (no pod-resources socket)"
    for name in counter_set.skipped:
        log.info("%s: %s is not available without DCGM; skipped", counter_set.source, name)
    line = f"serving {where}/metrics and /health from the {gpus.name} backend; {attribution}"
    log.info(mark(line, resolve_backend(backend)))
    release = release_follower(release_dir, gpus, "exporter")
    releasing = FollowerThread(release).start() if release is not None else None
    try:
        server.serve_forever(stop_signals=True)
        sys.stderr.write("stopping\n")
    finally:
        server.server_close()
        if releasing is not None:
            releasing.stop()
        collector.stop()
        if pods:
            pods.close()
        gpus.close()


def _pods_on(node: str) -> Callable[[], Mapping[str, PodIdentity]]:
    """A reader of this node's pods by UID, through the API server (one List per collection)."""
    from gpuchain.commands._cluster import open_cluster
    from gpuchain.kube import POD

    cluster = open_cluster(hint="or leave out --pods-from-api")
    return lambda: pod_directory(cluster.list(POD, field_selector=f"spec.nodeName={node}"))


def register(app: typer.Typer) -> None:
    app.command("exporter")(exporter)
