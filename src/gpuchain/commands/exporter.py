"""`gpuchain exporter`: DCGM-compatible Prometheus metrics for this node's GPUs (or simulated ones)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

import typer

from gpuchain.agent.build import build, serve_alone
from gpuchain.agent.node import Node, RoleError
from gpuchain.agent.runtime import stop_early
from gpuchain.agent.settings import ExporterSettings, NodeSettings
from gpuchain.commands._agent import nvml_release_dir_option
from gpuchain.commands._backend import (
    BackendKind,
    backend_or_fail,
    preset_option,
    topology_option,
)
from gpuchain.commands._cluster import node_backend_option, open_node_cluster, resolve_backend
from gpuchain.commands._output import LogFormat, configure_logging, fail, log_format_option
from gpuchain.common.numbers import positive_seconds
from gpuchain.exporter import COLLECT_INTERVAL
from gpuchain.exporter.podresources import DEFAULT_SOCKET
from gpuchain.exporter.server import DEFAULT_PORT


def exporter(
    backend: BackendKind | None = node_backend_option(),
    *,
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
    early = stop_early()
    try:
        positive_seconds("--collect-interval", interval)
        positive_seconds("--call-timeout", call_timeout)
    except ValueError as exc:
        fail(str(exc))
    settings = ExporterSettings(
        collectors=collectors,
        interval=interval,
        call_timeout=call_timeout,
        hostname=hostname,
        per_process=per_process,
        pods_from_api=pods_from_api,
    )
    socket_path = pod_resources_socket or (DEFAULT_SOCKET if os.path.exists(DEFAULT_SOCKET) else "")
    node_settings = NodeSettings(
        node_name=os.environ.get("NODE_NAME"),
        release_dir=release_dir,
        pod_resources_socket=socket_path,
        pod_resources_timeout=call_timeout,
        metrics_address=address,
        metrics_port=port,
    )
    gpus = backend_or_fail(resolve_backend(backend).kind, preset=preset, topology=topology)
    node = Node(gpus, settings=node_settings, cluster=lambda: open_node_cluster(hint="or leave out --pods-from-api"))
    try:
        role = build(settings, node)
        try:
            node.serve_metrics()
        except OSError as exc:
            fail(f"cannot listen on {address}:{port}: {exc.strerror or exc}; pick another --port")
        configure_logging(logging.INFO, log_format)
        asyncio.run(serve_alone(role, node=node, component="exporter", early=early))
        sys.stderr.write("stopping\n")
    except RoleError as exc:
        fail(str(exc), code=exc.code)
    finally:
        asyncio.run(node.close())


def register(app: typer.Typer) -> None:
    app.command("exporter")(exporter)
