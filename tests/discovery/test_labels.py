"""GFD label sets for every simulated preset, each MIG strategy, time-slicing and MPS.

Expected values are written out by hand from NVIDIA GFD's rules (product sanitizing, -SHARED,
replicas 0 for MIG-enabled GPUs, MIG-INVALID), not computed with the code under test.
"""

from __future__ import annotations

import dataclasses

import pytest
from fakes.fake_pynvml import nvml_over

from gpuchain.api.config.v1.config import parse_config
from gpuchain.discovery.labels import (
    LabelError,
    gfd_labels,
    gpu_mode,
    is_owned,
    label_value,
    sanitize,
    version_labels,
)
from gpuchain.gpu.model import DriverInfo, Gpu, Inventory
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import preset_names

N = "nvidia.com/"

COMMON = {
    N + "cuda.driver-version.full": "570.86.15",
    N + "cuda.driver-version.major": "570",
    N + "cuda.driver-version.minor": "86",
    N + "cuda.driver-version.revision": "15",
    N + "cuda.driver.major": "570",
    N + "cuda.driver.minor": "86",
    N + "cuda.driver.rev": "15",
    N + "cuda.runtime-version.full": "12.8",
    N + "cuda.runtime-version.major": "12",
    N + "cuda.runtime-version.minor": "8",
    N + "cuda.runtime.major": "12",
    N + "cuda.runtime.minor": "8",
    N + "gfd.timestamp": "1700000000",
    N + "gpu.machine": "DGX-H100",
    N + "gpu.mode": "compute",
    N + "mps.capable": "false",
    N + "vgpu.present": "false",
}

# preset -> (product, count, memory MiB, family, compute major, minor, mig.capable)
WHOLE = {
    "a100-40gb-x8": ("NVIDIA-A100-SXM4-40GB", 8, 40960, "ampere", 8, 0, "true"),
    "a100-80gb-x8": ("NVIDIA-A100-SXM4-80GB", 8, 81920, "ampere", 8, 0, "true"),
    "h100-80gb-x8": ("NVIDIA-H100-80GB-HBM3", 8, 81559, "hopper", 9, 0, "true"),
    "h200-141gb-x8": ("NVIDIA-H200", 8, 143771, "hopper", 9, 0, "true"),
    "l4-x2": ("NVIDIA-L4", 2, 23034, "ada-lovelace", 8, 9, "false"),
    "t4-x4": ("Tesla-T4", 4, 15360, "turing", 7, 5, "false"),  # GFD: compute 7.5 and up is turing
    "h100-80gb-x8-mig-mixed": ("NVIDIA-H100-80GB-HBM3", 8, 81559, "hopper", 9, 0, "true"),
}

TIME_SLICING = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}"


def _labels(preset: str, config_text: str = "", **kwargs: object) -> dict[str, str]:
    inv = SimBackend.from_preset(preset).inventory()
    return gfd_labels(inv, config=parse_config(config_text), timestamp=1700000000, machine="DGX H100", **kwargs)  # type: ignore[arg-type]


def _whole(preset: str, replicas: int = 1, strategy: str = "none", shared: bool = False) -> dict[str, str]:
    product, count, memory, family, major, minor, mig_capable = WHOLE[preset]
    return {
        **COMMON,
        N + "gpu.product": product + ("-SHARED" if shared else ""),
        N + "gpu.count": str(count),
        N + "gpu.replicas": str(replicas),
        N + "gpu.sharing-strategy": strategy,
        N + "gpu.memory": str(memory),
        N + "gpu.family": family,
        N + "gpu.compute.major": str(major),
        N + "gpu.compute.minor": str(minor),
        N + "mig.capable": mig_capable,
    }


def test_every_preset_is_covered() -> None:
    assert set(preset_names()) == set(WHOLE)


@pytest.mark.parametrize("preset", sorted(set(WHOLE) - {"h100-80gb-x8-mig-mixed"}))
@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_whole_gpu_presets_under_each_strategy(preset: str, strategy: str) -> None:
    expected = _whole(preset)
    if strategy != "none":
        expected[N + "mig.strategy"] = strategy
    assert _labels(preset, f"flags: {{migStrategy: {strategy}}}") == expected


