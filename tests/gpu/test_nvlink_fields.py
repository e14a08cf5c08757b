"""NVLink health on Blackwell and later (NVLink5), where NVML no longer answers
nvmlDeviceGetNvLinkErrorCounter and reports link errors as field values instead.

Sources (facts and values, not code):
- NVIDIA/go-nvml gen/nvml/nvml.h @ 2f9e261f: NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY/RECOVERY/CRC "This
  is unsupported for Blackwell+. Please use NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_*"; the
  NVML_FI_DEV_NVLINK_COUNT_* fields (201-225) take the link in scopeId; the BER packing
  (bits 0-7 exponent, 8-11 mantissa); each nvmlFieldValue_t carries its own nvmlReturn.
- NVIDIA/DCGM @ 72fa3fea: modules/health/DcgmHealthWatch.cpp (MonitorNVLink5Fields fails on any
  rise of the NVLink5 error counters and link-recovery events; MonitorNVLinkErrorFields fails on
  failed recoveries), common/DcgmUtilities.cpp IsEffectiveBerThresholdExceeded (1e-12),
  common/DcgmGPUHardwareLimits.h DCGM_SYMBOL_BER_FLOOR_EXP_AGGREGATED 238, and the raw BER values
  DCGM's own tests use: testing/python3/tests/test_health.py (4095 healthy, 2573 = 10e-13 passes,
  2829 = 11e-13 fails, 1000 = 3e-232 fails), test_field_values.py (73710 = 15e-238, a healthy
  B200's aggregate symbol BER), modules/health/tests/DcgmHealthWatchTests.cpp ((15 << 8) | 237 fails
  on Blackwell), common/tests/DcgmUtilitiesTests.cpp (the effective BER edge cases).
"""

from __future__ import annotations

import pytest
from fakes.fake_pynvml import FakeNvml, GpuHandle, nvml_over
from pynvml import (
    NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER,
    NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS,
    NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS,
)

from gpuchain.common.schema import validate
from gpuchain.gpu.errors import NotSupportedError
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.probes import (
    BER_ZERO,
    NVLINK5_ERRORS,
    Ber,
    HealthReadings,
    NvLinkCounters,
    ProbeState,
    effective_ber_exceeded,
    instant,
    nvlink_ber,
    nvlink_trips,
    probe_resolution,
    symbol_ber_exceeded,
)
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import Topology
from gpuchain.gpu.xid import Resolution
from gpuchain.kube.kinds import NODE
from gpuchain.kube.memory import MemoryCluster
from gpuchain.remediation.gpuloop import needs_repair
from gpuchain.remediation.model import FAULTS_ANNOTATION, decode_faults
from gpuchain.remediation.publisher import GpuHealthPublisher
from gpuchain.sim.remediation import node_object


@pytest.fixture
def b200_sim() -> SimBackend:
    """An HGX B200 node: eight B200 (compute capability 10.0, 18 NVLinks each) on NVSwitch."""
    return SimBackend(
        validate(
            Topology,
            {
                "node": "b200-node",
                "driver": {"version": "570.148.08", "cudaVersion": "12.8"},
                "interconnect": "nvswitch",
                "gpus": [{"model": "B200", "count": 8}],
            },
        )
    )


def calls(nvml: NvmlBackend) -> list[str]:
    fake = nvml._nvml
    assert isinstance(fake, FakeNvml)
    return fake.calls


# ---- the BER encoding and DCGM's limits, on DCGM's own raw values ---------------------------------


@pytest.mark.parametrize(
    ("raw", "ber"),
    [(4095, Ber(15, 255)), (73710 & 0xFFF, Ber(15, 238)), (2573, Ber(10, 13)), (2829, Ber(11, 13)), (0, Ber(0, 0))],
)
def test_ber_unpacks_as_nvml_packs_it(raw: int, ber: Ber) -> None:
    assert Ber.from_raw(raw) == ber and ber.raw == raw


def test_a_healthy_b200s_aggregate_symbol_ber_unpacks_to_the_floor() -> None:
    # 73710 sets bits above the mantissa: NVML_NVLINK_ERROR_COUNTER_BER_GET masks them off.
    assert Ber.from_raw(73710) == Ber(15, 238) and str(Ber.from_raw(73710)) == "15e-238"


@pytest.mark.parametrize(
    ("ber", "fails"),
    [
        (BER_ZERO, False),
        (Ber(9, 13), False),
        (Ber(1, 12), False),
        (Ber.from_raw(2573), False),
        (Ber(2, 12), True),
        (Ber.from_raw(2829), True),
        (Ber(1, 11), True),
    ],
)
def test_effective_ber_limit_is_dcgms(ber: Ber, fails: bool) -> None:
    assert effective_ber_exceeded(ber) is fails


