"""The one XID table (src/gpuchain/gpu/xids.yaml) against its sources, and its count-in-window
thresholds as pure functions and inside HealthState.

Sources checked here:
- NVIDIA's XID catalog, "Resolution Bucket (Immediate Action)" column, as transcribed in
  leptonai/gpud components/accelerator/nvidia/xid/catalog_generated.go @ 4a8de33a (rows quoted below);
- NVIDIA/k8s-device-plugin internal/rm/health.go @ 1b826acc (ignoredXids 13, 31, 43, 45, 68, 109);
- the burst: leptonai/gpud components/memory/testdata/dmesg.decode.iso.log @ 4a8de33a, lines 1-12,
  one application fault logged as twelve XID 13 lines within 1.5 ms (timestamps below).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuchain.gpu.health import HealthState
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.xid import (
    BURST_SECONDS,
    HealthPolicy,
    Resolution,
    Threshold,
    default_ignored,
    format_window,
    parse_overrides,
    parse_window,
    policy_from_env,
    source,
    worst,
    xid_table,
)

# (code, mnemonic, immediate action) as NVIDIA's catalog lists them (gpud's transcription, above).
CATALOG_ROWS = [
    (13, "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY", "RESTART_APP"),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP"),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE"),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48"),
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE"),
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU"),
    (74, "NVLINK_ERROR", "WORKFLOW_NVLINK_ERR"),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM"),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "IGNORE"),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP"),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU"),
    (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU"),
    (119, "GSP_RPC_TIMEOUT", "RESET_GPU"),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU"),
    (151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "RESTART_VM"),
]
BURST = [44.283302, 44.283390, 44.283575, 44.283671, 44.283758, 44.283937, 44.284042, 44.284250, 44.284345,
         44.284433, 44.284616, 44.284705]  # fmt: skip
"""2025-01-21T04:41:44,283302 ... 44,284705: the seconds of the twelve XID 13 lines."""


@pytest.mark.parametrize(("code", "mnemonic", "bucket"), CATALOG_ROWS)
def test_rows_carry_nvidia_s_catalog(code: int, mnemonic: str, bucket: str) -> None:
    row = xid_table().describe(code)
    assert (row.mnemonic, row.bucket) == (mnemonic, bucket)


def test_the_file_names_its_source_and_the_plugin_s_skipped_xids() -> None:
    assert source() == "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
    assert default_ignored() == frozenset({13, 31, 43, 45, 68, 109})


def test_buckets_map_to_resolutions() -> None:
    table = xid_table()
    assert table.needs(79) is Resolution.REBOOT_NODE and table.needs(151) is Resolution.REBOOT_NODE
    assert table.needs(48) is table.needs(74) is table.needs(145) is Resolution.RESET_GPU
    assert table.needs(63) is table.needs(92) is Resolution.NONE
    assert table.needs(13) is table.needs(94) is Resolution.RESTART_APP
    for row in table.rows.values():
        if row.bucket == "RESET_GPU":
            assert row.resolution is Resolution.RESET_GPU, row
        if row.bucket in ("RESTART_APP", "IGNORE"):
            assert not row.resolution.repairs, row


def test_windows_parse_and_print() -> None:
    assert [parse_window(w) for w in ("600", "600s", "10m", "1h", "1d", "1.5h")] == [600, 600, 600, 3600, 86400, 5400]
    assert [format_window(s) for s in (600, 3600, 86400, 90, 1.5)] == ["10m", "1h", "1d", "90s", "1.5s"]
    for bad in ("", "0", "-1h", "1w", "h"):
        with pytest.raises(ValueError, match="window"):
            parse_window(bad)


# ---- the count-in-window functions (pure) ---------------------------------------------------------

times_st = st.lists(st.floats(min_value=0, max_value=10_000, allow_nan=False), max_size=40).map(sorted)
threshold_st = st.builds(
    Threshold,
    count=st.integers(1, 8),
    window_s=st.floats(min_value=1.0, max_value=5000.0),
    then=st.sampled_from(list(Resolution)),
)


def _run(threshold: Threshold, times: list[float]) -> tuple[tuple[float, ...], list[bool]]:
    kept: tuple[float, ...] = ()
    reached = []
    for t in times:
        kept = threshold.remember(kept, t)
        reached.append(threshold.reached(kept, t))
    return kept, reached


def _reference(threshold: Threshold, times: list[float], now: float) -> bool:
    """The definition, written plainly: collapse bursts, then count those inside the window."""
    counted: list[float] = []
    for t in times:
        if not counted or t - counted[-1] >= BURST_SECONDS or t - counted[-1] < 0:
            counted.append(t)
        # a burst continues from the last counted occurrence, whether or not it is still in the window
    return sum(1 for t in counted if now - threshold.window_s < t <= now) >= threshold.count


@given(threshold_st, times_st)
def test_memory_is_bounded_by_the_count(threshold: Threshold, times: list[float]) -> None:
    kept, _ = _run(threshold, times)
    assert len(kept) <= threshold.count
    assert list(kept) == sorted(kept)


@given(threshold_st, times_st)
def test_reached_matches_the_definition(threshold: Threshold, times: list[float]) -> None:
    _, reached = _run(threshold, times)
    for i, now in enumerate(times):
        assert reached[i] == _reference(threshold, times[: i + 1], now), (i, now)


@given(threshold_st, times_st, st.floats(min_value=0, max_value=20_000, allow_nan=False))
def test_one_more_occurrence_never_lowers_the_count(threshold: Threshold, times: list[float], gap: float) -> None:
    """Monotone: at any moment, recording one more occurrence cannot un-reach the threshold."""
    kept, _ = _run(threshold, times)
    now = (times[-1] if times else 0.0) + gap
    assert threshold.reached(threshold.remember(kept, now), now) >= threshold.reached(kept, now)


@given(threshold_st, st.floats(min_value=0, max_value=1000))
def test_a_burst_counts_once(threshold: Threshold, start: float) -> None:
    kept, _ = _run(threshold, [start + b - BURST[0] for b in BURST])
    assert len(kept) == 1
    assert threshold.reached(kept, kept[-1]) is (threshold.count == 1)


@given(st.lists(st.sampled_from(list(Resolution)), max_size=5))
def test_worst_is_the_most_disruptive(resolutions: list[Resolution]) -> None:
    chosen = worst(resolutions)
    assert all(chosen.severity >= r.severity for r in resolutions)
    assert chosen in resolutions or (not resolutions and chosen is Resolution.NONE)


@given(st.sampled_from(sorted(xid_table().rows)), st.booleans())
def test_a_repeat_never_needs_less(code: int, repeated: bool) -> None:
    row = xid_table().describe(code)
    assert row.needs(repeated).severity >= row.needs(False).severity


@given(
    st.integers(1, 200),
    st.sampled_from(list(Resolution)),
    st.integers(1, 9),
    st.integers(1, 10_000),
)
def test_overrides_round_trip(code: int, res: Resolution, count: int, window: int) -> None:
    parsed = parse_overrides(f"{code}={res.value}@{count}/{window}s")
    assert parsed[code].threshold == Threshold(count, float(window), res)
    assert parse_overrides(f"{code}={res.value}")[code].resolution is res


# ---- inside HealthState ----------------------------------------------------------------------------


def _xid(xid: int, gpu: str = "GPU-a", mig: str | None = None) -> HealthEvent:
    return HealthEvent(kind=EventKind.XID, gpu_uuid=gpu, xid=xid, mig_uuid=mig)


def test_a_single_109_keeps_the_gpu_and_three_in_an_hour_take_it_out() -> None:
    state = HealthState(policy=HealthPolicy())
    assert not state.apply(_xid(109), 0.0)
    assert not state.apply(_xid(109), 600.0)
    assert state.healthy("GPU-a")
    assert state.apply(_xid(109), 1200.0)
    assert not state.healthy("GPU-a")
    assert state.repeated("GPU-a") == (109,)
    assert "repeated: 3 within 1h: reset-gpu" in (state.reason("GPU-a") or "")


def test_repeats_spread_beyond_the_window_do_not_count() -> None:
    state = HealthState(policy=HealthPolicy())
    for t in (0.0, 3000.0, 6000.0, 9000.0):
        state.apply(_xid(109), t)
    assert state.healthy("GPU-a")


def test_the_real_burst_counts_once() -> None:
    """Five faults, each a burst of twelve XID 13 lines as the driver logs it: 5 within 1h."""
    state = HealthState(policy=HealthPolicy())
    for fault in range(4):
        for t in BURST:
            state.apply(_xid(13), fault * 300.0 + t)
    assert state.healthy("GPU-a")  # 48 lines, four faults
    for t in BURST:
        state.apply(_xid(13), 1200.0 + t)
    assert not state.healthy("GPU-a") and state.repeated("GPU-a") == (13,)


def test_counts_are_per_device() -> None:
    state = HealthState(policy=HealthPolicy())
    state.apply(_xid(109, mig="MIG-1"), 0.0)
    state.apply(_xid(109, mig="MIG-2"), 10.0)
    state.apply(_xid(109, mig="MIG-1"), 20.0)
    assert state.healthy("GPU-a", "MIG-1") and state.healthy("GPU-a", "MIG-2")
    state.apply(_xid(109, mig="MIG-1"), 30.0)
    assert not state.healthy("GPU-a", "MIG-1") and state.healthy("GPU-a", "MIG-2")
    assert state.healthy("GPU-a")


def test_a_recovery_forgets_the_history() -> None:
    state = HealthState(policy=HealthPolicy(), quiet_seconds=0.0)
    for t in (0.0, 10.0, 20.0):
        state.apply(_xid(109), t)
    state.apply(HealthEvent(kind=EventKind.GPU_RECOVERED, gpu_uuid="GPU-a"), 30.0)
    assert state.healthy("GPU-a") and not state.xids and not state.seen
    state.apply(_xid(109), 40.0)
    assert state.healthy("GPU-a")  # one 109 after the reset, not the fourth


def test_a_repeat_on_an_unhealthy_gpu_changes_what_it_needs() -> None:
    state = HealthState(policy=HealthPolicy())
    assert state.apply(_xid(94), 0.0)  # withheld at once (NVIDIA's plugin), restart-app
    assert state.repeated("GPU-a") == ()
    assert not state.apply(_xid(94), 10.0)
    assert state.apply(_xid(94), 20.0)  # third within a day: now it needs a reset
    assert state.repeated("GPU-a") == (94,)


def test_an_xid_a_person_ignores_does_not_escalate() -> None:
    policy = policy_from_env({"DP_DISABLE_HEALTHCHECKS": "109"})
    state = HealthState(policy=policy)
    for t in range(0, 100, 10):
        state.apply(_xid(109), float(t))
    assert state.healthy("GPU-a")
    off = HealthState(policy=policy_from_env({"DP_DISABLE_HEALTHCHECKS": "xids"}))
    for t in range(0, 100, 10):
        off.apply(_xid(109), float(t))
    assert off.healthy("GPU-a")


def test_an_override_switches_escalation_off_or_tightens_it() -> None:
    quiet = HealthState(policy=HealthPolicy().with_overrides(parse_overrides("109=none@3/1h")))
    for t in (0.0, 10.0, 20.0, 30.0):
        quiet.apply(_xid(109), t)
    assert quiet.healthy("GPU-a")
    tight = HealthState(policy=HealthPolicy().with_overrides(parse_overrides("13=reboot@2/10m")))
    tight.apply(_xid(13), 0.0)
    assert tight.healthy("GPU-a")
    tight.apply(_xid(13), 60.0)
    assert not tight.healthy("GPU-a") and tight.repeated("GPU-a") == (13,)


def test_enable_all_counts_every_first_occurrence() -> None:
    state = HealthState(policy=policy_from_env({"DP_ENABLE_HEALTHCHECKS": "all"}))
    state.apply(_xid(13), 0.0)
    assert not state.healthy("GPU-a") and state.repeated("GPU-a") == ()
