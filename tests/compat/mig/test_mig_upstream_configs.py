"""NVIDIA's own MIG configs load unchanged and every layout applies where mig-parted would.

Fed the GPU Operator's default ConfigMap and mig-parted's default and example configs
(fixtures/SOURCES.md: repository, path, commit). For each layout and each catalogued GPU
product, the expected outcome is mig-parted's, derived from the file and the GPU's profile
table, not from gpuchain's placement code:

- mig-parted walks the entries whose device-filter matches the GPU's PCI id and whose devices
  include it; for MIG-enabled entries it resolves every profile name against the GPU's own
  profiles (name match: slices, memory, attributes) and fails when one is missing;
- otherwise it creates exactly the listed MIG devices, one per count.

So: where every selected profile exists on the card, applying must succeed and leave exactly
those MIG devices (and applying again changes nothing); where one is missing, it must fail
before touching the GPU. The figures docs/mig.md states are asserted here.
"""

from __future__ import annotations

import re
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.common.schema import validate
from gpuchain.gpu import catalog
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import Topology
from gpuchain.mig.apply import apply, check
from gpuchain.mig.config import LayoutError, MigPartedConfig, default_config, load_config

FIXTURES = Path(__file__).parent / "fixtures"
DOCS = Path(__file__).parents[3] / "docs" / "mig.md"


def _config_text(path: Path) -> str:
    """The mig-parted config in a file: the file itself, or the config.yaml of its ConfigMap."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        if doc.get("kind") == "ConfigMap" and "config.yaml" in doc.get("data", {}):
            return str(doc["data"]["config.yaml"])
    assert len(docs) == 1 and "mig-configs" in docs[0], path
    return path.read_text()


UPSTREAM_FILES = sorted(p for p in FIXTURES.rglob("*.yaml") if p.name != "go-nvlib-profile-format.yaml")
OPERATOR_DEFAULT = FIXTURES / "gpu-operator" / "0400_configmap.yaml"
MIG_PARTED_DEFAULT = FIXTURES / "mig-parted" / "config-default.yaml"


def _load(path: Path) -> MigPartedConfig:
    # The user's path: `mig config/apply -f` take NVIDIA's ConfigMap file as it is.
    return load_config(path)


@pytest.mark.parametrize("path", UPSTREAM_FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_upstream_file_loads_unchanged_with_every_layout(path: Path) -> None:
    raw = yaml.safe_load(_config_text(path))
    cfg = _load(path)
    assert list(cfg.mig_configs) == list(raw["mig-configs"])
    for name, entries in raw["mig-configs"].items():
        assert [e.layout for e in cfg.layout(name)] == [
            {p: c for p, c in (e.get("mig-devices") or {}).items() if c} for e in entries
        ]


PRODUCTS = {k: m for k, m in {**catalog.MODELS, **catalog.VARIANTS}.items() if m.mig_capable}


def _mig_parted_outcome(cfg: MigPartedConfig, layout: str, gpu: catalog.GpuModel) -> Counter[str] | None:
    """What mig-parted leaves on a one-GPU node of this product: the MIG devices, or None (it fails)."""
    selected = [e for e in cfg.layout(layout) if e.selects(0, gpu.pci_device_id)]
    devices: Counter[str] = Counter()
    for entry in selected:
        if not entry.mig_enabled:
            continue
        for name, count in entry.layout.items():
            wanted = catalog.parse_profile(name)
            if not any(catalog.parse_profile(p.name).gpu_instance == wanted.gpu_instance for p in gpu.mig_profiles):
                return None
            devices[wanted.canonical] += count
    return devices if selected else None


def _node(key: str) -> SimBackend:
    return SimBackend(validate(Topology, {"node": f"compat-{key.lower()}", "gpus": [{"model": key}]}))


def _run(cfg: MigPartedConfig, layout: str) -> tuple[int, int]:
    applied = refused = 0
    for key, gpu in PRODUCTS.items():
        expected = _mig_parted_outcome(cfg, layout, gpu)
        backend = _node(key)
        before = backend.inventory()
        if expected is None:
            with pytest.raises(LayoutError):
                apply(backend, config=cfg, name=layout)
            assert backend.inventory() == before, f"{layout} on {key} changed the GPU before failing"
            refused += 1
            continue
        apply(backend, config=cfg, name=layout)
        got = Counter(m.profile for m in backend.inventory().gpu(0).mig_devices)
        assert got == expected, f"{layout} on {key}"
        assert apply(backend, config=cfg, name=layout).steps == (), f"{layout} on {key} is not idempotent"
        assert check(backend, config=cfg, name=layout) == []
        applied += 1
    return applied, refused


OPERATOR_CFG = _load(OPERATOR_DEFAULT)


@pytest.mark.parametrize("layout", list(OPERATOR_CFG.mig_configs))
def test_each_operator_default_layout_applies_where_mig_parted_would(layout: str) -> None:
    _run(OPERATOR_CFG, layout)


def test_mig_parted_default_and_examples_apply_where_mig_parted_would() -> None:
    for path in (MIG_PARTED_DEFAULT, FIXTURES / "mig-parted" / "examples-config.yaml"):
        cfg = _load(path)
        for layout in cfg.mig_configs:
            if all(e.devices == "all" for e in cfg.layout(layout)):
                _run(cfg, layout)


def _figures() -> dict[str, Any]:
    """The compatibility figures, measured over the GPU Operator's default ConfigMap."""
    per_layout = {name: _run(OPERATOR_CFG, name) for name in OPERATOR_CFG.mig_configs}
    return {
        "layouts": len(per_layout),
        "products": len(PRODUCTS),
        "applied": sum(a for a, _ in per_layout.values()),
        "refused": sum(r for _, r in per_layout.values()),
        "nowhere": sorted(n for n, (a, _) in per_layout.items() if a == 0 and n != "all-disabled"),
    }


