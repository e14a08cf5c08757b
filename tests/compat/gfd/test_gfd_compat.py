"""gpuchain's feature discovery labels against NVIDIA's GFD expected-label fixtures, both ways.

Fixtures (``fixtures/SOURCES.md``): the ``tests/expected-output*.txt`` files of
NVIDIA/k8s-device-plugin v0.20.0 (one regular expression per label line), the GPU inputs and
asserted values of its GFD tests, and the label example of its GFD README.

"Both ways": every label line gpuchain writes matches one of NVIDIA's expressions (upstream's own
check), and every expression is matched by one of gpuchain's lines (nothing NVIDIA writes is
missing). The second direction holds only where NVIDIA's own output covers the whole file:
real GPU models under the strategy the file is for, so those cases run on simulated real nodes:

- ``a100-40gb-x8``: 8 whole A100-SXM4-40GB (strategy none; with and without time-slicing).
- ``a100-40gb-x8-all-1g.5gb`` (``tests/compat/nodes``): every GPU 7x 1g.5gb (strategy single).
- ``h100-80gb-x8-mig-mixed``: 6 MIG-enabled H100 with 1g.10gb/2g.20gb/3g.40gb, 2 whole (mixed).

The upstream test inputs (a mock "MOCKMODEL" GPU, compute capability 0.0 once MIG is enabled)
leave expressions unmatched in NVIDIA's own output too, so for them the check is upstream's:
one way, plus the label values the upstream tests assert.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuchain.api.config.v1.config import parse_config
from gpuchain.cli import app
from gpuchain.discovery.labels import gfd_labels, sanitize
from gpuchain.discovery.output import render_feature_file
from gpuchain.gpu import catalog
from gpuchain.gpu.model import DriverInfo, Gpu, Inventory, MigDevice
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import load_topology

HERE = Path(__file__).parent
FIX = HERE / "fixtures"
NODES = HERE.parent / "nodes"
DOCS = HERE.parents[2] / "docs" / "discovery-exporter.md"


def expressions(name: str) -> list[re.Pattern[str]]:
    """NVIDIA's expected-output file as its test reads it: one expression per line, unanchored."""
    return [re.compile(line) for line in (FIX / name).read_text().rstrip("\n").split("\n")]


def unmatched_lines(output: str, patterns: list[re.Pattern[str]]) -> list[str]:
    """Upstream's direction (``checkResult``): output lines that match no expression (vGPU lines skipped)."""
    lines = [ln for ln in output.rstrip("\n").split("\n") if "vgpu" not in ln]
    return [ln for ln in lines if not any(p.search(ln) for p in patterns)]


def unmatched_patterns(output: str, patterns: list[re.Pattern[str]]) -> list[str]:
    """The other direction: expressions no output line matches."""
    lines = output.rstrip("\n").split("\n")
    return [p.pattern for p in patterns if not any(p.search(ln) for ln in lines)]


def _inventory(node: str) -> Inventory:
    topology = NODES / f"{node}.yaml"
    backend = SimBackend(load_topology(str(topology))) if topology.exists() else SimBackend.from_preset(node)
    return backend.inventory()


TIME_SLICING = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}"

BOTH_WAYS = [
    ("expected-output.txt", "a100-40gb-x8", ""),
    ("expected-output.txt", "a100-40gb-x8", TIME_SLICING),
    ("expected-output-mig-none.txt", "a100-40gb-x8", "flags: {migStrategy: none}"),
    ("expected-output-mig-none.txt", "h100-80gb-x8-mig-mixed", "flags: {migStrategy: none}"),
    ("expected-output-mig-single.txt", "a100-40gb-x8-all-1g.5gb", "flags: {migStrategy: single}"),
    ("expected-output-mig-mixed.txt", "h100-80gb-x8-mig-mixed", "flags: {migStrategy: mixed}"),
]


@pytest.mark.parametrize(("expected", "node", "config"), BOTH_WAYS, ids=lambda v: str(v)[:40])
def test_labels_match_nvidias_expected_output_both_ways(expected: str, node: str, config: str) -> None:
    output = render_feature_file(gfd_labels(_inventory(node), config=parse_config(config), timestamp=1764720000))
    patterns = expressions(expected)
    assert unmatched_lines(output, patterns) == []
    assert unmatched_patterns(output, patterns) == []


def test_vgpu_present_is_the_only_vgpu_label_written() -> None:
    """gpuchain writes ``vgpu.present`` as NVIDIA's GFD does on every GPU node, and not the vGPU
    host's driver version and branch (unsupported: NVIDIA reads them from the vGPU capability in
    PCI config space), so of upstream's vGPU expressions exactly those two stay unmatched."""
    output = render_feature_file(gfd_labels(_inventory("a100-40gb-x8"), config=parse_config(""), timestamp=1764720000))
    patterns = expressions("expected-output-vgpu.txt")
    assert [ln for ln in output.splitlines() if "vgpu" in ln] == ["nvidia.com/vgpu.present=false"]
    assert unmatched_patterns(output, patterns) == [p.pattern for p in patterns[1:]]


# --- upstream's GFD test inputs (fixtures/upstream-cases.yaml) ---

UPSTREAM = yaml.safe_load((FIX / "upstream-cases.yaml").read_text())


