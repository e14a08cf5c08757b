"""End to end with a real Prometheus server: it scrapes the exporter, and the queries of NVIDIA's
public DCGM Grafana dashboard (grafana.com 12239) return series carrying pod labels.

The chain is real on every hop: SimBackend -> device plugin -> kubelet peer (admission, then
pod-resources over a unix socket) -> exporter (HTTP) -> Prometheus (Debian package, started here
on loopback with its own storage directory) -> Prometheus HTTP API.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuchain.api.config.v1.config import parse_config
from gpuchain.exporter.cgroups import ContainerCgroup
from gpuchain.exporter.collector import GpuMetricsCollector
from gpuchain.exporter.counters import load_collectors
from gpuchain.exporter.podresources import PodResourcesClient, attribute
from gpuchain.exporter.server import MetricsServer
from gpuchain.exporter.usage import PodIdentity
from gpuchain.kubelet.node import start_sim_node
from gpuchain.kubelet.peer import ContainerRequest

PROMETHEUS = shutil.which("prometheus")
HOST = "gpu-node-1"

# The dashboard's panel and variable queries, with its template variables filled in.
DASHBOARD_QUERIES = {
    "GPU Temperature": f'max(DCGM_FI_DEV_GPU_TEMP{{Hostname=~"{HOST}", gpu=~".*"}}) by (Hostname, gpu, uuid)',
    "GPU Avg. Temp": f'avg(DCGM_FI_DEV_GPU_TEMP{{Hostname=~"{HOST}", gpu=~".*"}})',
    "GPU Power Usage": f'max(DCGM_FI_DEV_POWER_USAGE{{Hostname=~"{HOST}", gpu=~".*"}}) by (Hostname, gpu, uuid)',
    "GPU Power Total": f'sum(max(DCGM_FI_DEV_POWER_USAGE{{Hostname=~"{HOST}", gpu=~".*"}}) by (gpu))',
    "GPU SM Clocks": f'max(DCGM_FI_DEV_SM_CLOCK{{Hostname=~"{HOST}", gpu=~".*"}} * 1000000) by (Hostname, UUID, gpu)',
    "GPU Framebuffer Mem Used": (
        f'max(DCGM_FI_DEV_FB_USED{{Hostname=~"{HOST}", gpu=~".*"}}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)'
    ),
    "Hostname variable": "DCGM_FI_DEV_FB_FREE",
    "gpu variable": f'DCGM_FI_DEV_FB_FREE{{Hostname=~"{HOST}"}}',
}
# Panels left empty on purpose: their DCGM profiling fields have no NVML equivalent.
EMPTY_PANELS = {
    "GPU Utilization": (
        f'max(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{Hostname=~"{HOST}", gpu=~".*"}}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)'
    ),
    "Tensor Core Utilization": (
        f'max(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{Hostname=~"{HOST}", gpu=~".*"}}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)'
    ),
}

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="the prometheus binary is not installed (Debian: apt-get install prometheus)"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _api(base: str, path: str, **params: str) -> Any:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())["data"]


async def _query(base: str, expr: str) -> list[dict[str, Any]]:
    data = await asyncio.to_thread(_api, base, "/api/v1/query", query=expr)
    return list(data["result"])


async def _wait_until(base: str, expr: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = await _query(base, expr)
        except OSError:
            result = []
        if result:
            return result
        await asyncio.sleep(0.25)
    raise AssertionError(f"Prometheus returned nothing for {expr} within {timeout}s")


@contextlib.contextmanager
def _prometheus(work: Path, target_port: int) -> Iterator[str]:
    """A real Prometheus scraping ``127.0.0.1:<target_port>`` every second, its config, log and
    data in ``work``; yields its API base URL."""
    assert PROMETHEUS is not None
    (work / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: dcgm-exporter\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n"
    )
    port = _free_port()
    prom: subprocess.Popen[bytes] | None = None
    try:
        with open(work / "prometheus.log", "wb") as log:
            prom = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={work / 'prometheus.yml'}",
                    f"--storage.tsdb.path={work / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        yield f"http://127.0.0.1:{port}"
    finally:
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(10)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()


async def test_prometheus_scrapes_dashboard_series_with_pod_labels(short_dir: Path) -> None:
    config = parse_config("flags: {migStrategy: mixed}")
    node = await start_sim_node("h100-80gb-x8-mig-mixed", config=config)
    pods = PodResourcesClient(str(node.pod_resources_socket))
    collector = GpuMetricsCollector(
        node.backend, counters=load_collectors(), hostname=HOST, pod_lister=pods.list, interval=0.5
    )
    server = MetricsServer(collector, host="127.0.0.1", port=0)
    try:
        await node.kubelet.admit("ml", name="train", containers=[ContainerRequest("trainer", {"nvidia.com/gpu": 1})])
        await node.kubelet.admit(
            "ml", name="infer", containers=[ContainerRequest("server", {"nvidia.com/mig-3g.40gb": 1})]
        )
        collector.start()
        server.start_background()
        with _prometheus(short_dir, server.server_port) as base:
            up = await _wait_until(base, 'up{job="dcgm-exporter"} == 1')
            assert up
            train = await _wait_until(base, 'DCGM_FI_DEV_GPU_UTIL{pod="train"}')

            for title, expr in DASHBOARD_QUERIES.items():
                assert await _wait_until(base, expr), f"dashboard panel {title!r} is empty"

            for title, expr in EMPTY_PANELS.items():
                assert not await _query(base, expr), f"{title!r} would show an NVML reading under a DCGM profiling name"

            gpus = await asyncio.to_thread(_api, base, "/api/v1/label/gpu/values", **{"match[]": "DCGM_FI_DEV_FB_FREE"})
            assert sorted(gpus) == [str(i) for i in range(8)]  # MIG devices (GPUs 0-5) have their own framebuffer

            (series,) = train
            labels = series["metric"]
            assert labels["namespace"] == "ml" and labels["container"] == "trainer"
            assert labels["Hostname"] == HOST and labels["modelName"] == "NVIDIA H100 80GB HBM3"
            assert labels["gpu"] in ("6", "7") and labels["UUID"].startswith("GPU-")
            assert await _query(base, 'DCGM_FI_DEV_FB_USED{pod="train", namespace="ml", container="trainer"}')
            assert await _query(base, 'DCGM_FI_DEV_GPU_TEMP{pod="train"}')
            assert await _query(base, 'DCGM_FI_DEV_POWER_USAGE{pod="train"}')

            (mig,) = await _wait_until(base, 'DCGM_FI_DEV_FB_USED{pod="infer"}')
            assert mig["metric"]["GPU_I_PROFILE"] == "3g.40gb"
            assert mig["metric"]["container"] == "server"
            assert await _query(base, 'DCGM_FI_DEV_FB_FREE{pod="infer", namespace="ml", container="server"}')
            assert not await _query(base, 'DCGM_FI_DEV_GPU_UTIL{pod="infer"}'), "the whole GPU's utilisation"
            assert await _query(base, 'DCGM_FI_DEV_XID_ERRORS{pod="infer", err_code="0"}')
    finally:
        server.shutdown()
        server.server_close()
        collector.stop()
        pods.close()
        await node.stop()


async def test_prometheus_stores_each_time_sliced_pods_own_figures(short_dir: Path) -> None:
    """Three pods on a time-sliced two-GPU node (the real plugin's replica ids through the kubelet
    peer's pod-resources): each one's FB_USED and GPU_UTIL in Prometheus are its own processes',
    and per GPU they sum to at most the GPU's, which the unattributed MPS-server-like process fills."""
    config = parse_config("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}")
    node = await start_sim_node("l4-x2", config=config)
    pods = PodResourcesClient(str(node.pod_resources_socket))
    figures = {"a": (4_000, 30), "b": (2_500, 20), "c": (1_000, 5)}
    for name in figures:
        await node.kubelet.admit("ml", name=name, containers=[ContainerRequest("main", {"nvidia.com/gpu": 1})])
    inventory = node.backend.inventory()
    cgroups: dict[int, ContainerCgroup | None] = {}
    directory: dict[str, PodIdentity] = {}
    gpu_of: dict[str, str] = {}
    rows = await asyncio.to_thread(pods.list)  # the kubelet peer answers on this event loop
    for pid, row in enumerate(sorted(rows, key=lambda r: r.ref.pod), start=100):
        memory, sm = figures[row.ref.pod]
        gpu_of[row.ref.pod] = attribute([row], inventory).popitem()[0]
        node.backend.run_process(gpu_of[row.ref.pod], pid=pid, memory_mib=memory, sm_percent=sm)
        uid = f"{pid:08x}-0000-4000-8000-000000000000"
        cgroups[pid] = ContainerCgroup(uid, f"{pid:064x}")
        directory[uid] = PodIdentity("ml", row.ref.pod, {f"{pid:064x}": "main"})
    assert len(set(gpu_of.values())) < len(gpu_of), "two of the pods share a GPU"
    host_process = 999
    node.backend.run_process(inventory.gpus[0].uuid, pid=host_process, memory_mib=300)
    cgroups[host_process] = None
    collector = GpuMetricsCollector(
        node.backend,
        counters=load_collectors(),
        hostname=HOST,
        pod_lister=pods.list,
        interval=0.5,
        processes=True,
        cgroup_of=cgroups.get,
        pod_directory=lambda: directory,
    )
    server = MetricsServer(collector, host="127.0.0.1", port=0)
    try:
        collector.start()
        server.start_background()
        with _prometheus(short_dir, server.server_port) as base:
            await _wait_until(base, 'up{job="dcgm-exporter"} == 1')
            for pod, (memory, sm) in figures.items():
                (fb,) = await _wait_until(base, f'DCGM_FI_DEV_FB_USED{{pod="{pod}", namespace="ml", container="main"}}')
                assert (fb["metric"]["UUID"], float(fb["value"][1])) == (gpu_of[pod], memory)
                (util,) = await _query(base, f'DCGM_FI_DEV_GPU_UTIL{{pod="{pod}"}}')
                assert float(util["value"][1]) == sm
            per_gpu = await _query(base, 'sum by (UUID) (DCGM_FI_DEV_FB_USED{pod!=""})')
            for row in per_gpu:
                uuid = row["metric"]["UUID"]
                assert float(row["value"][1]) <= (node.backend.telemetry(uuid).memory_used_mib or 0)
            (loose,) = await _query(base, f'gpuchain_gpu_unattributed_fb_used_mib{{UUID="{inventory.gpus[0].uuid}"}}')
            assert float(loose["value"][1]) == 300
    finally:
        server.shutdown()
        server.server_close()
        collector.stop()
        pods.close()
        await node.stop()
