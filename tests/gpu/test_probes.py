"""Health inputs beyond XIDs: row remapping, retired pages, NVLink error counters and a lost GPU,
read through the backend port (the NVML adapter over the fake pynvml, and the simulator), turned
into probes by pure rules, published by gpu-health and acted on by the repair loop.

Limits are DCGM's (NVIDIA/DCGM common/DcgmGPUHardwareLimits.h @ 28bfbd4c and 72fa3fea): 63 retired pages,
1 NVLink replay/recovery error, 100 CRC errors per second. NVML calls and their constants are
pynvml's (nvmlDeviceGetRetiredPages(handle, cause), nvmlDeviceGetRetiredPagesPendingStatus,
nvmlDeviceGetNvLinkErrorCounter(handle, link, NVML_NVLINK_ERROR_DL_*)).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.fake_pynvml import nvml_over
from hypothesis import given
from hypothesis import strategies as st

from gpuchain.gpu.errors import GpuLostError
from gpuchain.gpu.probes import (
    PROBE_TABLE,
    HealthReadings,
    NvLinkCounters,
    ProbeLimits,
    ProbeState,
    dbe_rate_trips,
    instant,
    nvlink_trips,
    probe_resolution,
)
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.xid import Resolution
from gpuchain.kube.kinds import NODE
from gpuchain.kube.memory import MemoryCluster
from gpuchain.remediation.gpuloop import needs_repair
from gpuchain.remediation.model import FAULTS_ANNOTATION, decode_faults
from gpuchain.remediation.publisher import GpuHealthPublisher
from gpuchain.sim.remediation import node_object


def links(*counts: tuple[int, int, int, int]) -> tuple[NvLinkCounters, ...]:
    return tuple(NvLinkCounters(i, *c) for i, c in enumerate(counts))


def test_instant_probes() -> None:
    assert instant(HealthReadings(uuid="g")) == ()
    assert instant(HealthReadings(uuid="g", retired_pages_pending=True)) == ("retired-pages-pending",)
    # DCGM's own cases (modules/health/tests/DcgmHealthWatchTests.cpp @ 72fa3fea,
    # MonitorMemSbeDbeRetiredPages): 30 + 30 passes, 30 + 33 (the limit) and 40 + 30 fail
    assert instant(HealthReadings(uuid="g", retired_pages_sbe=30, retired_pages_dbe=30)) == ()
    assert instant(HealthReadings(uuid="g", retired_pages_sbe=30, retired_pages_dbe=33)) == ("retired-pages-limit",)
    assert instant(HealthReadings(uuid="g", retired_pages_sbe=40, retired_pages_dbe=30)) == ("retired-pages-limit",)
    assert instant(HealthReadings(uuid="g", retired_pages_sbe=62)) == ()
    assert ProbeLimits().retired_pages == 63  # DCGM_LIMIT_MAX_RETIRED_PAGES
    assert instant(HealthReadings(uuid="g", retired_pages_dbe=5), ProbeLimits(retired_pages=5)) == (
        "retired-pages-limit",
    )


def test_nvlink_rules() -> None:
    before = HealthReadings(uuid="g", nvlink=links((0, 0, 0, 0), (3, 1, 10, 10)))
    assert (
        nvlink_trips(before, after=HealthReadings(uuid="g", nvlink=links((0, 0, 0, 0), (3, 1, 10, 10))), seconds=30)
        == ()
    )
    assert nvlink_trips(
        before, after=HealthReadings(uuid="g", nvlink=links((0, 1, 0, 0), (3, 1, 10, 10))), seconds=30
    ) == ("nvlink-recovery",)
    assert nvlink_trips(
        before, after=HealthReadings(uuid="g", nvlink=links((1, 0, 0, 0), (3, 1, 10, 10))), seconds=30
    ) == ("nvlink-errors",)
    crc = HealthReadings(uuid="g", nvlink=links((0, 0, 1500, 1500), (3, 1, 10, 10)))
    assert nvlink_trips(before, after=crc, seconds=30) == ("nvlink-errors",)  # 100 per second
    assert nvlink_trips(before, after=crc, seconds=31) == ()
    reset = HealthReadings(uuid="g", nvlink=links((0, 0, 0, 0), (0, 0, 0, 0)))
    assert nvlink_trips(before, after=reset, seconds=30) == ()  # counters went down: a reset, not errors


counter = st.integers(0, 10_000)
link_st = st.tuples(counter, counter, counter, counter)


@given(st.lists(link_st, min_size=1, max_size=4))
def test_counters_that_do_not_rise_trip_nothing(start: list[tuple[int, int, int, int]]) -> None:
    """Monotone: equal or lower counters (a reset) never trip an NVLink probe, whatever the interval."""
    before = HealthReadings(uuid="g", nvlink=links(*start))
    lower = HealthReadings(uuid="g", nvlink=links(*[tuple(v // 2 for v in c) for c in start]))
    for seconds in (0.0, 0.5, 30.0):
        assert nvlink_trips(before, after=before, seconds=seconds) == ()
        assert nvlink_trips(before, after=lower, seconds=seconds) == ()


def test_a_counter_probe_holds_for_its_window_then_clears() -> None:
    state = ProbeState(limits=ProbeLimits(hold_s=600))
    quiet = HealthReadings(uuid="g", nvlink=links((0, 0, 0, 0)))
    bumped = HealthReadings(uuid="g", nvlink=links((0, 2, 0, 0)))
    assert state.check(quiet, 0.0) == ()
    assert state.check(bumped, 30.0) == ("nvlink-recovery",)
    assert state.check(bumped, 60.0) == ("nvlink-recovery",)  # no new errors, still within the hold
    assert state.check(bumped, 629.0) == ("nvlink-recovery",)
    assert state.check(bumped, 631.0) == ()
    state.check(HealthReadings(uuid="g", nvlink=links((0, 3, 0, 0))), 700.0)
    state.forget("g")  # the GPU was reset
    assert state.check(HealthReadings(uuid="g", nvlink=links((0, 0, 0, 0))), 710.0) == ()


def test_every_probe_is_in_the_docs_table_with_its_resolution() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "remediation.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in doc.splitlines() if line.startswith("| `")}
    for name, probe in PROBE_TABLE.items():
        assert f"`{probe.resolution.value}`" in rows[name], name


def test_probe_resolutions() -> None:
    assert probe_resolution("row-remap-pending") is Resolution.RESET_GPU
    assert probe_resolution("retired-pages-pending") is Resolution.RESET_GPU
    assert probe_resolution("nvlink-recovery") is Resolution.RESET_GPU
    assert probe_resolution("retired-pages-limit") is Resolution.NONE
    assert probe_resolution("nvlink-errors") is Resolution.NONE
    assert probe_resolution("from-a-newer-version") is Resolution.RESET_GPU


# ---- through the port: NVML over the fake pynvml, and the simulator ------------------------------


def test_nvml_reads_what_the_simulator_reports(h100_sim: SimBackend) -> None:
    nvml = nvml_over(h100_sim)
    uuid = h100_sim.inventory().gpu(2).uuid
    clean = nvml.health_readings(uuid)
    assert clean == h100_sim.health_readings(uuid)
    assert clean.retired_pages_pending is None and clean.retired_pages is None  # H100 remaps rows instead
    assert len(clean.nvlink) == 18 and all(c == NvLinkCounters(c.link, 0, 0, 0, 0) for c in clean.nvlink)
    h100_sim.set_telemetry(2, row_remap_pending=1)
    h100_sim.set_health_readings(2, retired_pages_pending=True, retired_pages_sbe=3, retired_pages_dbe=1)
    h100_sim.add_nvlink_errors(2, link=5, recovery=1, crc_flit=7)
    read = nvml.health_readings(uuid)
    assert read == h100_sim.health_readings(uuid)
    assert read.row_remap_pending and read.retired_pages_pending and read.retired_pages == 4
    assert read.nvlink[5] == NvLinkCounters(5, 0, 1, 7, 0)
    assert "nvmlDeviceGetNvLinkErrorCounter" in nvml._nvml.calls  # type: ignore[attr-defined]


def test_a_reset_clears_pending_retirement_and_link_counters_but_not_retired_pages(h100_sim: SimBackend) -> None:
    h100_sim.set_health_readings(1, retired_pages_pending=True, retired_pages_dbe=2)
    h100_sim.add_nvlink_errors(1, link=0, replay=4)
    h100_sim.reset_gpu(1)
    after = h100_sim.health_readings(h100_sim.inventory().gpu(1).uuid)
    assert not after.retired_pages_pending and after.retired_pages == 2
    assert after.nvlink[0] == NvLinkCounters(0, 0, 0, 0, 0)


def test_unsupported_counters_read_as_none_and_a_lost_gpu_raises(h100_sim: SimBackend) -> None:
    nvml = nvml_over(h100_sim, unsupported=frozenset({"nvmlDeviceGetNvLinkErrorCounter", "nvmlDeviceGetRemappedRows"}))
    uuid = h100_sim.inventory().gpu(0).uuid
    read = nvml.health_readings(uuid)
    # A GPU answering neither the error counters nor NVLink5 field values (an H100 has none) reads no links;
    # Blackwell's field values: tests/gpu/test_nvlink_fields.py.
    assert read.nvlink == () and read.row_remap_pending is None
    h100_sim.lose_gpu(0)
    with pytest.raises(GpuLostError):
        nvml.health_readings(uuid)


def test_a_pcie_gpu_has_no_nvlink_counters() -> None:
    l4 = SimBackend.from_preset("l4-x2")
    uuid = l4.inventory().gpu(0).uuid
    assert l4.health_readings(uuid).nvlink == () == nvml_over(l4).health_readings(uuid).nvlink


# ---- published, and what the loop makes of it -----------------------------------------------------


class Clock:
    t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_gpu_health_publishes_each_input_with_its_resolution(h100_sim: SimBackend) -> None:
    cluster = MemoryCluster([node_object("n0")])
    clock = Clock()
    publisher = GpuHealthPublisher(nvml_over(h100_sim), cluster=cluster, node_name="n0", clock=clock)
    publisher.publish()
    gpu = {i: h100_sim.inventory().gpu(i).uuid for i in range(4)}
    h100_sim.set_health_readings(1, retired_pages_pending=True)
    h100_sim.add_nvlink_errors(2, link=3, recovery=1)
    h100_sim.set_health_readings(3, retired_pages_sbe=63)
    clock.t += 30
    publisher.publish()
    node = cluster.get(NODE, name="n0")
    faults = decode_faults(node["metadata"]["annotations"][FAULTS_ANNOTATION])
    assert faults[gpu[1]].probes == ("retired-pages-pending",) and needs_repair(faults[gpu[1]])
    assert faults[gpu[2]].probes == ("nvlink-recovery",) and needs_repair(faults[gpu[2]])
    assert faults[gpu[3]].probes == ("retired-pages-limit",) and not needs_repair(faults[gpu[3]])
    assert faults[gpu[3]].harmless  # reported for a person: no eviction, no reset
    assert gpu[0] not in faults


WEEK = 604800.0


@pytest.mark.parametrize(
    ("now", "week_ago", "trips"),
    [
        # DCGM's own cases (modules/health/tests/DcgmHealthWatchTests.cpp @ 72fa3fea,
        # MonitorMemSbeDbeRetiredPages with DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT 15)
        (20, 5, True),  # above the soft limit, 15 more within the week: DCGM_FR_RETIRED_PAGES_DBE_LIMIT
        (20, 19, False),  # exactly one more within the week
        (20, None, False),  # no sample a week old: no verdict
        (15, 0, False),  # at the soft limit, not above it
    ],
)
def test_dbe_retirements_past_the_soft_limit_trip_by_their_weekly_rise(
    now: int, week_ago: int | None, trips: bool
) -> None:
    assert dbe_rate_trips(now, week_ago=week_ago) is trips
    state = ProbeState()
    if week_ago is not None:
        state.check(HealthReadings(uuid="g", retired_pages_dbe=week_ago), 0.0)
    found = state.check(HealthReadings(uuid="g", retired_pages_dbe=now), WEEK)
    assert ("retired-pages-dbe-rate" in found) is trips


def test_the_dbe_rate_compares_with_the_count_a_week_earlier_and_survives_a_reset() -> None:
    state = ProbeState()
    assert state.check(HealthReadings(uuid="g", retired_pages_dbe=10), 0.0) == ()
    assert state.check(HealthReadings(uuid="g", retired_pages_dbe=16), 1000.0) == ()  # under a week of history
    state.reset("g", 2000.0)  # the count lives in the InfoROM: the history stays
    assert state.check(HealthReadings(uuid="g", retired_pages_dbe=17), WEEK) == ("retired-pages-dbe-rate",)  # 17 - 10
    assert state.check(HealthReadings(uuid="g", retired_pages_dbe=17), WEEK + 999.0) == ("retired-pages-dbe-rate",)
    assert state.check(HealthReadings(uuid="g", retired_pages_dbe=17), WEEK + 1000.0) == ()  # 17 - 16: one in the week
    assert state.dbe_history["g"] == [(1000.0, 16), (WEEK, 17)]  # older changes are dropped
    state.forget("g")
    assert "g" not in state.dbe_history
    assert probe_resolution("retired-pages-dbe-rate") is Resolution.NONE


def test_gpu_health_publishes_the_dbe_rate_a_week_on_as_a_fault_the_loop_leaves_alone() -> None:
    """A T4 (page retirement is reported before Ampere) through the NVML adapter over the fake pynvml,
    published by the real publisher: 20 double-bit retirements, 5 of them a week earlier (DCGM's
    failing case above)."""
    t4 = SimBackend.from_preset("t4-x4")
    cluster = MemoryCluster([node_object("n0")])
    clock = Clock()
    publisher = GpuHealthPublisher(nvml_over(t4), cluster=cluster, node_name="n0", clock=clock)
    t4.set_health_readings(1, retired_pages_dbe=5)
    publisher.publish()
    t4.set_health_readings(1, retired_pages_dbe=20)
    clock.t += WEEK
    publisher.publish()
    faults = decode_faults(cluster.get(NODE, name="n0")["metadata"]["annotations"][FAULTS_ANNOTATION])
    (fault,) = faults.values()
    assert fault.probes == ("retired-pages-dbe-rate",) and fault.action is Resolution.NONE
    assert not needs_repair(fault) and fault.gpu == t4.inventory().gpu(1).uuid
