"""`gpuchain top`: per node, the GPUs, the pods on each and their own memory and SM share."""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import typer
from rich.console import Group
from rich.table import Table

from gpuchain.commands._backend import BackendKind, backend_or_fail, preset_option, topology_option
from gpuchain.commands._cluster import SIMULATED, node_backend_option, resolve_backend
from gpuchain.commands._format import OutputFormat
from gpuchain.commands._output import emit, fail, output_option
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.exporter.exposition import render
from gpuchain.exporter.top import NodeTop, top_view

MAX_SCRAPE_BYTES = 64 * 1024 * 1024
"""The most of an exporter answer read: far above a node's scrape, a bound against a wrong URL."""


def _from_url(url: str, timeout: float) -> list[str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return [resp.read(MAX_SCRAPE_BYTES).decode("utf-8", errors="replace")]
    except (urllib.error.URLError, OSError, ValueError) as exc:
        fail(f"cannot read {url}: {getattr(exc, 'reason', exc)}; is the exporter running there (port 9400)?")


def _from_backend(kind: BackendKind, preset: str | None, topology: str | None) -> list[str]:
    """One collection over this node's GPUs, pod labels from the kubelet's socket when it is there."""
    from gpuchain.exporter.collector import GpuMetricsCollector
    from gpuchain.exporter.counters import load_collectors
    from gpuchain.exporter.expected import gfd_gpu_count
    from gpuchain.exporter.podresources import DEFAULT_SOCKET, PodResourcesClient

    pods = PodResourcesClient(DEFAULT_SOCKET) if os.path.exists(DEFAULT_SOCKET) else None
    gpus = backend_or_fail(kind, preset=preset, topology=topology)
    try:
        collector = GpuMetricsCollector(
            gpus,
            counters=load_collectors(),
            hostname=os.environ.get("NODE_NAME") or socket.gethostname(),
            pod_lister=pods.list if pods else None,
            processes=True,
            expected_gpus=gfd_gpu_count,
        )
        collector.collect_once()
        return [render(collector.registry).decode()]
    finally:
        gpus.close()
        if pods:
            pods.close()


def _from_scenario(name: str) -> list[str]:
    from gpuchain.sim import build, load_scenario
    from gpuchain.sim.usage import node_usage

    try:
        sim = build(load_scenario(name))
    except ConfigFileError as exc:
        fail(str(exc))
    except ValueError as exc:
        fail(f"scenario {name}: {exc}")
    return [render(n.collector.registry).decode() for n in node_usage(sim)]


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _tables(nodes: list[NodeTop], simulated: bool) -> Group:
    tables = []
    for node in nodes:
        exported = "?" if node.gpus_exported is None else str(node.gpus_exported)
        expected = "" if node.gpus_expected is None else f" of {node.gpus_expected} expected ({node.expected_from})"
        title = f"{node.node}: {exported} GPUs answering{expected}" + (f" ({SIMULATED})" if simulated else "")
        table = Table(title=title, title_justify="left")
        for col in ("GPU", "MIG", "Up", "Age s", "Used MiB", "Free MiB", "Pod", "Pod MiB", "SM %", "Procs"):
            table.add_column(col)
        for dev in node.devices:
            up = {True: "yes", False: "NO", None: "-"}[dev.up]
            age = "-" if dev.sample_age_s is None else f"{dev.sample_age_s:.0f}"
            head = [dev.gpu, dev.mig or "-", up, age, _mib(dev.memory_used_mib), _mib(dev.memory_free_mib)]
            rows = [
                (f"{p.namespace}/{p.pod}/{p.container}", _mib(p.memory_mib), _sm(p.sm_percent), str(p.processes))
                for p in dev.pods
            ]
            if dev.unattributed_processes:
                rows.append(("(no pod)", _mib(dev.unattributed_memory_mib), "-", str(dev.unattributed_processes)))
            for i, row in enumerate(rows or [("-", "-", "-", "-")]):
                table.add_row(*(head if i == 0 else [""] * len(head)), *row)
        tables.append(table)
    return Group(*tables)


def _sm(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def top(
    url: str | None = typer.Option(
        None, "--url", help="Read a running exporter's metrics (e.g. http://NODE:9400/metrics) instead."
    ),
    *,
    scenario: str | None = typer.Option(
        None, "--scenario", help="Show a simulated cluster's nodes (gpuchain sim list), e.g. time-sliced."
    ),
    backend: BackendKind | None = node_backend_option(),
    preset: str | None = preset_option(),
    topology: str | None = topology_option(),
    timeout: float = typer.Option(10.0, "--timeout", help="Seconds to wait for the exporter at --url."),
    output: OutputFormat = output_option(),
) -> None:
    """Per node: the GPUs, the pods on each and their own memory and SM share, what no pod owns.

    Reads a running exporter (--url), a simulated scenario (--scenario), or this node's GPUs
    directly (--backend nvml; simulated GPUs by default). Pods' own figures need per-process
    attribution (`gpuchain exporter --per-process`; always on here without --url).
    """
    if url and scenario:
        fail("give --url or --scenario, not both")
    if url:
        texts, simulated = _from_url(url, timeout), False
    elif scenario:
        texts, simulated = _from_scenario(scenario), True
    else:
        choice = resolve_backend(backend)
        texts, simulated = _from_backend(choice.kind, preset, topology), choice.kind is BackendKind.sim
    now = time.time()
    nodes = [n for text in texts for n in top_view(text, now=now)]
    data: dict[str, Any] = {"nodes": nodes, SIMULATED: simulated}
    emit(data, fmt=output, table=lambda: _tables(nodes, simulated))


def register(app: typer.Typer) -> None:
    app.command("top")(top)