def _mock_inventory(devices: list[dict[str, Any]]) -> Inventory:
    """The mock node of upstream's GFD tests as a gpuchain inventory (same name, memory, compute
    capability, PCI class, driver and MIG devices)."""
    spec = UPSTREAM["gpu"]
    gpus = []
    for i, dev in enumerate(devices):
        enabled = bool(dev["mig_enabled"])
        uuid = f"GPU-00000000-0000-0000-0000-00000000000{i}"
        migs = tuple(
            MigDevice(
                uuid=f"MIG-00000000-0000-0000-0000-0000000000{i}{j}",
                parent_index=i,
                parent_uuid=uuid,
                index=j,
                profile=f"{gi}g.{gb}gb",
                gi_id=j,
                ci_id=ci,
                memory_mib=gb,
                multiprocessors=0,
            )
            for j, (gi, ci, gb) in enumerate(dev.get("migs", []))
        )
        gpus.append(
            Gpu(
                index=i,
                uuid=uuid,
                name=spec["name"],
                pci_bus_id=f"00000000:0{i}:00.0",
                pci_device_id=0,
                memory_mib=spec["memory_mib"],
                compute_capability=(0, 0) if enabled else tuple(spec["compute"]),
                numa_node=None,
                multiprocessors=0,
                mig_capable=enabled,
                mig_enabled=enabled,
                mig_devices=migs if enabled else (),
                pci_class=spec["pci_class"],
            )
        )
    driver = UPSTREAM["driver"]
    cuda = ".".join(str(v) for v in driver["cuda"])
    return Inventory(DriverInfo(driver["version"], cuda), tuple(gpus))


@pytest.mark.parametrize("case", UPSTREAM["cases"], ids=lambda c: c["test"])
def test_nvidias_gfd_test_inputs_give_its_labels(case: dict[str, Any]) -> None:
    config = parse_config(f"flags: {{migStrategy: {case['mig_strategy']}}}")
    labels = gfd_labels(_mock_inventory(case["devices"]), config=config, timestamp=1764720000, machine="mock-machine")
    assert unmatched_lines(render_feature_file(labels), expressions(case["expected_file"])) == []
    for key, value in case.get("labels", {}).items():
        assert labels.get(key) == value, key


def test_readme_node_labels() -> None:
    """The A100 node of NVIDIA's GFD README: every label it shows, with the same value.

    One difference, upstream's own: the README shows ``gpu.machine: NVIDIA DGX-2H``, a value with
    a space that Kubernetes refuses; NVIDIA's GFD sanitises it (spaces become '-') since v0.x, and
    so does gpuchain.
    """
    shown = yaml.safe_load((FIX / "readme-node-labels.yaml").read_text())
    gpu = Gpu(
        index=0,
        uuid="GPU-00000000-0000-0000-0000-000000000000",
        name="A100-SXM4-40GB",
        pci_bus_id="00000000:07:00.0",
        pci_device_id=0x20B0,
        memory_mib=int(shown["nvidia.com/gpu.memory"]),
        compute_capability=(8, 0),
        numa_node=0,
        multiprocessors=108,
        mig_capable=True,
        mig_enabled=False,
        pci_class=0x030200,
    )
    inventory = Inventory(DriverInfo("455.06", "11.1"), (gpu,))
    labels = gfd_labels(inventory, config=parse_config(""), timestamp=1594644571, machine="NVIDIA DGX-2H")
    expected = {k: str(v) for k, v in shown.items()} | {"nvidia.com/gpu.machine": "NVIDIA-DGX-2H"}
    assert {k: labels.get(k) for k in expected} == expected


@pytest.mark.parametrize(("capability", "family"), yaml.safe_load((FIX / "gpu-family.yaml").read_text()).items())
def test_gpu_family_per_compute_capability_as_nvidias_gfd(capability: str, family: str) -> None:
    major, minor = (int(v) for v in capability.split("."))
    assert catalog.architecture((major, minor)) == family


def test_gpu_operator_e2e_sharing_labels() -> None:
    """NVIDIA's GPU Operator e2e test (``test_gpu_sharing``) applies its ``tests/plugin-config.yaml``
    and asserts ``gpu.replicas=10`` and ``gpu.product=<product>-SHARED``; the same file through
    ``gpuchain gfd`` (the start-up path: file, environment, naming rule)."""
    config = HERE.parent / "deviceplugin" / "fixtures" / "gpu-operator" / "plugin-config.yaml"
    args = ["gfd", "--preset", "a100-40gb-x8", "--oneshot", "--output-file", "", "-o", "json"]
    result = CliRunner().invoke(app, [*args, "--config-file", str(config)])
    assert result.exit_code == 0, result.output
    labels = json.loads(result.stdout)
    product = sanitize(_inventory("a100-40gb-x8").gpus[0].name)
    assert labels["nvidia.com/gpu.replicas"] == "10"
    assert labels["nvidia.com/gpu.product"] == f"{product}-SHARED"


def test_docs_state_the_measured_figure() -> None:
    files = sorted({name for name, _, _ in BOTH_WAYS})
    text = DOCS.read_text()
    match = re.search(r"(\d+) of NVIDIA's (\d+) GFD\s+expected-output\s+files\s+match\s+both\s+ways", text)
    assert match, "docs/discovery-exporter.md states the compatibility figure"
    all_files = sorted(p.name for p in FIX.glob("expected-output*.txt"))
    assert (int(match.group(1)), int(match.group(2))) == (len(files), len(all_files))
