"""Both backends answer the same questions the same way, and NVML failures become typed errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from fakes.fake_pynvml import FakeNvml, nvml_over

from gpuchain.gpu.errors import GpuLostError, LibraryNotFoundError, NotFoundError, NotSupportedError
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import load_preset, load_topology, preset_names


@pytest.mark.parametrize("preset", preset_names())
def test_inventory_parity_for_every_preset(preset: str) -> None:
    sim = SimBackend.from_preset(preset)
    assert nvml_over(sim).inventory() == sim.inventory()


def test_inventory_parity_with_direct_nvlinks(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "interconnect: pcie\ngpus:\n  - model: A100-80GB\n    count: 4\n    mig: {3g.40gb: 2}\n"
        "links:\n  - {gpus: [0, 1], level: PXB, nvlinks: 4}\n  - {gpus: [2, 3], level: PXB, nvlinks: 2}\n"
    )
    sim = SimBackend(load_topology(str(path)))
    inv = nvml_over(sim).inventory()
    assert inv == sim.inventory()
    assert inv.link(0, 1).nvlinks == 4  # type: ignore[union-attr]
    assert inv.link(1, 2).nvlinks == 0  # type: ignore[union-attr]


def test_telemetry_parity() -> None:
    sim = SimBackend(load_preset("h100-80gb-x8"), clock=lambda: 100.0)
    uuid = sim.inventory().gpus[3].uuid
    sim.set_telemetry(3, gpu_util=87, memory_used_mib=40000, remapped_rows_correctable=2)
    t = nvml_over(sim).telemetry(uuid)
    assert t == sim.telemetry(uuid)
    assert (t.gpu_util, t.memory_used_mib, t.remapped_rows_correctable) == (87, 40000, 2)


def test_lost_gpu_is_left_out_by_both() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    lost = sim.inventory().gpus[5].uuid
    sim.lose_gpu(5)
    for backend in (sim, nvml_over(sim)):
        inv = backend.inventory()
        assert len(inv.gpus) == 7 and lost not in {g.uuid for g in inv.gpus}
        with pytest.raises(GpuLostError, match="reset"):
            backend.telemetry(lost)
    sim.recover_gpu(5)
    assert len(nvml_over(sim).inventory().gpus) == 8


def test_library_missing_is_a_clear_error() -> None:
    with pytest.raises(LibraryNotFoundError, match="libnvidia-ml.so.1.*nvidia runtime class"):
        NvmlBackend(nvml=FakeNvml(SimBackend.from_preset("l4-x2"), library_missing=True))


def test_real_pynvml_without_a_driver_is_a_clear_error() -> None:
    """On this machine (no NVIDIA driver) the real nvidia-ml-py must fail the same clear way."""
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver")
    with pytest.raises(LibraryNotFoundError, match="libnvidia-ml.so.1"):
        NvmlBackend()


def test_unsupported_readings_are_none_not_errors() -> None:
    sim = SimBackend.from_preset("l4-x2")
    backend = NvmlBackend(nvml=FakeNvml(sim, unsupported=frozenset({"nvmlDeviceGetPowerUsage"})))
    t = backend.telemetry(sim.inventory().gpus[0].uuid)
    assert t.power_w is None and t.temperature_c is not None


def test_unknown_uuid_is_not_found() -> None:
    with pytest.raises(NotFoundError):
        nvml_over(SimBackend.from_preset("l4-x2")).telemetry("GPU-does-not-exist")


def _subscribed(sim: SimBackend) -> bool:
    """Whether a stream listens to ``sim``: for NVML, its event set has every GPU registered."""
    listeners = list(sim._listeners) + list(sim._subscriptions)
    gpus = len(sim.inventory().gpus)
    return bool(listeners) and all(
        len(getattr(getattr(listener, "__self__", None), "registered", range(gpus))) >= gpus for listener in listeners
    )


async def _collect(
    sim: SimBackend, stream: AsyncIterator[HealthEvent], count: int, act: Callable[[], object]
) -> list[HealthEvent]:
    """Read ``count`` events from ``stream`` after ``act`` runs, once the stream listens to ``sim``
    (on a loaded machine the NVML watcher thread can take far longer than any fixed pause)."""
    events: list[HealthEvent] = []

    async def read() -> None:
        async for ev in stream:
            events.append(ev)
            if len(events) == count:
                return

    task = asyncio.create_task(read())
    for _ in range(500):
        if _subscribed(sim):
            break
        await asyncio.sleep(0.01)
    act()
    await asyncio.wait_for(task, timeout=10)
    return events


def _key(ev: HealthEvent) -> tuple[object, ...]:
    return (ev.kind, ev.gpu_uuid, ev.xid, ev.mig_uuid)


@pytest.mark.parametrize("make", [lambda s: s, nvml_over], ids=["sim", "nvml"])
async def test_xid_on_a_mig_device_names_it(make: object) -> None:
    sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
    mig = sim.inventory().gpus[4].mig_devices[2]
    stream = make(sim).events()  # type: ignore[operator]
    events = await _collect(sim, stream, 1, lambda: sim.inject_xid(mig.uuid, xid=94))
    await stream.aclose()
    assert [_key(e) for e in events] == [(EventKind.XID, mig.parent_uuid, 94, mig.uuid)]


@pytest.mark.parametrize("make", [lambda s: s, nvml_over], ids=["sim", "nvml"])
async def test_lost_and_recovered_gpu_events(make: object) -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    uuid = sim.inventory().gpus[2].uuid
    stream = make(sim).events()  # type: ignore[operator]
    events = await _collect(sim, stream, 2, lambda: sim.lose_gpu(2))
    assert [_key(e) for e in events] == [(EventKind.XID, uuid, 79, None), (EventKind.GPU_LOST, uuid, None, None)]
    events = await _collect(sim, stream, 1, lambda: sim.recover_gpu(2))
    await stream.aclose()
    assert [_key(e) for e in events] == [(EventKind.GPU_RECOVERED, uuid, None, None)]


async def test_every_subscriber_gets_every_event(h100_sim: SimBackend) -> None:
    a, b = h100_sim.events(), h100_sim.events()
    first = asyncio.create_task(anext(a))
    second = asyncio.create_task(anext(b))
    await asyncio.sleep(0)
    h100_sim.inject_xid(0, xid=48)
    got = await asyncio.wait_for(asyncio.gather(first, second), 2)
    assert [e.xid for e in got] == [48, 48]


async def test_a_broken_nvml_event_stream_raises_instead_of_hanging() -> None:
    """If the watcher cannot even make its event set, the subscriber hears it (and can fail devices)."""
    sim = SimBackend.from_preset("l4-x2")
    stream = NvmlBackend(nvml=FakeNvml(sim, unsupported=frozenset({"nvmlEventSetCreate"}))).events()
    with pytest.raises(NotSupportedError, match="nvmlEventSetCreate"):
        await asyncio.wait_for(anext(stream), timeout=5)


def test_xid_event_support_per_gpu() -> None:
    sim = SimBackend.from_preset("l4-x2")
    assert set(nvml_over(sim).xid_event_support().values()) == {True}
    backend = NvmlBackend(nvml=FakeNvml(sim, unsupported=frozenset({"nvmlDeviceRegisterEvents"})))
    assert backend.xid_event_support() == {g.uuid: False for g in sim.inventory().gpus}


def test_mig_memory_parity_and_per_device_values() -> None:
    """Each MIG device has its own framebuffer reading on both backends; unset devices use none."""
    sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
    a, b = sim.inventory().gpus[0].mig_devices[:2]
    sim.set_telemetry(a.uuid, memory_used_mib=4000)
    nvml = nvml_over(sim)
    for mig in sim.inventory().mig_devices:
        assert nvml.mig_memory(mig.uuid) == sim.mig_memory(mig.uuid)
    got = nvml.mig_memory(a.uuid)
    assert (got.total_mib, got.used_mib, got.free_mib) == (a.memory_mib, 4000, a.memory_mib - 4000)
    assert nvml.mig_memory(b.uuid).used_mib == 0


def test_mig_memory_of_a_whole_gpu_or_a_lost_parent() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
    inv = sim.inventory()
    whole, mig = inv.gpus[7], inv.gpus[1].mig_devices[0]
    nvml = nvml_over(sim)
    for backend in (sim, nvml):
        with pytest.raises(NotFoundError, match="not a MIG device"):
            backend.mig_memory(whole.uuid)
        with pytest.raises(NotFoundError):
            backend.telemetry(mig.uuid)
    sim.lose_gpu(1)
    for backend in (sim, nvml):
        with pytest.raises(GpuLostError):
            backend.mig_memory(mig.uuid)


def test_a_mig_device_has_only_its_memory_reading() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
    mig = sim.inventory().gpus[0].mig_devices[0]
    with pytest.raises(ValueError, match="no reading gpu_util of its own"):
        sim.set_telemetry(mig.uuid, gpu_util=50)
    with pytest.raises(ValueError, match="outside MIG device"):
        sim.set_telemetry(mig.uuid, memory_used_mib=mig.memory_mib + 1)
    sim.set_telemetry(mig.uuid, memory_used_mib=100)
    assert sim.telemetry(mig.parent_uuid).memory_used_mib == 0, "the parent GPU's reading is untouched"


def test_pci_class_from_nvml_or_from_sysfs(tmp_path: Path) -> None:
    """NVML's extended PCI info where the driver has it; sysfs (as GFD reads it) where not."""
    sim = SimBackend.from_preset("l4-x2")
    gpus = sim.inventory().gpus
    assert {g.pci_class for g in gpus} == {0x030200}
    assert {g.pci_class for g in nvml_over(sim).inventory().gpus} == {0x030200}
    (tmp_path / gpus[0].pci_bus_id.lower()[4:]).mkdir()
    (tmp_path / gpus[0].pci_bus_id.lower()[4:] / "class").write_text("0x030000\n")
    old_driver = FakeNvml(sim, unsupported=frozenset({"nvmlDeviceGetPciInfoExt"}))
    read = NvmlBackend(nvml=old_driver, sysfs=tmp_path).inventory().gpus
    assert [g.pci_class for g in read] == [0x030000, None], "VGA read from sysfs; no class file is None"