def test_docs_state_the_measured_figures() -> None:
    figures = _figures()
    text = DOCS.read_text()
    stated = re.search(r"<!-- compat-figures -->\s*(.*?)<!-- /compat-figures -->", text, flags=re.S)
    assert stated is not None, "docs/mig.md lost its compatibility figures block"
    block = stated.group(1)
    for key in ("layouts", "products", "applied", "refused"):
        assert re.search(rf"\b{figures[key]}\b[^|\n]*\b{key}\b", block), (key, figures[key], block)
    for name in figures["nowhere"]:
        assert f"`{name}`" in block, name


NOT_CATALOGUED = {0x20B610DE: "PG506-96GB: no NVIDIA profile table or -lgip transcript found"}


def test_every_pci_id_the_operator_default_filters_on_is_a_catalogued_product() -> None:
    ids = {i for entries in OPERATOR_CFG.mig_configs.values() for e in entries for i in e.device_ids}
    known = {m.pci_device_id for m in PRODUCTS.values()}
    assert ids - known == set(NOT_CATALOGUED)
    assert len(ids) == 27


def _counts_from_the_configmap() -> set[str]:
    """Products whose catalog table has no source of instance counts but NVIDIA's ConfigMap itself.

    The catalog's ``cm`` source supplies "per-GPU counts of all-<profile>" (mig_catalog.yaml header):
    for a table with neither the MIG guide nor an ``nvidia-smi mig -lgip`` transcript, comparing its
    counts with the ConfigMap would compare the ConfigMap with itself.
    """
    data = yaml.safe_load((resources.files("gpuchain.gpu") / "mig_catalog.yaml").read_text(encoding="utf-8"))
    only_cm = {
        key
        for key, t in data["tables"].items()
        if not any(src == "mig-guide" or str(src).startswith("lgip:") for src in t["sources"])
    }
    return {
        k
        for m in data["models"]
        if m.get("mig") in only_cm
        for k in (m["key"], *(v["key"] for v in m.get("variants", [])))
    }


