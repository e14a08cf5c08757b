"""The DRA plugin's metrics: prepare/unprepare latency histograms by result, and the node's devices
per state (available, prepared, tainted, withdrawn, withheld), as a Prometheus scrape reads them."""

from __future__ import annotations

from dataclasses import replace

import pytest
from dra.conftest import NODE, Allocate, DriverFactory
from prometheus_client.parser import text_string_to_metric_families

from gpuchain.dra.driver import ClaimRef, DraDriver
from gpuchain.dra.errors import PrepareError
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.allocator import ALLOCATOR_LABEL, DEVICE_PLUGIN
from gpuchain.kube.memory import MemoryCluster


def scrape(driver: DraDriver) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape by (name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(driver.metrics.prometheus())
        for s in family.samples
    }


def devices(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    return {dict(labels)["state"]: v for (name, labels), v in samples.items() if name == "gpuchain_dra_devices"}


def test_latencies_by_result_and_devices_by_state(
    h100_sim: SimBackend, make_driver: DriverFactory, allocate: Allocate
) -> None:
    driver = make_driver(h100_sim)
    driver.publish()
    ref = allocate("train", NODE, ["gpu-1"])
    driver.prepare(ref)
    driver.prepare(ref)  # again: answered from the checkpoint, observed again
    with pytest.raises(PrepareError):
        driver.prepare(ClaimRef("default", "no-such-uid", "missing"))
    driver.on_event(h100_sim.inject_xid(3, xid=48, message="double-bit ECC"))
    samples = scrape(driver)
    count = "gpuchain_dra_prepare_seconds_count"
    assert samples[(count, (("node", NODE), ("result", "ok")))] == 2
    assert samples[(count, (("node", NODE), ("result", "error")))] == 1
    assert samples[("gpuchain_dra_unprepare_seconds_count", (("node", NODE), ("result", "ok")))] == 0
    inf = ("gpuchain_dra_prepare_seconds_bucket", (("le", "+Inf"), ("node", NODE), ("result", "ok")))
    assert samples[inf] == 2
    assert devices(samples) == {"available": 6, "prepared": 1, "tainted": 0, "withdrawn": 1, "withheld": 0}
    driver.unprepare(ref)
    samples = scrape(driver)
    assert samples[("gpuchain_dra_unprepare_seconds_count", (("node", NODE), ("result", "ok")))] == 1
    assert devices(samples)["prepared"] == 0 and devices(samples)["available"] == 7


def test_tainted_and_withheld_devices(h100_sim: SimBackend, make_driver: DriverFactory, cluster: MemoryCluster) -> None:
    driver = make_driver(h100_sim)
    driver.config = replace(driver.config, device_taints=True)
    driver.taints_served = True
    driver.publish()
    driver.on_event(h100_sim.inject_xid(3, xid=48, message="double-bit ECC"))
    assert devices(scrape(driver))["tainted"] == 1
    node = cluster.create(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {ALLOCATOR_LABEL: DEVICE_PLUGIN}}}
    )
    driver.node_changed(node)
    assert devices(scrape(driver)) == {"available": 0, "prepared": 0, "tainted": 0, "withdrawn": 0, "withheld": 8}
    ok, why = driver.metrics.health()
    assert ok and "withheld 8" in why