@pytest.mark.parametrize(
    ("ber", "fails"),
    [
        (Ber.from_raw(73710), False),  # a healthy B200's aggregate
        (Ber(0, 0), False),  # zero mantissa: no errors
        (Ber(0, 5), False),
        (Ber(15, 237), True),  # DcgmHealthWatchTests: worse than the Blackwell floor
        (Ber.from_raw(1000), True),  # test_health.py's error value, 3e-232
        (Ber(1, 13), True),
    ],
)
def test_aggregate_symbol_ber_floor_is_dcgms(ber: Ber, fails: bool) -> None:
    assert symbol_ber_exceeded(ber) is fails


# ---- the rules: what DCGM treats as a failure trips a probe -----------------------------------


def nvlink5_links(**counts: int) -> tuple[NvLinkCounters, ...]:
    """Two NVLink5 links: link 0 clean, link 1 with ``counts``."""
    zero = dict.fromkeys((*NVLINK5_ERRORS, "recovery", "recovery_failed"), 0)
    return (NvLinkCounters(0, **zero), NvLinkCounters(1, **{**zero, **counts}))


@pytest.mark.parametrize("counter", NVLINK5_ERRORS)
def test_any_rise_of_an_nvlink5_error_counter_trips_nvlink_errors(counter: str) -> None:
    before = HealthReadings(uuid="g", nvlink=nvlink5_links())
    after = HealthReadings(uuid="g", nvlink=nvlink5_links(**{counter: 1}))
    assert nvlink_trips(before, after=after, seconds=30.0) == ("nvlink-errors",)
    assert nvlink_trips(after, after=after, seconds=30.0) == ()  # a count that stays is not a new fault
    assert nvlink_trips(after, after=before, seconds=30.0) == ()  # a count that went down was reset


@pytest.mark.parametrize("counter", ["recovery", "recovery_failed"])
def test_a_link_recovery_event_trips_nvlink_recovery(counter: str) -> None:
    before = HealthReadings(uuid="g", nvlink=nvlink5_links())
    after = HealthReadings(uuid="g", nvlink=nvlink5_links(**{counter: 1}))
    assert nvlink_trips(before, after=after, seconds=30.0) == ("nvlink-recovery",)
    assert probe_resolution("nvlink-recovery") is Resolution.RESET_GPU


def test_ber_trips_on_the_gpus_aggregate_only() -> None:
    assert nvlink_ber(HealthReadings(uuid="g")) == ()  # before Blackwell: no BER at all
    healthy = HealthReadings(uuid="g", nvlink_symbol_ber=Ber.from_raw(73710), nvlink_effective_ber=BER_ZERO)
    assert nvlink_ber(healthy) == ()
    assert nvlink_ber(HealthReadings(uuid="g", nvlink_effective_ber=Ber.from_raw(2829))) == ("nvlink-ber",)
    assert nvlink_ber(HealthReadings(uuid="g", nvlink_symbol_ber=Ber(15, 237))) == ("nvlink-ber",)
    # One link's BER has no public limit (DCGM judges the aggregate): reported, trips nothing.
    bad_link = (NvLinkCounters(0, symbol_ber=Ber(9, 3), effective_ber=Ber(9, 3)),)
    assert nvlink_ber(HealthReadings(uuid="g", nvlink=bad_link)) == ()
    assert probe_resolution("nvlink-ber") is Resolution.NONE


def test_ber_is_not_an_instant_probe_so_both_burn_ins_agree() -> None:
    """Neither burn-in has an NVLink BER check: the simulator's judges ``instant``, so it stays out."""
    assert instant(HealthReadings(uuid="g", nvlink_effective_ber=Ber(9, 3))) == ()


def test_probe_state_holds_nvlink5_counter_trips_and_follows_the_ber() -> None:
    state = ProbeState()
    quiet = HealthReadings(uuid="g", nvlink=nvlink5_links(), nvlink_effective_ber=BER_ZERO)
    assert state.check(quiet, 0.0) == ()
    symbols = HealthReadings(uuid="g", nvlink=nvlink5_links(symbol_errors=3), nvlink_effective_ber=Ber(2, 12))
    assert state.check(symbols, 30.0) == ("nvlink-ber", "nvlink-errors")
    calmer = HealthReadings(uuid="g", nvlink=nvlink5_links(symbol_errors=3), nvlink_effective_ber=Ber(1, 12))
    assert state.check(calmer, 60.0) == ("nvlink-errors",)  # the rate is back under; the rise is held


# ---- through the port: the NVML adapter over the fake pynvml, against the simulator ---------------