def test_nvidia_fills_each_card_to_the_instance_count_the_catalog_has() -> None:
    """NVIDIA's all-<profile> layouts fill a card to its limit: the counts in the ConfigMap are the
    instance counts of the catalog, checked for every card whose counts come from the MIG guide or an
    `nvidia-smi mig -lgip` transcript (H20, B300 and GB300 have neither: their counts are the ConfigMap's)."""
    excluded = _counts_from_the_configmap()
    assert {"H20", "B300", "GB300"} <= excluded, excluded
    checked = 0
    for name, entries in OPERATOR_CFG.mig_configs.items():
        for entry in entries:
            if name == "all-balanced" or len(entry.layout) != 1:
                continue
            ((profile, count),) = entry.layout.items()
            for key, gpu in PRODUCTS.items():
                prof = next((p for p in gpu.mig_profiles if p.name == profile), None)
                if key not in excluded and prof is not None and entry.selects(0, gpu.pci_device_id):
                    assert prof.max_instances == count, (name, key)
                    checked += 1
    assert checked == 184


def _devices_after(cfg: MigPartedConfig, layout: str, key: str) -> Counter[str] | None:
    backend = _node(key)
    try:
        apply(backend, config=cfg, name=layout)
    except LayoutError:
        return None
    return Counter(m.profile for m in backend.inventory().gpu(0).mig_devices)


def test_built_in_layouts_give_what_nvidias_default_gives_under_the_same_name() -> None:
    """gpuchain's built-in layouts (`gpuchain mig config`) carry every name of NVIDIA's default that a
    catalogued card can hold, and wherever NVIDIA's applies, the built-in one creates the same MIG devices.
    The built-in filters list every PCI id of a model, so they also cover the few cards NVIDIA's leave out."""
    built_in = default_config()
    assert set(OPERATOR_CFG.mig_configs) - set(built_in.mig_configs) == {"all-3g.95gb", "all-4g.95gb", "all-7g.189gb"}
    extra = []
    for layout in set(OPERATOR_CFG.mig_configs) & set(built_in.mig_configs):
        for key in PRODUCTS:
            theirs, ours = _devices_after(OPERATOR_CFG, layout, key), _devices_after(built_in, layout, key)
            if theirs is not None:
                assert ours == theirs, (layout, key)
            elif ours is not None:
                extra.append((layout, key))
    assert sorted(extra) == [
        ("all-1g.35gb", "H200-NVL"),
        ("all-balanced", "RTX-PRO-6000-MAXQ"),
        ("all-balanced", "RTX-PRO-6000-WS"),
    ]


def test_cli_loads_nvidias_configmap_as_shipped() -> None:
    # gpu-operator's assets/state-mig-manager/0400_configmap.yaml: a ConfigMap wrapping config.yaml.
    result = CliRunner().invoke(app, ["mig", "config", "-f", str(OPERATOR_DEFAULT)])
    assert result.exit_code == 0, result.output
    assert set(yaml.safe_load(result.stdout)["mig-configs"]) == set(
        yaml.safe_load(_config_text(OPERATOR_DEFAULT))["mig-configs"]
    )


def test_a_bad_configmap_is_named_by_its_line_in_the_file(tmp_path: Path) -> None:
    text = OPERATOR_DEFAULT.read_text()
    bad = tmp_path / "cm.yaml"
    bad.write_text(text.replace("mig-enabled: false", "mig-enabld: false", 1))
    line = next(i for i, t in enumerate(bad.read_text().splitlines(), 1) if "mig-enabld" in t)
    result = CliRunner().invoke(app, ["mig", "config", "-f", str(bad)])
    assert result.exit_code == 2
    assert f"cm.yaml:{line}: mig-configs.all-disabled.0.mig-enabld: unknown field" in result.output
    wrong_key = tmp_path / "key.yaml"
    wrong_key.write_text(text.replace("config.yaml: |", "config.yml: |"))
    result = CliRunner().invoke(app, ["mig", "config", "-f", str(wrong_key)])
    assert result.exit_code == 2 and "under data.config.yaml" in result.output and "config.yml" in result.output
