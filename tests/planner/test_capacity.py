"""Whole GPU vs MIG vs time-slicing: the chapter's A100 table, the recommendation and its edges."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuchain.gpu import catalog
from gpuchain.gpu.errors import InvalidConfigError
from gpuchain.planner import (
    MIB,
    Isolation,
    IsolationNeed,
    Option,
    Plan,
    PlanInputError,
    PlanRequest,
    Sharing,
    Workload,
    max_instances,
    parse_memory,
    plan,
    resolve_gpu,
)

GB = 1000**3


def _plan(gpu: str = "a100-40gb", memory: str = "3GiB", qps: float = 60, **kwargs: object) -> Plan:
    work = Workload(parse_memory(memory) / MIB, qps)
    return plan(PlanRequest(gpu=resolve_gpu(gpu), workload=work, **kwargs))  # type: ignore[arg-type]


def _option(p: Plan, label: str) -> Option:
    return next(o for o in p.options if o.label == label)


def _label(o: Option) -> str:
    return f"{o.instances_per_gpu} x {o.label}" if o.sharing is Sharing.MIG else o.label


def test_chapter_table_a100_40gb_3gib_model_60_qps() -> None:
    p = _plan()
    whole, mig, ts = _option(p, "whole GPU"), _option(p, "MIG 1g.5gb"), _option(p, "time-slicing x10")

    # A whole GPU: 1 instance, 60 QPS, 3 GB of 40 GB used, 92.5% wasted, isolated by exclusivity.
    assert (whole.instances_per_gpu, whole.qps_per_gpu) == (1, 60)
    assert 1 - whole.memory_utilisation == pytest.approx(0.925)
    assert whole.isolation is Isolation.EXCLUSIVE

    # B MIG 1g.5gb: 7 x 60 = 420 QPS, hardware isolation, ~2 GB headroom per slice (5 GB - 3 GB by the
    # profile's name; the slice really has 4864 MiB, so 1792 MiB = 1.88 GB is left).
    assert (mig.instances_per_gpu, mig.qps_per_gpu) == (7, 420)
    assert mig.isolation is Isolation.HARDWARE
    assert mig.resource == "nvidia.com/mig-1g.5gb"
    assert mig.headroom_mib == 4864 - 3072
    assert round(mig.headroom_mib * MIB / GB) == 2

    # C time-slicing x10: 10 nominal instances, 600 nominal QPS, 30 GB of the 40 GB pool, no isolation.
    assert (ts.instances_per_gpu, ts.qps_per_gpu, ts.qps_nominal) == (10, 600, True)
    assert ts.isolation is Isolation.NONE
    assert ts.instances_per_gpu * p.model_memory_mib == 30 * 1024
    assert ts.memory_per_instance_mib == 4 * 1024  # the "grows past 4 GB" share
    assert "one tenant's OOM takes the shared pool" in ts.risk_detail
    assert "the other 9 fail with CUDA OOM" in ts.risk_detail

    # The three cross-checks: B is 7x A (the slice count); C has 43% more instances than B.
    assert mig.qps_per_gpu / whole.qps_per_gpu == 7
    assert round((ts.instances_per_gpu / mig.instances_per_gpu - 1) * 100) == 43


def test_decimal_3gb_model_leaves_about_2gb_per_slice() -> None:
    mig = _option(_plan(memory="3GB"), "MIG 1g.5gb")
    assert mig.instances_per_gpu == 7
    assert mig.headroom_mib * MIB / GB == pytest.approx(2.1, abs=0.01)


def test_hard_isolation_recommends_seven_1g5gb_slices_and_says_why() -> None:
    p = _plan()
    rec = p.recommendation
    assert rec is not None
    assert (rec.label, rec.sharing, rec.profile) == ("7 x MIG 1g.5gb", Sharing.MIG, "1g.5gb")
    assert "420 QPS per GPU, 7x a whole GPU (60 QPS)" in rec.reason
    assert "1.75 GiB of headroom" in rec.reason
    assert "time-slicing x10 (600 nominal QPS) is ruled out by --isolation hard" in rec.reason
    assert "nvidia.com/mig.config=all-1g.5gb" in rec.setup
    assert "nvidia.com/mig-1g.5gb: 1" in rec.setup
    assert p.summary == "Recommended: 7 x MIG 1g.5gb - 420 QPS per GPU, hardware isolation."


def test_soft_isolation_recommends_time_slicing_with_its_risk() -> None:
    p = _plan(isolation=IsolationNeed.SOFT)
    rec = p.recommendation
    assert rec is not None
    assert rec.sharing is Sharing.TIME_SLICING
    assert "600 nominal QPS per GPU" in rec.reason
    assert "43% more instances than 7 x MIG 1g.5gb (420 QPS)" in rec.reason
    assert "no memory isolation" in rec.reason
    assert "replicas: 10" in rec.setup
    assert "PriorityClass" in rec.setup


def test_fleet_totals_multiply_per_gpu_figures() -> None:
    p = _plan(gpus=16)
    mig = _option(p, "MIG 1g.5gb")
    assert (mig.total_instances, mig.total_qps) == (112, 6720)
    assert p.summary.endswith("; 112 instances, 6720 QPS on 16 GPUs.")


def test_model_larger_than_the_gpu_gets_a_clear_answer() -> None:
    p = _plan(memory="50GiB")
    assert p.fitting == ()
    assert p.recommendation is None
    assert p.summary.startswith("Nothing fits: the 50 GiB model is larger than the 40 GiB of one A100-40GB.")
    assert all(f"{key}," in p.summary or f"{key})" in p.summary for key in ("A100-80GB", "H100-80GB", "H200-141GB"))
    assert _option(p, "whole GPU").why_not == "the 50 GiB model is larger than the 40 GiB GPU"
    assert _option(p, "MIG 1g.5gb").why_not == "the 50 GiB model is larger than the 4.75 GiB slice"
    assert all(o.instances_per_gpu == 0 and o.qps_per_gpu == 0 for o in p.options)


def test_model_larger_than_every_card() -> None:
    p = _plan(gpu="h200-141gb", memory="400GiB")
    assert "no catalogued card holds it whole" in p.summary


def test_too_many_time_sliced_replicas_do_not_fit_and_say_how_many_would() -> None:
    p = _plan(memory="5GiB")
    ts = _option(p, "time-slicing x10")
    assert not ts.fits
    assert (
        ts.why_not
        == "10 replicas x 5 GiB = 50 GiB do not fit in 4 GiB shares of the 40 GiB GPU; at most 8 replicas fit"
    )
    assert not _option(p, "MIG 1g.5gb").fits
    assert p.recommendation is not None
    assert p.recommendation.label == "4 x MIG 1g.10gb"


def test_time_slicing_share_is_whole_mib_so_headroom_never_goes_negative() -> None:
    card = catalog.model("A100-40GB")
    p = plan(PlanRequest(gpu=card, workload=Workload(40960 / 3 - 0.1, 60), replicas=3))
    ts = _option(p, "time-slicing x3")
    assert ts.memory_per_instance_mib == 13653
    assert not ts.fits
    assert ts.why_not.endswith("at most 2 replicas fit")


def test_min_headroom_moves_to_bigger_slices() -> None:
    p = _plan(min_headroom_mib=2048)
    assert p.recommendation is not None
    assert p.recommendation.label == "4 x MIG 1g.10gb"
    assert "less than 2 GiB of headroom were left out" in p.recommendation.reason


def test_no_isolated_option_with_enough_headroom() -> None:
    p = _plan(min_headroom_mib=38 * 1024)
    assert p.recommendation is None
    assert p.summary.startswith("No option both fits and leaves 38 GiB of headroom and is isolated.")


def test_one_instance_ties_go_to_the_whole_gpu() -> None:
    p = _plan(memory="20GiB")
    assert p.recommendation is not None
    assert p.recommendation.label == "whole GPU"
    assert _option(p, "MIG 7g.40gb").fits


def test_l4_has_no_mig_options() -> None:
    p = _plan(gpu="l4")
    assert [o.sharing for o in p.options] == [Sharing.WHOLE, Sharing.TIME_SLICING]
    assert p.notes == ("L4 does not support MIG: only whole GPU and time-slicing apply.",)
    assert p.recommendation is not None
    assert p.recommendation.label == "whole GPU"


@pytest.mark.parametrize(
    ("gpu", "profile", "count"),
    [
        ("A100-40GB", "1g.5gb", 7),
        ("A100-40GB", "1g.5gb+me", 1),
        ("A100-40GB", "1g.10gb", 4),
        ("A100-40GB", "2g.10gb", 3),
        ("A100-40GB", "3g.20gb", 2),
        ("A100-40GB", "7g.40gb", 1),
        ("H100-80GB", "1g.10gb", 7),
        ("H200-141GB", "1g.18gb", 7),
    ],
)
def test_max_instances_follows_placement(gpu: str, profile: str, count: int) -> None:
    model = catalog.model(gpu)
    assert max_instances(model, model.profile(profile)) == count


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("a100-40gb", "A100-40GB"),
        ("h100-80gb", "H100-80GB"),
        ("h200-141gb", "H200-141GB"),
        ("l4", "L4"),
        ("A100_80GB", "A100-80GB"),
        ("h100-80", "H100-80GB"),
        ("NVIDIA H200", "H200-141GB"),
    ],
)
def test_resolve_gpu_accepts_friendly_names(name: str, key: str) -> None:
    assert resolve_gpu(name).key == key


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("a100", r"--gpu: ambiguous GPU 'a100'; use one of a100-40gb, a100-80gb$"),
        ("h100", r"--gpu: ambiguous GPU 'h100'; use one of h100-80gb, h100-nvl, h100-96gb$"),
        ("v100", r"--gpu: unknown GPU 'v100'; use one of a100-40gb, a100-80gb, a30, h100-80gb, .*, l4$"),
    ],
)
def test_resolve_gpu_errors_list_the_choices(name: str, message: str) -> None:
    with pytest.raises(PlanInputError, match=message):
        resolve_gpu(name)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"qps": 0}, r"--qps-per-instance: must be a finite number larger than zero"),
        ({"qps": float("nan")}, r"--qps-per-instance: must be a finite number larger than zero"),
        ({"qps": float("inf")}, r"--qps-per-instance: must be a finite number larger than zero"),
        ({"gpus": 0}, r"--gpus: must be at least 1, got 0"),
        ({"replicas": 1}, r"--replicas: time-slicing needs at least 2 \(1 is the whole GPU\), got 1"),
        (
            {"replicas": 1_000_000_000},
            r"--replicas: at most 40960 on .* \(one MiB of its memory each\), got 1000000000",
        ),
        ({"min_headroom_mib": float("inf")}, r"--min-headroom: must be zero or more"),
        ({"min_headroom_mib": -1.0}, r"--min-headroom: must be zero or more"),
    ],
)
def test_bad_requests_name_the_flag(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(PlanInputError, match=message):
        _plan(**kwargs)  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(
    gpu=st.sampled_from(sorted(catalog.MODELS)),
    model_mib=st.floats(min_value=1, max_value=200_000, allow_nan=False),
    qps=st.floats(min_value=0.1, max_value=10_000, allow_nan=False),
    replicas=st.integers(min_value=2, max_value=48),
    isolation=st.sampled_from(list(IsolationNeed)),
)
def test_plans_never_overcommit_the_gpu(
    gpu: str, model_mib: float, qps: float, replicas: int, isolation: IsolationNeed
) -> None:
    card = catalog.model(gpu)
    p = plan(PlanRequest(gpu=card, workload=Workload(model_mib, qps), isolation=isolation, replicas=replicas))
    for o in p.fitting:
        assert o.instances_per_gpu * o.memory_per_instance_mib <= card.memory_mib
        assert o.instances_per_gpu * model_mib <= card.memory_mib
        assert o.headroom_mib >= 0
        assert o.qps_per_gpu == pytest.approx(o.instances_per_gpu * qps)
        if o.sharing is Sharing.MIG:
            assert o.profile is not None
            catalog.place_layout(card, {o.profile: o.instances_per_gpu})
            with pytest.raises(InvalidConfigError):
                catalog.place_layout(card, {o.profile: o.instances_per_gpu + 1})
    if model_mib > card.memory_mib:
        assert p.fitting == () and p.recommendation is None and p.summary.startswith("Nothing fits")
    else:
        assert p.recommendation is not None
        allowed = [o for o in p.fitting if isolation is IsolationNeed.SOFT or o.isolation is not Isolation.NONE]
        chosen = next(o for o in allowed if _label(o) == p.recommendation.label)
        assert chosen.qps_per_gpu == max(o.qps_per_gpu for o in allowed)
    if p.recommendation is not None and isolation is IsolationNeed.HARD:
        assert p.recommendation.sharing is not Sharing.TIME_SLICING


def test_non_finite_model_memory_from_code_is_refused_not_computed() -> None:
    with pytest.raises(PlanInputError, match="--model-memory: must be a finite size larger than zero"):
        plan(PlanRequest(gpu=resolve_gpu("a100-40gb"), workload=Workload(float("nan"), 60)))
