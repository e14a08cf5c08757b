"""mig-parted v1 files load unchanged; anything else is rejected with file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.gpu import catalog
from gpuchain.mig.config import LayoutError, default_config, load_config, parse_config

UPSTREAM_STYLE = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  custom-config:
    - device-filter: "0x233010DE"
      devices: [0, 1, 2, 3]
      mig-enabled: false
    - device-filter: ["0x233010DE", "0x20B210DE"]
      devices: [4, 5, 6, 7]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
"""


def test_upstream_style_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(UPSTREAM_STYLE)
    cfg = load_config(path)
    entries = cfg.layout("custom-config")
    assert entries[0].device_ids == (0x233010DE,) and entries[0].devices == [0, 1, 2, 3]
    assert entries[1].device_ids == (0x233010DE, 0x20B210DE)
    assert entries[1].layout == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert entries[1].selects(5, 0x233010DE) and not entries[1].selects(5, 0x233510DE)
    assert not entries[1].selects(2, 0x233010DE)


@pytest.mark.parametrize(
    ("text", "line", "field", "reason"),
    [
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n      extra: 1\n",
            6,
            "mig-configs.a.0.extra",
            "unknown field",
        ),
        ("version: v2\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n", 1, "version", "'v1'"),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n",
            4,
            "mig-configs.a.0",
            "mig-devices is required",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n      mig-devices: {1g.10gb: 1}\n",
            4,
            "mig-configs.a.0",
            "must be empty",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {1g10gb: 1}\n",
            6,
            "mig-configs.a.0.mig-devices",
            "not a MIG profile name",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n"
            "      mig-devices: {1c.1g.5gb+me-me: 1}\n",
            6,
            "mig-configs.a.0.mig-devices",
            "both '+' and '-' attributes",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n"
            "      mig-devices: {1g.10gb: 0, 2g.20gb: 0}\n",
            6,
            "mig-configs.a.0.mig-devices",
            "every count is 0",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - device-filter: '0x233010DE:0x16C110DE'\n      devices: all\n"
            "      mig-enabled: false\n",
            4,
            "mig-configs.a.0.device-filter",
            "PCI subsystem id",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: some\n      mig-enabled: false\n",
            4,
            "mig-configs.a.0.devices",
            "must be `all` or a list",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - device-filter: H100\n      devices: all\n      mig-enabled: false\n",
            4,
            "mig-configs.a.0.device-filter",
            "hex PCI id",
        ),
        ("version: v1\nmig-configs:\n  a: []\n", 2, "mig-configs", "at least one entry"),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: 'yes'\n",
            5,
            "mig-configs.a.0.mig-enabled",
            "boolean",
        ),
    ],
)
def test_bad_files_name_line_and_field(text: str, line: int, field: str, reason: str) -> None:
    with pytest.raises(ConfigFileError) as info:
        parse_config(text, "mig.yaml")
    err = info.value
    assert (err.source, err.line, err.field) == ("mig.yaml", line, field), str(err)
    assert reason in err.reason


def test_layout_that_cannot_fit_a_filtered_gpu_names_gpu_profile_and_limit() -> None:
    text = (
        "version: v1\nmig-configs:\n  too-many:\n    - device-filter: '0x233010DE'\n      devices: all\n"
        "      mig-enabled: true\n      mig-devices: {3g.40gb: 3}\n"
    )
    with pytest.raises(ConfigFileError) as info:
        parse_config(text)
    assert "too-many" in str(info.value)
    assert "H100-80GB: 3 x 3g.40gb does not fit: at most 2 per GPU" in str(info.value)


def test_unknown_layout_name_lists_the_known_ones() -> None:
    with pytest.raises(LayoutError, match="no MIG layout named 'nope'.*all-disabled"):
        default_config().layout("nope")


def test_default_config_has_the_usual_names_for_every_catalogued_profile() -> None:
    cfg = default_config()
    names = set(cfg.mig_configs)
    assert {"all-disabled", "all-enabled", "all-balanced"} <= names
    for model in catalog.MODELS.values():
        for prof in model.mig_profiles:
            assert "all-" + prof.name.replace("+", ".") in names
    by_filter = {e.device_ids: e.layout for e in cfg.layout("all-1g.10gb")}
    assert by_filter == {
        catalog.model("A100-40GB").pci_device_ids: {"1g.10gb": 4},
        (*catalog.model("A100-80GB").pci_device_ids, *catalog.model("H100-80GB").pci_device_ids): {"1g.10gb": 7},
    }
    balanced = {e.device_ids[0]: e.layout for e in cfg.layout("all-balanced")}
    assert balanced[catalog.model("H100-80GB").pci_device_id] == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert balanced[catalog.model("A100-40GB").pci_device_id] == {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    assert balanced[catalog.model("H200-141GB").pci_device_id] == {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
    assert cfg.layout("all-enabled")[0].mig_enabled and cfg.layout("all-enabled")[0].layout == {}


A100_PCIE_40GB = 0x20F110DE
A100_PCIE_80GB = 0x20B510DE


def test_default_layouts_select_pcie_cards_by_every_pci_id_of_the_model() -> None:
    cfg = default_config()
    assert A100_PCIE_40GB in catalog.model("A100-40GB").pci_device_ids
    assert A100_PCIE_80GB in catalog.model("A100-80GB").pci_device_ids
    for name, pci, layout in [
        ("all-1g.5gb", A100_PCIE_40GB, {"1g.5gb": 7}),
        ("all-1g.10gb", A100_PCIE_80GB, {"1g.10gb": 7}),
        ("all-balanced", A100_PCIE_40GB, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
    ]:
        chosen = [e.layout for e in cfg.layout(name) if e.selects(0, pci)]
        assert chosen == [layout], name


def test_a_filter_naming_a_pcie_id_is_checked_against_its_model() -> None:
    text = (
        "version: v1\nmig-configs:\n  too-many:\n    - device-filter: '0x20F110DE'\n      devices: all\n"
        "      mig-devices: {1g.5gb: 8}\n      mig-enabled: true\n"
    )
    with pytest.raises(ConfigFileError, match="A100-40GB: 8 x 1g.5gb does not fit"):
        parse_config(text)


def test_default_config_round_trips_through_yaml() -> None:
    cfg = default_config()
    assert parse_config(cfg.to_yaml()) == cfg