def test_blackwell_reads_field_values_in_one_call_per_gpu(b200_sim: SimBackend) -> None:
    nvml = nvml_over(b200_sim)
    uuid = b200_sim.inventory().gpu(4).uuid
    before = len(calls(nvml))
    clean = nvml.health_readings(uuid)
    made = calls(nvml)[before:]
    assert made.count("nvmlDeviceGetFieldValues") == 1
    assert "nvmlDeviceGetNvLinkErrorCounter" not in made  # compute capability 10 decides: not asked at all
    assert clean == b200_sim.health_readings(uuid)
    assert len(clean.nvlink) == 18
    link = clean.nvlink[0]
    assert (link.replay, link.crc_flit, link.crc_data) == (None, None, None)  # unsupported for Blackwell+
    assert link.recovery == link.symbol_errors == link.rx_errors == 0 and link.effective_ber == BER_ZERO
    assert clean.nvlink_symbol_ber == Ber.from_raw(73710) and clean.nvlink_effective_ber == BER_ZERO


def test_blackwell_link_errors_and_bers_come_through_per_link(b200_sim: SimBackend) -> None:
    nvml = nvml_over(b200_sim)
    uuid = b200_sim.inventory().gpu(1).uuid
    b200_sim.add_nvlink_errors(1, link=7, recovery=2, recovery_failed=1, symbol_errors=5, link_integrity_errors=1)
    b200_sim.set_nvlink_ber(1, link=7, symbol=Ber(3, 200))
    b200_sim.set_nvlink_ber(1, effective=Ber.from_raw(2829))
    read = nvml.health_readings(uuid)
    assert read == b200_sim.health_readings(uuid)
    assert read.nvlink[7] == NvLinkCounters(
        7,
        recovery=2,
        recovery_failed=1,
        symbol_errors=5,
        effective_errors=0,
        rx_errors=0,
        rx_malformed=0,
        rx_buffer_overrun=0,
        rx_remote_errors=0,
        rx_general_errors=0,
        link_integrity_errors=1,
        symbol_ber=Ber(3, 200),
        effective_ber=BER_ZERO,
    )
    assert read.nvlink[6].symbol_errors == 0
    assert read.nvlink_effective_ber == Ber(11, 13)


def test_a_field_the_driver_does_not_report_reads_as_none(b200_sim: SimBackend) -> None:
    fake = FakeNvml(b200_sim)
    fake.unsupported_fields = frozenset(
        {NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS, NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER}
    )
    nvml = NvmlBackend(nvml=fake)
    b200_sim.add_nvlink_errors(0, link=2, symbol_errors=4, recovery=1)
    read = nvml.health_readings(b200_sim.inventory().gpu(0).uuid)
    assert read.nvlink[2].symbol_errors is None and read.nvlink[2].recovery == 1
    assert read.nvlink[2].effective_ber is None and read.nvlink_effective_ber is None
    assert read.nvlink_symbol_ber == Ber.from_raw(73710)


def test_a_link_reporting_no_field_is_left_out_and_no_field_values_reads_no_links(b200_sim: SimBackend) -> None:
    uuid = b200_sim.inventory().gpu(0).uuid
    fake = FakeNvml(b200_sim)
    fake.unsupported_fields = frozenset(range(201, 226))
    assert NvmlBackend(nvml=fake).health_readings(uuid).nvlink == ()
    nothing = nvml_over(b200_sim, unsupported=frozenset({"nvmlDeviceGetFieldValues"}))
    read = nothing.health_readings(uuid)
    assert read.nvlink == () and read.nvlink_symbol_ber is None and read.nvlink_effective_ber is None


class _LegacyZeros(FakeNvml):
    """A driver that answers the pre-Blackwell NVLink error counters with zeros on Blackwell too,
    instead of NOT_SUPPORTED (nvml.h only says they are "unsupported for Blackwell+")."""

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: GpuHandle, link: int, counter: int) -> int:
        self._enter("nvmlDeviceGetNvLinkErrorCounter")
        self._gpu(handle)
        return 0


def test_blackwell_is_read_from_field_values_whatever_the_old_counters_answer(b200_sim: SimBackend) -> None:
    """NVLink5 is decided by compute capability (10 and later, as DCGM's IsGpuBlackwellOrNewer), not
    by whether the first link's old counters answer: zeros there must not hide the NVLink5 fields."""
    fake = _LegacyZeros(b200_sim)
    nvml = NvmlBackend(nvml=fake)
    uuid = b200_sim.inventory().gpu(2).uuid
    b200_sim.add_nvlink_errors(2, link=3, symbol_errors=6, recovery=1)
    before = len(fake.calls)
    read = nvml.health_readings(uuid)
    made = fake.calls[before:]
    assert made.count("nvmlDeviceGetFieldValues") == 1 and "nvmlDeviceGetNvLinkErrorCounter" not in made
    assert read == b200_sim.health_readings(uuid)
    assert (read.nvlink[3].symbol_errors, read.nvlink[3].recovery, read.nvlink[3].replay) == (6, 1, None)
    assert read.nvlink_symbol_ber == Ber.from_raw(73710)


