"""ResourceSlices for the H100 and MIG presets: devices, attributes, capacity, naming rules, schema."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest
from fakes.fake_pynvml import FakeNvml

from gpuchain.dra import slices
from gpuchain.dra.claims import attribute
from gpuchain.dra.kinds import DRIVER
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.sim import SimBackend

KUBE_VERSIONS = ("1.34.0", "1.36.0")


def _by_name(devices: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(d["name"]): d for d in devices}


def test_h100_node_publishes_one_device_per_gpu_with_its_attributes(h100_sim: SimBackend) -> None:
    inv = h100_sim.inventory()
    devices = _by_name(slices.render_devices(inv))
    assert list(devices) == [f"gpu-{i}" for i in range(8)]
    gpu = inv.gpu(3)
    d = devices["gpu-3"]
    assert attribute(d, "type") == "gpu"
    assert attribute(d, "uuid") == gpu.uuid
    assert attribute(d, "productName") == "NVIDIA H100 80GB HBM3"
    assert attribute(d, "architecture") == "Hopper"
    assert d["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}  # type: ignore[index]
    assert d["attributes"]["driverVersion"] == {"version": "570.86.15"}  # type: ignore[index]
    assert attribute(d, "pciBusID") == gpu.pci_bus_id
    assert attribute(d, "numaNode") == gpu.numa_node
    assert attribute(d, "migProfile") is None
    assert d["capacity"] == {"memory": {"value": "81559Mi"}, "multiprocessors": {"value": "132"}}


def test_mig_node_publishes_mig_devices_and_only_non_mig_gpus_whole(mig_sim: SimBackend) -> None:
    inv = mig_sim.inventory()
    devices = _by_name(slices.render_devices(inv))
    whole = sorted(n for n, d in devices.items() if attribute(d, "type") == "gpu")
    assert whole == ["gpu-6", "gpu-7"]  # GPUs 0-5 are in MIG mode: never published whole
    migs = {n: d for n, d in devices.items() if attribute(d, "type") == "mig"}
    assert len(migs) == len(inv.mig_devices) == 4 * 4 + 2 * 7
    profiles = sorted(attribute(d, "migProfile") for n, d in migs.items() if n.startswith("gpu-4-"))
    assert profiles == ["1g.10gb"] * 7
    mig = next(m for m in inv.mig_devices if m.parent_index == 0 and m.profile == "3g.40gb")
    d = devices[slices.mig_device_name(mig)]
    assert slices.mig_device_name(mig) == f"gpu-0-mig-3g40gb-{mig.gi_id}-{mig.ci_id}"
    assert attribute(d, "uuid") == mig.uuid and mig.uuid.startswith("MIG-")
    assert attribute(d, "parentUUID") == inv.gpu(0).uuid
    assert attribute(d, "pciBusID") == inv.gpu(0).pci_bus_id
    assert attribute(d, "numaNode") == 0
    assert d["capacity"]["memory"] == {"value": f"{mig.memory_mib}Mi"}  # type: ignore[index]


@pytest.mark.parametrize("preset", ["h100-80gb-x8", "h100-80gb-x8-mig-mixed", "a100-40gb-x8", "l4-x2"])
@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_rendered_slices_pass_the_api_schema_and_naming_rules(preset: str, version: str) -> None:
    sim = SimBackend.from_preset(preset)
    obj = slices.resource_slice(sim.topology.node, devices=slices.render_devices(sim.inventory()), generation=1)
    slices.check_slice(obj)
    kubernetes_validate.validate(obj, version, strict=True)
    assert obj["spec"]["driver"] == DRIVER
    assert obj["spec"]["pool"] == {"name": sim.topology.node, "generation": 1, "resourceSliceCount": 1}


def test_unhealthy_gpu_withdraws_it_and_its_mig_devices(mig_sim: SimBackend) -> None:
    inv = mig_sim.inventory()
    one_mig = inv.gpu(1).mig_devices[0]
    names = [d["name"] for d in slices.render_devices(inv, unhealthy={inv.gpu(0).uuid, one_mig.uuid})]
    assert not any(str(n).startswith("gpu-0-") for n in names)
    assert slices.mig_device_name(one_mig) not in names
    assert sum(1 for n in names if str(n).startswith("gpu-1-")) == len(inv.gpu(1).mig_devices) - 1


def test_pool_generation_grows_only_on_change(h100_sim: SimBackend) -> None:
    devices = slices.render_devices(h100_sim.inventory())
    desired = slices.resource_slice("n", devices=devices, generation=0)
    assert slices.pool_generation({}, [desired]) == 1
    live = slices.resource_slice("n", devices=devices, generation=4)
    assert slices.pool_generation({slices.slice_name("n"): live}, [desired]) == 4
    assert (
        slices.pool_generation(
            {slices.slice_name("n"): live}, [slices.resource_slice("n", devices=devices[1:], generation=0)]
        )
        == 5
    )
    # a slice added to the pool, or one that is no longer wanted, is a change too
    other = slices.resource_slice("n", devices=[], generation=0, name="other")
    assert slices.pool_generation({slices.slice_name("n"): live}, [desired, other]) == 5
    assert slices.pool_generation({slices.slice_name("n"): live, "other": other}, [desired]) == 5


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(name="GPU_0"), "DNS label"),
        (lambda d: d["attributes"].update(cudaComputeCapability={"version": "9.0"}), "semantic version"),
        (lambda d: d["attributes"].update({"bad-name": {"int": 1}}), "C identifier"),
        (lambda d: d["attributes"].update(productName={"string": "x" * 65}), "at most 64"),
        (lambda d: d["attributes"].update(uuid={"string": "a", "int": 1}), "exactly one"),
        (lambda d: d["attributes"].update({f"a{i}": {"int": i} for i in range(30)}), "at most 32"),
    ],
)
def test_check_devices_names_what_the_api_server_would_reject(
    h100_sim: SimBackend, mutate: object, message: str
) -> None:
    device = copy.deepcopy(slices.render_devices(h100_sim.inventory())[0])
    mutate(device)  # type: ignore[operator]
    with pytest.raises(slices.SliceError, match=message):
        slices.check_devices([device])


def test_versions_become_strict_semver() -> None:
    assert slices.semver("12.8") == "12.8.0"
    assert slices.semver("535.104.05") == "535.104.5"
    assert slices.semver("570.86.15") == "570.86.15"
    with pytest.raises(slices.SliceError, match="numeric"):
        slices.semver("r570")


def test_architecture_names() -> None:
    assert slices.architecture((8, 0)) == "Ampere"
    assert slices.architecture((8, 9)) == "Ada Lovelace"
    assert slices.architecture((10, 0)) == "Blackwell"


@pytest.mark.parametrize(
    ("cc", "name"),
    [((6, 1), "Pascal"), ((7, 2), "Volta"), ((8, 6), "Ampere"), ((8, 7), "Ampere"), ((12, 0), "Blackwell")],
)
def test_architecture_agrees_with_feature_discovery_beyond_the_catalog(cc: tuple[int, int], name: str) -> None:
    """The DRA attribute and GFD's gpu.family come from one table (DRA had "Unknown" for 6.x and 8.x)."""
    assert slices.architecture(cc) == name
    assert slices.architecture((4, 0)) == "Unknown"


@pytest.mark.parametrize("preset", ["h100-80gb-x8", "h100-80gb-x8-mig-mixed"])
def test_nvml_backend_publishes_the_same_slice(preset: str) -> None:
    """`dra-plugin --backend nvml` sees what the simulator sees (through the fake pynvml)."""
    sim = SimBackend.from_preset(preset)
    nvml = NvmlBackend(nvml=FakeNvml(sim), probe_interval=0.2)  # type: ignore[arg-type]
    try:
        assert slices.render_devices(nvml.inventory()) == slices.render_devices(sim.inventory())
    finally:
        nvml.close()
