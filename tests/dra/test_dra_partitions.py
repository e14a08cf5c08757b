"""MIG as partitionable devices: the slice builder against the catalog's MIG tables and the simulated
GPU, which refuses exactly what the hardware refuses (overlap, legal starts, compute slices, +me).

The counters are what keeps the scheduler from booking one slice twice, so the tests hold them to
the MIG tables: every placement the builder offers can be created, any set of placements whose
counters fit together can be created together, overlapping ones never fit, and no profile fits more
often than its table's instance limit.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuchain.common.yamlfile import load_yaml_model
from gpuchain.dra import partitions, slices
from gpuchain.gpu import catalog
from gpuchain.gpu.errors import InvalidConfigError
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import Topology
from gpuchain.kube.objects import Obj

MIG_MODELS = sorted(key for key, m in catalog.MODELS.items() if m.mig_capable)


def one_gpu(model: str, mig: bool = True) -> SimBackend:
    """A node with one GPU of ``model``, MIG mode on with no instances (or off)."""
    layout = "\n    mig: {}" if mig else ""
    return SimBackend(load_yaml_model(Topology, text=f"node: n\ngpus:\n  - model: {model}{layout}\n"))


def amount(value: str) -> int:
    return int(value.removesuffix("Mi"))


def consumed(devices: list[Obj]) -> Counter[str]:
    total: Counter[str] = Counter()
    for device in devices:
        for use in device["consumesCounters"]:
            total.update({k: amount(v["value"]) for k, v in use["counters"].items()})
    return total


def fit(part: partitions.GpuSlice, devices: list[Obj]) -> bool:
    """Whether the scheduler may allocate ``devices`` together: no counter over what the set has."""
    have = {k: amount(v["value"]) for k, v in part.counter_set["counters"].items()}
    return all(n <= have[k] for k, n in consumed(devices).items())


def gpu_slice(sim: SimBackend) -> partitions.GpuSlice:
    (part,) = slices.render_gpu_slices(sim.inventory())
    return part


def placements(part: partitions.GpuSlice) -> list[Obj]:
    return [d for d in part.devices if d["attributes"]["type"]["string"] == "mig"]


@pytest.mark.parametrize("model", MIG_MODELS)
def test_counters_add_up_to_the_gpu(model: str) -> None:
    sim = one_gpu(model)
    part = gpu_slice(sim)
    gpu_model = catalog.model(model)
    counters = part.counter_set["counters"]
    assert part.counter_set["name"] == "gpu-0-counter-set"
    assert {k for k in counters if k.startswith("memory-slice-")} == {
        f"memory-slice-{i}" for i in range(gpu_model.memory_slices)
    }
    assert counters["compute-slices"] == {"value": str(gpu_model.compute_slices)}
    # NVIDIA's counter names, each the largest any profile takes
    whole = max(gpu_model.mig_profiles, key=lambda p: p.gi_slices)
    assert counters["multiprocessors"] == {"value": str(whole.multiprocessors)}
    # memory at least the whole profile's (more where derived figures would refuse a legal layout: below)
    assert amount(counters["memory"]["value"]) >= whole.memory_mib
    assert {"copy-engines", "decoders", "encoders", "jpeg-engines", "ofa-engines"} <= set(counters)
    # the full GPU takes all of it (its MIG mode can be switched off: Hopper and later)
    full = part.devices[0]
    if partitions.offers_full_gpu(part.gpu):
        assert full["name"] == "gpu-0" and full["consumesCounters"] == [
            {"counterSet": "gpu-0-counter-set", "counters": counters}
        ]
    for device in placements(part):
        assert fit(part, [device]), device["name"]
    # no profile fits more often than its table allows, and each fits that often (packed by start)
    for profile in gpu_model.mig_profiles:
        mine = [d for d in placements(part) if d["attributes"]["migProfile"]["string"] == profile.name]
        packed: list[Obj] = []
        for device in mine:
            if fit(part, [*packed, device]):
                packed.append(device)
        assert len(packed) == profile.max_instances, profile.name
    counters, devices = slices.pool_slices("n", plain=[], parts=[part])[1:]  # checks the GPU (check_gpu_slice)
    assert counters["spec"]["sharedCounters"] == [part.counter_set] and devices["spec"]["devices"] == part.devices
    for obj in (counters, devices):
        slices.check_slice({**obj, "spec": {**obj["spec"], "pool": {**obj["spec"]["pool"], "generation": 1}}})


@pytest.mark.parametrize("model", MIG_MODELS)
def test_every_placement_is_one_the_gpu_creates(model: str) -> None:
    sim = one_gpu(model)
    part = gpu_slice(sim)
    gpu_model = catalog.model(model)
    offered = {
        (d["attributes"]["migProfile"]["string"], d["attributes"]["memorySliceStart"]["int"]) for d in placements(part)
    }
    assert offered == {(p.name, s) for p in gpu_model.mig_profiles for s in p.starts}
    for name, start in sorted(offered):
        gi = sim.create_gpu_instance(0, profile=name, start=start)
        sim.destroy_gpu_instance(0, gi)


@pytest.mark.parametrize("model", ["A100-40GB", "H100-80GB", "A30"])
def test_overlapping_placements_never_fit_and_fitting_pairs_are_created(model: str) -> None:
    sim = one_gpu(model)
    part = gpu_slice(sim)
    full = [d for d in part.devices if d["attributes"]["type"]["string"] == "gpu"]
    for a, b in itertools.combinations(placements(part), 2):
        slices_a = {k for k in a["consumesCounters"][0]["counters"] if k.startswith("memory-slice-")}
        slices_b = {k for k in b["consumesCounters"][0]["counters"] if k.startswith("memory-slice-")}
        if slices_a & slices_b:
            assert not fit(part, [a, b]), (a["name"], b["name"])
        if fit(part, [a, b]):
            assert_created(sim, [a, b])
        for whole in full:
            assert not fit(part, [whole, a])


def assert_created(sim: SimBackend, devices: list[Obj]) -> None:
    """Create every device's GPU instance on the simulated GPU (it refuses what hardware refuses), then clean up."""
    made: list[int] = []
    try:
        for d in devices:
            made.append(
                sim.create_gpu_instance(
                    0, profile=d["attributes"]["migProfile"]["string"], start=d["attributes"]["memorySliceStart"]["int"]
                )
            )
    except InvalidConfigError as exc:
        raise AssertionError(f"counters let {[d['name'] for d in devices]} through, the GPU refuses: {exc}") from exc
    finally:
        for gi in made:
            sim.destroy_gpu_instance(0, gi)