def test_hopper_is_read_as_before_without_field_values(h100_sim: SimBackend) -> None:
    nvml = nvml_over(h100_sim)
    uuid = h100_sim.inventory().gpu(2).uuid
    h100_sim.add_nvlink_errors(2, link=5, recovery=1, crc_flit=7)
    before = len(calls(nvml))
    read = nvml.health_readings(uuid)
    made = calls(nvml)[before:]
    assert "nvmlDeviceGetFieldValues" not in made
    assert made.count("nvmlDeviceGetNvLinkErrorCounter") == 18 * 4
    assert read.nvlink[5] == NvLinkCounters(5, 0, 1, 7, 0)
    assert read.nvlink_symbol_ber is None and read.nvlink_effective_ber is None
    with pytest.raises(NotSupportedError):
        h100_sim.add_nvlink_errors(2, link=5, symbol_errors=1)  # NVLink4 has no such counter
    with pytest.raises(NotSupportedError):
        h100_sim.set_nvlink_ber(2, effective=Ber(1, 3))


def test_the_fake_answers_nvlink5_fields_per_field_as_nvml_does(b200_sim: SimBackend, h100_sim: SimBackend) -> None:
    """The call succeeds; each value has its own status: NOT_SUPPORTED on a GPU without NVLink5, an
    error for a link the GPU does not have, and the sum over links for scopeId UINT_MAX."""
    import pynvml

    b200_sim.add_nvlink_errors(3, link=0, recovery=1)
    b200_sim.add_nvlink_errors(3, link=17, recovery=2)
    blackwell, hopper = FakeNvml(b200_sim), FakeNvml(h100_sim)
    for fake in (blackwell, hopper):
        fake.nvmlInit()
    ids = [
        (NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS, 17),
        (NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS, 0xFFFFFFFF),
        (NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS, 18),
    ]
    got = blackwell.nvmlDeviceGetFieldValues(blackwell.nvmlDeviceGetHandleByIndex(3), ids)
    assert [v.nvmlReturn for v in got] == [pynvml.NVML_SUCCESS, pynvml.NVML_SUCCESS, pynvml.NVML_ERROR_INVALID_ARGUMENT]
    assert [v.value.ullVal for v in got[:2]] == [2, 3] and [v.scopeId for v in got] == [17, 0xFFFFFFFF, 18]
    old = hopper.nvmlDeviceGetFieldValues(hopper.nvmlDeviceGetHandleByIndex(3), ids[:1])
    assert old[0].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(pynvml.NVMLError_NotSupported):
        blackwell.nvmlDeviceGetNvLinkErrorCounter(
            blackwell.nvmlDeviceGetHandleByIndex(3), 0, pynvml.NVML_NVLINK_ERROR_DL_REPLAY
        )


def test_a_reset_clears_nvlink5_counters_and_bers(b200_sim: SimBackend) -> None:
    b200_sim.add_nvlink_errors(5, link=1, symbol_errors=9)
    b200_sim.set_nvlink_ber(5, effective=Ber(5, 9))
    b200_sim.reset_gpu(5)
    after = b200_sim.health_readings(b200_sim.inventory().gpu(5).uuid)
    assert after.nvlink[1].symbol_errors == 0 and after.nvlink_effective_ber == BER_ZERO


# ---- published by gpu-health, and what the repair loop makes of it ----------------------------------


class Clock:
    t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_gpu_health_publishes_blackwell_nvlink_faults(b200_sim: SimBackend) -> None:
    cluster = MemoryCluster([node_object("n0")])
    clock = Clock()
    publisher = GpuHealthPublisher(nvml_over(b200_sim), cluster=cluster, node_name="n0", clock=clock)
    publisher.publish()
    gpu = {i: b200_sim.inventory().gpu(i).uuid for i in range(4)}
    b200_sim.add_nvlink_errors(1, link=4, recovery=1)
    b200_sim.add_nvlink_errors(2, link=9, symbol_errors=1)
    b200_sim.set_nvlink_ber(3, effective=Ber.from_raw(2829))
    clock.t += 30
    publisher.publish()
    faults = decode_faults(cluster.get(NODE, name="n0")["metadata"]["annotations"][FAULTS_ANNOTATION])
    assert faults[gpu[1]].probes == ("nvlink-recovery",) and needs_repair(faults[gpu[1]])
    assert faults[gpu[2]].probes == ("nvlink-errors",) and not needs_repair(faults[gpu[2]])
    assert faults[gpu[3]].probes == ("nvlink-ber",) and faults[gpu[3]].harmless
    assert gpu[0] not in faults