@pytest.mark.parametrize("preset", sorted(set(WHOLE) - {"h100-80gb-x8-mig-mixed"}))
@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_whole_gpu_presets_with_time_slicing(preset: str, strategy: str) -> None:
    expected = _whole(preset, replicas=4, strategy="time-slicing", shared=True)
    if strategy != "none":
        expected[N + "mig.strategy"] = strategy
    assert _labels(preset, f"flags: {{migStrategy: {strategy}}}\n" + TIME_SLICING) == expected


def _mig_block(
    resource: str, product: str, count: int, memory: int, sms: int, slices: int, engines: tuple[int, ...]
) -> dict[str, str]:
    copy, dec, enc, jpeg, ofa = engines
    r = N + resource
    return {
        r + ".product": product,
        r + ".count": str(count),
        r + ".replicas": "1",
        r + ".sharing-strategy": "none",
        r + ".memory": str(memory),
        r + ".multiprocessors": str(sms),
        r + ".slices.gi": str(slices),
        r + ".slices.ci": str(slices),
        r + ".engines.copy": str(copy),
        r + ".engines.decoder": str(dec),
        r + ".engines.encoder": str(enc),
        r + ".engines.jpeg": str(jpeg),
        r + ".engines.ofa": str(ofa),
    }


MIXED_PRESET_MIG = {
    # GPUs 0-3: 2x 1g.10gb + 2g.20gb + 3g.40gb; GPUs 4-5: 7x 1g.10gb -> 22 x 1g.10gb, 4 x 2g.20gb, 4 x 3g.40gb
    **_mig_block("mig-1g.10gb", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", 22, 9984, 16, 1, (1, 1, 0, 1, 0)),
    **_mig_block("mig-2g.20gb", "NVIDIA-H100-80GB-HBM3-MIG-2g.20gb", 4, 20096, 32, 2, (2, 2, 0, 2, 0)),
    **_mig_block("mig-3g.40gb", "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", 4, 40448, 60, 3, (3, 3, 0, 3, 0)),
}


def test_mig_preset_strategy_none_labels_whole_gpus_only() -> None:
    assert _labels("h100-80gb-x8-mig-mixed") == _whole("h100-80gb-x8-mig-mixed")


def test_mig_preset_strategy_mixed_labels_each_profile() -> None:
    expected = {**_whole("h100-80gb-x8-mig-mixed"), N + "mig.strategy": "mixed", **MIXED_PRESET_MIG}
    assert _labels("h100-80gb-x8-mig-mixed", "flags: {migStrategy: mixed}") == expected


def test_mig_preset_strategy_single_is_invalid() -> None:
    expected = {
        **_whole("h100-80gb-x8-mig-mixed"),
        N + "mig.strategy": "single",
        N + "gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-INVALID",
        N + "gpu.count": "0",
        N + "gpu.replicas": "0",
        N + "gpu.sharing-strategy": "",
        N + "gpu.memory": "0",
    }
    assert _labels("h100-80gb-x8-mig-mixed", "flags: {migStrategy: single}") == expected


def test_mig_preset_strategy_none_with_time_slicing() -> None:
    expected = _whole("h100-80gb-x8-mig-mixed", replicas=4, strategy="time-slicing", shared=True)
    assert _labels("h100-80gb-x8-mig-mixed", TIME_SLICING) == expected


def test_mig_preset_strategy_single_with_time_slicing_is_invalid() -> None:
    expected = {
        **_whole("h100-80gb-x8-mig-mixed", strategy="time-slicing"),
        N + "mig.strategy": "single",
        N + "gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-INVALID",
        N + "gpu.count": "0",
        N + "gpu.replicas": "0",
        N + "gpu.sharing-strategy": "",
        N + "gpu.memory": "0",
    }
    assert _labels("h100-80gb-x8-mig-mixed", "flags: {migStrategy: single}\n" + TIME_SLICING) == expected


def test_mig_preset_with_time_slicing_shares_the_whole_gpus() -> None:
    labels = _labels("h100-80gb-x8-mig-mixed", "flags: {migStrategy: mixed}\n" + TIME_SLICING)
    expected = {
        **_whole("h100-80gb-x8-mig-mixed", replicas=4, strategy="time-slicing", shared=True),
        N + "mig.strategy": "mixed",
        **MIXED_PRESET_MIG,
    }
    assert labels == expected


def _all_mig(preset: str, layout: dict[str, int]) -> Inventory:
    sim = SimBackend.from_preset(preset)
    for gpu in sim.inventory().gpus:
        sim.set_mig_layout(gpu.index, layout)
    return sim.inventory()


def test_single_strategy_with_one_profile_everywhere() -> None:
    inv = _all_mig("h100-80gb-x8", {"1g.10gb": 7})
    labels = gfd_labels(inv, config=parse_config("flags: {migStrategy: single}"), timestamp=None, machine="DGX H100")
    expected = {
        **_whole("h100-80gb-x8"),
        N + "mig.strategy": "single",
        **_mig_block("gpu", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", 56, 9984, 16, 1, (1, 1, 0, 1, 0)),
    }
    # every GPU is MIG-enabled: the full-GPU labels carry no sharing, but MIG single keeps replicas 1
    del expected[N + "gfd.timestamp"]
    assert labels == expected


def test_single_strategy_with_time_slicing_marks_mig_product_shared() -> None:
    inv = _all_mig("a100-40gb-x8", {"3g.20gb": 2})
    config = parse_config("flags: {migStrategy: single}\n" + TIME_SLICING)
    labels = gfd_labels(inv, config=config, timestamp=None)
    assert labels[N + "gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb-SHARED"
    assert labels[N + "gpu.count"] == "16"
    assert labels[N + "gpu.replicas"] == "4"
    assert labels[N + "gpu.sharing-strategy"] == "time-slicing"
    assert labels[N + "gpu.memory"] == "19968"
    assert labels[N + "gpu.family"] == "ampere"


def test_all_mig_enabled_without_single_labels_replicas_zero() -> None:
    inv = _all_mig("h100-80gb-x8", {"3g.40gb": 2})
    labels = gfd_labels(inv, config=parse_config("flags: {migStrategy: mixed}\n" + TIME_SLICING))
    assert labels[N + "gpu.replicas"] == "0"
    assert labels[N + "gpu.sharing-strategy"] == "none"
    assert labels[N + "gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels[N + "gpu.count"] == "8"
    assert labels[N + "mig-3g.40gb.count"] == "16"


def test_mixed_strategy_time_slicing_on_a_mig_resource() -> None:
    config = parse_config(
        "flags: {migStrategy: mixed}\n"
        "sharing: {timeSlicing: {resources: [{name: nvidia.com/mig-1g.10gb, replicas: 2}]}}"
    )
    labels = gfd_labels(SimBackend.from_preset("h100-80gb-x8-mig-mixed").inventory(), config=config)
    assert labels[N + "mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED"
    assert labels[N + "mig-1g.10gb.replicas"] == "2"
    assert labels[N + "mig-1g.10gb.sharing-strategy"] == "time-slicing"
    assert labels[N + "mig-2g.20gb.replicas"] == "1"
    assert labels[N + "gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels[N + "gpu.sharing-strategy"] == "none"


@pytest.mark.parametrize(
    "sharing",
    [
        "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, rename: gpu.shared, replicas: 4}]}}",
        "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: nvidia.com/gpu, replicas: 4}]}}",
    ],
)
def test_renamed_shared_resource_has_no_shared_suffix(sharing: str) -> None:
    labels = _labels("h100-80gb-x8", sharing)
    assert labels[N + "gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels[N + "gpu.replicas"] == "4"
    assert labels[N + "gpu.sharing-strategy"] == "time-slicing"


def test_mps_sharing() -> None:
    labels = _labels("a100-80gb-x8", "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 3}]}}")
    assert labels[N + "mps.capable"] == "true"
    assert labels[N + "gpu.sharing-strategy"] == "mps"
    assert labels[N + "gpu.replicas"] == "3"
    assert labels[N + "gpu.product"] == "NVIDIA-A100-SXM4-80GB-SHARED"


def test_media_extension_profile_is_spelled_with_a_dot() -> None:
    sim = SimBackend.from_preset("a100-80gb-x8")
    sim.set_mig_layout(0, {"1g.10gb+me": 1, "1g.10gb": 6})
    labels = gfd_labels(sim.inventory(), config=parse_config("flags: {migStrategy: mixed}"))
    assert labels[N + "mig-1g.10gb.me.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb.me"
    assert labels[N + "mig-1g.10gb.me.engines.ofa"] == "1"
    assert labels[N + "mig-1g.10gb.count"] == "6"


@pytest.mark.parametrize("preset", ["h100-80gb-x8-mig-mixed", "l4-x2"])
def test_nvml_backend_gives_the_same_labels(preset: str) -> None:
    sim = SimBackend.from_preset(preset)
    config = parse_config("flags: {migStrategy: mixed}\n" + TIME_SLICING)
    nvml = nvml_over(sim)
    try:
        assert gfd_labels(nvml.inventory(), config=config, timestamp=1) == gfd_labels(
            sim.inventory(), config=config, timestamp=1
        )
    finally:
        nvml.close()


def test_no_gpus_leaves_only_the_timestamp() -> None:
    inv = Inventory(DriverInfo("570.86.15", "12.8"), ())
    assert gfd_labels(inv, config=parse_config(""), timestamp=5) == {N + "gfd.timestamp": "5"}


def test_no_timestamp() -> None:
    inv = SimBackend.from_preset("l4-x2").inventory()
    assert N + "gfd.timestamp" not in gfd_labels(inv, config=parse_config(""), timestamp=None)


def test_version_labels_keep_leading_zeros_and_two_part_versions() -> None:
    labels = version_labels(DriverInfo("535.183.01", "12.2"))
    assert labels[N + "cuda.driver-version.revision"] == "01"
    assert labels[N + "cuda.driver.rev"] == "01"
    two = version_labels(DriverInfo("550.54", "12.4"))
    assert two[N + "cuda.driver-version.revision"] == ""
    assert two[N + "cuda.runtime-version.full"] == "12.4"


def test_bad_driver_version_is_named() -> None:
    with pytest.raises(LabelError, match="'abc'"):
        version_labels(DriverInfo("abc", "12.8"))


def _with_class(gpu: Gpu, pci_class: int | None) -> Gpu:
    return dataclasses.replace(gpu, pci_class=pci_class)


@pytest.mark.parametrize(
    ("classes", "mode"),
    [
        ((0x030200, 0x030200), "compute"),
        ((0x030000, 0x030000), "graphics"),
        ((0x030000, 0x030200), "unknown"),  # GFD: a node mixing classes has no single mode
        ((0x030200, None), "unknown"),  # a class sysfs could not give
        ((0x038000,), "unknown"),
    ],
)
def test_gpu_mode_from_pci_class(classes: tuple[int | None, ...], mode: str) -> None:
    gpus = SimBackend.from_preset("h100-80gb-x8").inventory().gpus
    assert gpu_mode(_with_class(g, c) for g, c in zip(gpus, classes, strict=False)) == mode


def test_gpu_mode_label_for_a_graphics_card_node() -> None:
    inv = SimBackend.from_preset("l4-x2").inventory()
    vga = Inventory(inv.driver, tuple(_with_class(g, 0x030000) for g in inv.gpus))
    assert gfd_labels(vga, config=parse_config(""))[N + "gpu.mode"] == "graphics"


def test_vgpu_present_on_a_vgpu_guest_only() -> None:
    # NVIDIA's GFD labels vgpu.present on every GPU node: true where a GPU is a vGPU in a VM.
    inv = SimBackend.from_preset("a100-40gb-x8").inventory()
    assert gfd_labels(inv, config=parse_config(""))[N + "vgpu.present"] == "false"
    guest = Inventory(inv.driver, (dataclasses.replace(inv.gpus[0], vgpu=True), *inv.gpus[1:]))
    assert gfd_labels(guest, config=parse_config(""))[N + "vgpu.present"] == "true"


def test_sanitize_and_label_value() -> None:
    assert sanitize("NVIDIA A100-SXM4-40GB") == "NVIDIA-A100-SXM4-40GB"
    assert sanitize("Tesla  V100 (PCIe)/32GB") == "Tesla-V100-PCIe32GB"
    assert label_value("  ProLiant DL380 Gen10 Plus. ") == "ProLiant-DL380-Gen10-Plus"
    assert len(label_value("x" * 100)) == 63


@pytest.mark.parametrize(
    "key",
    [
        "nvidia.com/gpu.product",
        "nvidia.com/gpu.count",
        "nvidia.com/gpu.engines.ofa",
        "nvidia.com/mig-1g.10gb.count",
        "nvidia.com/mig-1g.10gb.me.slices.gi",
        "nvidia.com/mig.strategy",
        "nvidia.com/cuda.driver-version.full",
        "nvidia.com/cuda.runtime.major",
        "nvidia.com/gfd.timestamp",
        "nvidia.com/gpu.machine",
        "nvidia.com/gpu.mode",
        "nvidia.com/vgpu.present",
    ],
)
def test_owned_labels(key: str) -> None:
    assert is_owned(key)


@pytest.mark.parametrize(
    "key",
    [
        "nvidia.com/gpu.present",
        "nvidia.com/gpu.deploy.driver",
        "nvidia.com/mig.config",
        "nvidia.com/mig.config.state",
        "nvidia.com/device-plugin.config",
        "nvidia.com/gpu-driver-upgrade-state",
        "feature.node.kubernetes.io/pci-10de.present",
        "example.com/gpu.product",
    ],
)
def test_labels_owned_by_others(key: str) -> None:
    assert not is_owned(key)


def test_compute_instance_profiles_are_labelled_as_nvidias_gfd_reads_their_attributes() -> None:
    """A ``1c.3g.40gb`` device: NVIDIA's GFD names it by its profile string (``1c.3g.40gb``) and
    labels the slices of its compute and GPU instance from the device's attributes; the plugin
    serves it as ``nvidia.com/mig-1c.3g.40gb``. Same labels through the NVML backend."""
    from gpuchain.deviceplugin.resources import map_resources

    sim = SimBackend.from_preset("h100-80gb-x8")
    for gpu in range(8):
        sim.set_mig_layout(gpu, {"1c.3g.40gb": 3, "3g.40gb": 1})
    config = parse_config("flags: {migStrategy: mixed}")
    labels = gfd_labels(sim.inventory(), config=config, timestamp=None)
    split, full = N + "mig-1c.3g.40gb", N + "mig-3g.40gb"
    assert labels[split + ".product"] == "NVIDIA-H100-80GB-HBM3-MIG-1c.3g.40gb"
    assert (labels[split + ".count"], labels[full + ".count"]) == ("24", "8")
    assert (labels[split + ".slices.ci"], labels[split + ".slices.gi"]) == ("1", "3")
    assert (labels[full + ".slices.ci"], labels[full + ".slices.gi"]) == ("3", "3")
    assert labels[split + ".memory"] == labels[full + ".memory"], "compute instances share the GPU instance's memory"
    assert int(labels[split + ".multiprocessors"]) == int(labels[full + ".multiprocessors"]) // 3
    assert {r.name: len(r.devices) for r in map_resources(sim.inventory(), config)} == {
        "nvidia.com/mig-1c.3g.40gb": 24,
        "nvidia.com/mig-3g.40gb": 8,
    }
    nvml = nvml_over(sim)
    try:
        assert gfd_labels(nvml.inventory(), config=config, timestamp=None) == labels
    finally:
        nvml.close()
