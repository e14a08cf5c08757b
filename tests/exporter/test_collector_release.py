"""A scrape while the exporter has let go of NVML for a GPU reset neither fails nor lies.

The driver refuses a reset while any process holds NVML (DataDog/datadog-agent#56118: "In use by
another client"), so the exporter lets go (``gpu.nvmlrelease``); meanwhile it serves no GPU sample
instead of old readings passed off as current, says so in ``gpuchain_exporter_nvml_released``,
counts no error and stays healthy.
"""

from __future__ import annotations

from fakes.releasable import ReleasableView

from gpuchain.exporter.collector import GpuMetricsCollector
from gpuchain.exporter.counters import load_collectors
from gpuchain.exporter.exposition import render
from gpuchain.gpu.model import Telemetry
from gpuchain.gpu.sim import SimBackend

COUNTERS = load_collectors()


def _gpu_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]


def _value(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        named = line.startswith(name + "{") or line.startswith(name + " ")
        if named and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_release_leaves_gpu_samples_out_without_an_error_and_they_come_back() -> None:
    view = ReleasableView(SimBackend.from_preset("l4-x2"))
    collector = GpuMetricsCollector(view, counters=COUNTERS, hostname="n", call_timeout=1.0)
    assert collector.collect_once()
    text = render(collector.registry).decode()
    assert len(_gpu_lines(text)) == 2 and _value(text, "gpuchain_exporter_nvml_released") == 0.0

    view.release()
    assert collector.collect_once()
    text = render(collector.registry).decode()
    assert _gpu_lines(text) == []  # no old reading served as current
    assert _value(text, "gpuchain_exporter_nvml_released") == 1.0
    assert _value(text, "gpuchain_exporter_scrape_errors_total", operation="inventory") == 0.0
    assert collector.health()[0]
    assert view.reads_while_released == 0  # it did not even ask

    view.reacquire()
    assert collector.collect_once()
    text = render(collector.registry).decode()
    assert len(_gpu_lines(text)) == 2 and _value(text, "gpuchain_exporter_nvml_released") == 0.0


class _ReleasedMidCycle(ReleasableView):
    """Lets go between the inventory and the telemetry reads (the follower runs on its own thread)."""

    def telemetry(self, gpu_uuid: str) -> Telemetry:
        self.release()
        return super().telemetry(gpu_uuid)


def test_a_release_in_the_middle_of_a_cycle_serves_nothing_old_and_counts_no_error() -> None:
    view = _ReleasedMidCycle(SimBackend.from_preset("l4-x2"))
    collector = GpuMetricsCollector(view, counters=COUNTERS, hostname="n", call_timeout=1.0)
    assert collector.collect_once()
    text = render(collector.registry).decode()
    assert _gpu_lines(text) == []
    assert _value(text, "gpuchain_exporter_scrape_errors_total", operation="telemetry") == 0.0
    assert _value(text, "gpuchain_exporter_nvml_released") == 1.0
    assert view.reads_while_released >= 1


def test_a_release_leaves_the_processes_out_too() -> None:
    sim = SimBackend.from_preset("l4-x2")
    sim.run_process(0, pid=7, memory_mib=1_000, sm_percent=20)
    view = ReleasableView(sim)
    collector = GpuMetricsCollector(
        view, counters=COUNTERS, hostname="n", call_timeout=1.0, processes=True, cgroup_of=lambda pid: None
    )
    assert collector.collect_once()
    assert _value(render(collector.registry).decode(), "gpuchain_gpu_unattributed_processes", gpu="0") == 1.0
    view.release()
    assert collector.collect_once()
    assert collector.usage is None  # nothing old served while NVML is let go
    assert view.reads_while_released == 0
    view.reacquire()
    assert collector.collect_once()
    assert _value(render(collector.registry).decode(), "gpuchain_gpu_unattributed_fb_used_mib", gpu="0") == 1_000