@pytest.mark.parametrize("model", ["A100-40GB", "H100-80GB", "H200-141GB"])
@given(data=st.data())
def test_any_placements_whose_counters_fit_are_created_together(model: str, data: st.DataObject) -> None:
    sim = one_gpu(model)
    part = gpu_slice(sim)
    chosen = data.draw(
        st.lists(st.sampled_from(placements(part)), min_size=1, max_size=7, unique_by=lambda d: d["name"])
    )
    if fit(part, chosen):
        assert_created(sim, chosen)


def test_names_are_nvidias_and_stable(h100_sim: SimBackend) -> None:
    parts = slices.render_gpu_slices(h100_sim.inventory())
    assert [p.gpu.index for p in parts] == list(range(8))
    names = [d["name"] for d in parts[3].devices]
    assert names[:3] == ["gpu-3", "gpu-3-mig-1g10gb-0-0", "gpu-3-mig-1g10gb-0-1"]
    assert "gpu-3-mig-1g10gb-me-7-6" in names and "gpu-3-mig-7g80gb-4-0" in names
    assert "gpu-3-mig-3g40gb-2-4" in names
    pattern = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")  # NVIDIA's canonical MIG name (mig.go)
    for device in parts[3].devices[1:]:
        found = pattern.match(device["name"])
        assert found is not None and found.group(1) == "3"
        assert int(found.group(4)) == device["attributes"]["memorySliceStart"]["int"]
    assert len(set(names)) == len(names)
    assert [d["name"] for d in slices.render_gpu_slices(h100_sim.inventory())[3].devices] == names


def test_which_gpus_are_partitionable() -> None:
    ampere_on, ampere_off = one_gpu("A100-40GB"), one_gpu("A100-40GB", mig=False)
    hopper_off = one_gpu("H100-80GB", mig=False)
    # Ampere with MIG on: placements only (the whole GPU would need a reset to switch MIG off)
    (part,) = slices.render_gpu_slices(ampere_on.inventory())
    assert all(d["attributes"]["type"]["string"] == "mig" for d in part.devices)
    # Ampere with MIG off: a plain GPU in the node's plain slice, no partitions
    assert slices.render_gpu_slices(ampere_off.inventory()) == []
    assert [d["name"] for d in slices.render_devices(ampere_off.inventory(), partitionable=True)] == ["gpu-0"]
    # Hopper switches without a reset: both, and the plain slice does not list the GPU again
    (part,) = slices.render_gpu_slices(hopper_off.inventory())
    assert part.devices[0]["name"] == "gpu-0" and len(part.devices) > 1
    assert slices.render_devices(hopper_off.inventory(), partitionable=True) == []
    # GPUs without a MIG table stay plain
    l4 = SimBackend.from_preset("l4-x2")
    assert slices.render_gpu_slices(l4.inventory()) == []


def test_health_goes_by_the_parent(h100_sim: SimBackend) -> None:
    inv = h100_sim.inventory()
    sick = inv.gpu(2).uuid
    withdrawn = slices.render_gpu_slices(inv, unhealthy={sick})
    assert withdrawn[2].devices == [] and withdrawn[2].counter_set == withdrawn[1].counter_set | {
        "name": "gpu-2-counter-set"
    }
    assert all(d.devices for i, d in enumerate(withdrawn) if i != 2)
    taint = {"key": "gpu.gpuchain.io/unhealthy", "value": "xid-48", "effect": "NoExecute"}

    def taint_of(gpu_uuid: str, mig_uuid: str | None) -> Obj | None:
        assert mig_uuid is None  # placements have no MIG device yet: their parent's health is theirs
        return taint if gpu_uuid == sick else None

    tainted = slices.render_gpu_slices(inv, taint_of=taint_of)
    assert all(d["taints"] == [taint] for d in tainted[2].devices)
    assert all(d["taints"] == [] for d in tainted[0].devices)
