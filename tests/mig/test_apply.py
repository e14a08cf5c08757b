"""apply/assert on both backends: the layouts the issue names, idempotence, only differing GPUs
touched, bad layouts touching nothing, hardware refusals restored, and pending resets."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from fakes.fake_pynvml import FakeNvml

from gpuchain.gpu.backend import GpuBackend, MigMode
from gpuchain.gpu.errors import GpuError
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import load_topology
from gpuchain.mig.apply import MigApplyError, ResetRequiredError, apply, check
from gpuchain.mig.config import LayoutError, default_config, parse_config
from gpuchain.mig.plan import GpuMigState, NodeMigState, StepKind, observe, plan, resolve


def nvml_over(sim: SimBackend) -> NvmlBackend:
    """NvmlBackend over the fake pynvml answering from ``sim`` (the NVML code path, no driver)."""
    return NvmlBackend(nvml=FakeNvml(sim))


BACKENDS: list[Callable[[SimBackend], GpuBackend]] = [lambda s: s, nvml_over]
IDS = ["sim", "nvml"]
CONFIG = default_config()


@pytest.mark.parametrize("make", BACKENDS, ids=IDS)
def test_all_1g_10gb_gives_56_mig_devices_and_all_disabled_gives_8_gpus_back(make: Callable) -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    backend = make(sim)
    result = apply(backend, config=CONFIG, name="all-1g.10gb")
    assert result.applied and result.changed_gpus == tuple(range(8))
    inv = backend.inventory()
    assert len(inv.mig_devices) == 56
    assert {m.profile for m in inv.mig_devices} == {"1g.10gb"}
    assert all(g.mig_enabled and len(g.mig_devices) == 7 for g in inv.gpus)
    assert check(backend, config=CONFIG, name="all-1g.10gb") == []

    apply(backend, config=CONFIG, name="all-disabled")
    inv = backend.inventory()
    assert len(inv.gpus) == 8 and not inv.mig_devices and not any(g.mig_enabled for g in inv.gpus)
    assert inv == SimBackend.from_preset("h100-80gb-x8").inventory()


def test_nvml_path_drives_the_real_mig_api() -> None:
    fake = FakeNvml(SimBackend.from_preset("h100-80gb-x8"))
    backend = NvmlBackend(nvml=fake)
    apply(backend, config=CONFIG, name="all-balanced")
    for call in (
        "nvmlDeviceSetMigMode",
        "nvmlDeviceGetGpuInstanceProfileInfo",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceGetComputeInstanceProfileInfo",
        "nvmlGpuInstanceCreateComputeInstance",
    ):
        assert call in fake.calls, call
    fake.calls.clear()
    apply(backend, config=CONFIG, name="all-disabled")
    assert {"nvmlComputeInstanceDestroy", "nvmlGpuInstanceDestroy", "nvmlDeviceGetGpuInstances"} <= set(fake.calls)


@pytest.mark.parametrize("make", BACKENDS, ids=IDS)
def test_apply_is_idempotent_and_touches_only_gpus_that_differ(make: Callable) -> None:
    sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")  # GPUs 0-3 balanced, 4-5 7x1g.10gb, 6-7 whole
    backend = make(sim)
    untouched = {g.index: g for g in sim.inventory().gpus if g.index < 4}
    result = apply(backend, config=CONFIG, name="all-balanced")
    assert result.changed_gpus == (4, 5, 6, 7)
    assert {g.index: g for g in sim.inventory().gpus if g.index < 4} == untouched  # same MIG UUIDs
    again = apply(backend, config=CONFIG, name="all-balanced")
    assert again.steps == () and not again.applied


def test_idempotent_apply_makes_no_nvml_writes() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    fake = FakeNvml(sim)
    backend = NvmlBackend(nvml=fake)
    apply(backend, config=CONFIG, name="all-3g.40gb")
    fake.calls.clear()
    apply(backend, config=CONFIG, name="all-3g.40gb")
    writes = [c for c in fake.calls if "Create" in c or "Destroy" in c or "Set" in c]
    assert writes == []


def test_plan_orders_destroys_then_modes_then_creates() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
    state = observe(sim)
    steps = plan(state, resolve(state, config=CONFIG, name="all-7g.80gb"))
    kinds = [s.kind for s in steps]
    first_mode = kinds.index(StepKind.SET_MIG_MODE)
    assert set(kinds[:first_mode]) == {StepKind.DESTROY_GPU_INSTANCE}
    assert kinds[-8:] == [StepKind.CREATE_MIG_DEVICE] * 8
    assert [s.gpu for s in steps if s.kind is StepKind.SET_MIG_MODE] == [6, 7]


def test_invalid_layouts_leave_the_node_unchanged() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
    before = sim.inventory()
    with pytest.raises(LayoutError, match="selects none of this node's GPUs \\(models: H100-80GB\\)"):
        apply(sim, config=CONFIG, name="all-1g.5gb")
    unfiltered = parse_config(
        "version: v1\nmig-configs:\n  huge:\n    - devices: [7]\n      mig-enabled: true\n"
        "      mig-devices: {4g.40gb: 1, 3g.40gb: 1, 1g.10gb: 1}\n"
        "    - devices: [0, 1]\n      mig-enabled: false\n"
    )
    with pytest.raises(LayoutError, match="GPU 7 H100-80GB: layout .* needs 8 compute slices, the GPU has 7"):
        apply(sim, config=unfiltered, name="huge")
    assert sim.inventory() == before


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            "    - devices: all\n      mig-enabled: false\n    - devices: [3]\n      mig-enabled: false\n",
            "GPU 3 \\(H100-80GB\\) is selected by entries 0, 1",
        ),
        ("    - devices: [9]\n      mig-enabled: false\n", "names GPU 9, but this node has GPUs 0, 1, 2"),
    ],
)
def test_ambiguous_or_missing_gpus_are_errors(entries: str, message: str) -> None:
    cfg = parse_config("version: v1\nmig-configs:\n  x:\n" + entries)
    with pytest.raises(LayoutError, match=message):
        apply(SimBackend.from_preset("h100-80gb-x8"), config=cfg, name="x")


def test_gpu_without_mig_is_named(tmp_path: Path) -> None:
    path = tmp_path / "l4.yaml"
    path.write_text("gpus:\n  - model: L4\n    count: 2\n")
    with pytest.raises(LayoutError, match="GPU 0 \\(L4\\) does not support MIG"):
        apply(SimBackend(load_topology(str(path))), config=CONFIG, name="all-enabled")
    assert apply(SimBackend(load_topology(str(path))), config=CONFIG, name="all-disabled").steps == ()


class _FailingSim(SimBackend):
    """The hardware refuses 3g.40gb on GPU 5, after other GPUs were already changed."""

    def create_gpu_instance(self, gpu_index: int, profile: str, start: int) -> int:
        if gpu_index == 5 and profile == "3g.40gb":
            raise GpuError("injected: insufficient resources")
        return super().create_gpu_instance(gpu_index, profile=profile, start=start)


def test_hardware_refusal_half_way_restores_the_previous_layout() -> None:
    sim = _FailingSim(SimBackend.from_preset("h100-80gb-x8-mig-mixed").topology)
    before = sim.inventory()
    with pytest.raises(MigApplyError, match="GPU 5: create 3g.40gb .*injected.*previous layout was restored"):
        apply(sim, config=CONFIG, name="all-3g.40gb")
    assert sim.inventory() == before


def test_pending_mode_is_reset_where_the_backend_can() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    sim.mig_mode_needs_reset = True
    apply(sim, config=CONFIG, name="all-1g.10gb")
    assert len(sim.inventory().mig_devices) == 56


def test_pending_mode_that_needs_a_reset_is_reported_not_hidden() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    sim.mig_mode_needs_reset = True
    backend = nvml_over(sim)  # NVML cannot reset a GPU
    with pytest.raises(ResetRequiredError, match="GPU 0, 1, 2, 3, 4, 5, 6, 7 is pending a GPU reset.*reboot"):
        apply(backend, config=CONFIG, name="all-1g.10gb")
    assert all(backend.mig_mode(i).reset_pending for i in range(8))
    assert any("pending a GPU reset" in line for line in check(backend, config=CONFIG, name="all-1g.10gb"))
    for i in range(8):
        sim.reset_gpu(i)  # the reboot
    apply(backend, config=CONFIG, name="all-1g.10gb")
    assert len(backend.inventory().mig_devices) == 56


def test_check_names_each_differing_gpu() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
    lines = check(sim, config=CONFIG, name="all-disabled")
    assert len(lines) == 6
    assert lines[0] == "GPU 0 (H100-80GB): has MIG 2x 1g.10gb, 1x 2g.20gb, 1x 3g.40gb, layout wants MIG disabled"


def test_gpu_instance_without_compute_instance_is_not_the_layout() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    apply(sim, config=CONFIG, name="all-7g.80gb")
    gi = sim.gpu_instances(2)[0]
    sim.destroy_compute_instance(2, gi_id=gi.gi_id, ci_id=0)
    assert check(sim, config=CONFIG, name="all-7g.80gb") == [
        "GPU 2 (H100-80GB): has MIG enabled, no MIG devices (GPU instances without a compute instance: "
        "7g.80gb), layout wants MIG 1x 7g.80gb"
    ]
    assert apply(sim, config=CONFIG, name="all-7g.80gb").changed_gpus == (2,)
    assert check(sim, config=CONFIG, name="all-7g.80gb") == []


def test_mig_gpu_missing_from_the_catalog_is_named() -> None:
    a30 = GpuMigState(
        index=0, uuid="GPU-a30", name="NVIDIA A30", pci_device_id=0x20B710DE, model=None, mode=MigMode(False, False)
    )
    with pytest.raises(LayoutError, match="GPU 0 \\(NVIDIA A30\\) supports MIG but is not in gpuchain's MIG catalog"):
        resolve(NodeMigState((a30,)), config=CONFIG, name="all-enabled")
    (target,) = resolve(NodeMigState((a30,)), config=CONFIG, name="all-disabled")
    assert plan(NodeMigState((a30,)), [target]) == []


def test_devices_all_passes_over_a_gpu_without_mig_as_mig_parted_does(tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text("gpus:\n  - model: H100-80GB\n  - model: L4\n")
    backend = SimBackend(load_topology(str(path)))
    result = apply(backend, config=CONFIG, name="all-1g.10gb")
    assert result.changed_gpus == (0,)
    assert [m.profile for m in backend.inventory().gpu(0).mig_devices] == ["1g.10gb"] * 7
    assert not backend.inventory().gpu(1).mig_devices


def test_listing_a_gpu_without_mig_by_index_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text("gpus:\n  - model: H100-80GB\n  - model: L4\n")
    cfg = parse_config(
        "version: v1\nmig-configs:\n  x:\n    - devices: [1]\n      mig-enabled: true\n      mig-devices: {}\n"
    )
    with pytest.raises(LayoutError, match="GPU 1 \\(L4\\) does not support MIG; remove it from devices"):
        apply(SimBackend(load_topology(str(path))), config=cfg, name="x")


SPLIT = parse_config(
    "version: v1\nmig-configs:\n"
    "  split:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {1c.3g.40gb: 3}\n"
    "  mixed:\n    - devices: all\n      mig-enabled: true\n"
    "      mig-devices: {2c.3g.40gb: 1, 1c.3g.40gb: 1, 3g.40gb: 1}\n"
    "  bad:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {3c.4g.40gb: 1}\n"
)


@pytest.mark.parametrize("backend_of", [lambda s: s, nvml_over], ids=["sim", "nvml"])
def test_compute_instance_profiles_apply_as_mig_parted_creates_them(
    backend_of: Callable[[SimBackend], GpuBackend],
) -> None:
    """mig-parted creates the GPU instance, then compute instances of the asked size in it, and
    reads the GPU back as ``{1c.3g.40gb: 3}``; gpuchain does the same, and again changes nothing."""
    sim = SimBackend.from_preset("h100-80gb-x8")
    backend = backend_of(sim)
    result = apply(backend, config=SPLIT, name="split")
    creates = [s for s in result.steps if s.kind is StepKind.CREATE_MIG_DEVICE]
    assert len(creates) == 8 and creates[0].describe() == (
        "GPU 0: create 3g.40gb at memory slice 0 with compute instances of 1c, 1c, 1c"
    )
    for gpu in sim.inventory().gpus:
        assert [(m.profile, m.gi_id) for m in gpu.mig_devices] == [("1c.3g.40gb", gpu.mig_devices[0].gi_id)] * 3
        assert [ci.slices for gi in sim.gpu_instances(gpu.index) for ci in gi.compute_instances] == [1, 1, 1]
    assert apply(backend, config=SPLIT, name="split").steps == ()
    assert check(backend, config=SPLIT, name="split") == []
    assert check(backend, config=CONFIG, name="all-3g.40gb") == [
        f"GPU {i} (H100-80GB): has MIG 3x 1c.3g.40gb, layout wants MIG 2x 3g.40gb" for i in range(8)
    ]
    apply(backend, config=SPLIT, name="mixed")
    devices = Counter(m.profile for m in sim.inventory().gpu(5).mig_devices)
    assert devices == {"2c.3g.40gb": 1, "1c.3g.40gb": 1, "3g.40gb": 1}
    assert len(sim.gpu_instances(5)) == 2, "the 2c and 1c share one GPU instance"
    assert apply(backend, config=SPLIT, name="mixed").steps == ()


def test_a_compute_instance_profile_the_gpu_instance_does_not_offer_is_refused_before_anything_changes() -> None:
    backend = SimBackend.from_preset("h100-80gb-x8")
    before = backend.inventory()
    with pytest.raises(LayoutError, match="a 4-slice GPU instance has no 3-slice compute instance"):
        apply(backend, config=SPLIT, name="bad")
    assert backend.inventory() == before


class _FailingSplitSim(SimBackend):
    """The hardware refuses the first compute instance asked of GPU 5, after other GPUs were changed."""

    failures = 1

    def create_compute_instance(self, gpu_index: int, gi_id: int, slices: int | None = None) -> int:
        if gpu_index == 5 and self.failures:
            self.failures -= 1
            raise GpuError("injected: insufficient resources")
        return super().create_compute_instance(gpu_index, gi_id=gi_id, slices=slices)


def test_a_failed_apply_restores_split_gpu_instances_as_they_were() -> None:
    sim = _FailingSplitSim(SimBackend.from_preset("h100-80gb-x8").topology)
    for gpu in range(8):
        sim.set_mig_layout(gpu, {"2c.3g.40gb": 1, "1c.3g.40gb": 1, "3g.40gb": 1})
    with pytest.raises(
        MigApplyError, match="GPU 5: create 3g.40gb .*1c, 1c, 1c: injected.*previous layout was restored"
    ):
        apply(sim, config=SPLIT, name="split")
    assert check(sim, config=SPLIT, name="mixed") == []
    assert len(sim.gpu_instances(5)) == 2, "the 2c and 1c share one GPU instance again"
