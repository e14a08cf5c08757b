"""The device plugin's CDI spec: nvidia-ctk's layout, every name Allocate answers defined, kept current.

The layout is checked against a spec ``nvidia-ctk cdi generate`` wrote in NVIDIA's own test
(tests/deviceplugin/fixtures/SOURCES.md); that containerd injects what it names is
tests/peers/test_real_node_device_plugin.py's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuchain.api.config.v1.config import parse_config
from gpuchain.api.config.v1.flags import DeviceIdStrategy, MigStrategy
from gpuchain.deviceplugin import cdi
from gpuchain.deviceplugin.allocate import allocate_container
from gpuchain.deviceplugin.plugin import DevicePlugin
from gpuchain.deviceplugin.resources import map_resources
from gpuchain.gpu.sim import SimBackend

NVIDIA_CTK = Path(__file__).with_name("fixtures") / "nvidia-ctk-cdi-generate-default.yaml"
DRIVER_ROOT = "/run/nvidia/driver"
CDI_NAME = re.compile(r"^[a-z0-9.-]+/[a-z0-9-]+=[A-Za-z0-9_.:-]+$")
"""``vendor/class=name`` as CDI's parser accepts it (pkg/parser: vendor and class, then the name)."""


def key_paths(obj: Any, prefix: str = "") -> set[str]:
    """Every key path in ``obj``, list positions collapsed: the shape of a spec, not its values."""
    if isinstance(obj, dict):
        out = set()
        for k, v in obj.items():
            out |= {f"{prefix}.{k}"} | key_paths(v, f"{prefix}.{k}")
        return out
    if isinstance(obj, list):
        return set().union(*(key_paths(v, prefix + "[]") for v in obj)) if obj else set()
    return set()


def nvidia_ctk_spec() -> dict[str, Any]:
    return yaml.safe_load(NVIDIA_CTK.read_text().replace("{{ .driverRoot }}", DRIVER_ROOT))


def spec_for(backend: SimBackend, config_text: str, dev_root: str = "/") -> dict[str, Any]:
    config = parse_config(config_text)
    resources = map_resources(backend.inventory(), config)
    # The control nodes nvidia-ctk's captured spec (the fixture) found on its node.
    control = ["/dev/nvidiactl"]
    return cdi.plugin_spec(
        resources, strategy=config.flags.plugin.device_id_strategy, control_nodes=control, dev_root=dev_root
    )


def test_the_spec_has_nvidia_ctks_layout(h100_sim: SimBackend) -> None:
    theirs = nvidia_ctk_spec()
    ours = spec_for(h100_sim, "flags: {plugin: {deviceIDStrategy: index}}", DRIVER_ROOT)
    # Nothing nvidia-ctk does not write; all of its device part (hooks and mounts are the driver's libraries).
    assert key_paths(ours) <= key_paths(theirs)
    assert key_paths(ours) == key_paths(theirs) - {p for p in key_paths(theirs) if ".hooks" in p or ".mounts" in p}
    # Devices named as nvidia-ctk names them, and its `all`: every GPU's node.
    assert [d["name"] for d in theirs["devices"]] == ["0", "all"]
    assert [d["name"] for d in ours["devices"]] == [*map(str, range(8)), "all"]
    every = [n for d in ours["devices"][:-1] for n in d["containerEdits"]["deviceNodes"]]
    assert ours["devices"][-1]["containerEdits"]["deviceNodes"] == every
    # A device node outside the node's own /dev: its host path under the driver root, as nvidia-ctk's.
    for spec in (theirs, ours):
        nodes = [n for d in spec["devices"] for n in d["containerEdits"]["deviceNodes"]]
        nodes += spec["containerEdits"]["deviceNodes"]
        assert all(n["hostPath"] == DRIVER_ROOT + n["path"] for n in nodes)
        assert "/dev/nvidiactl" in [n["path"] for n in spec["containerEdits"]["deviceNodes"]]
        assert "NVIDIA_VISIBLE_DEVICES=void" in spec["containerEdits"]["env"]
    assert ours["devices"][3]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia3", "hostPath": f"{DRIVER_ROOT}/dev/nvidia3"}
    ]
    # On the node's own /dev the path alone, as nvidia-ctk writes it for driver root /.
    assert spec_for(h100_sim, "")["devices"][0]["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia0"}]


@pytest.mark.parametrize("strategy", list(DeviceIdStrategy))
@pytest.mark.parametrize("list_strategy", ["cdi-cri", "cdi-annotations"])
def test_every_name_allocate_answers_is_in_the_spec(mig_sim: SimBackend, strategy: str, list_strategy: str) -> None:
    text = (
        f"flags: {{migStrategy: mixed, plugin: {{deviceIDStrategy: {strategy}, deviceListStrategy: {list_strategy}}}}}"
    )
    config = parse_config(text)
    assert config.flags.mig_strategy is MigStrategy.MIXED
    spec = spec_for(mig_sim, text)
    devices = {d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]}
    answered = []
    for res in map_resources(mig_sim.inventory(), config):
        for device in res.devices:
            alloc = allocate_container(res, ids=[device.id], flags=config.flags.plugin)
            names = alloc.cdi_devices or tuple(",".join(alloc.annotations.values()).split(","))
            (name,) = names
            assert CDI_NAME.match(name), name
            kind, unit = name.split("=")
            assert kind == spec["kind"] and unit in devices
            answered.append(unit)
            if device.mig_uuid is not None:  # a MIG device: its GPU's node and its two capability devices
                assert devices[unit][0] == f"/dev/nvidia{device.minor_number}"
                assert len(devices[unit]) == 3 and all(p.startswith("/dev/nvidia-caps/") for p in devices[unit][1:])
            else:
                assert devices[unit] == [f"/dev/nvidia{device.minor_number}"]
    assert sorted(set(devices) - {"all"}) == sorted(answered)


async def test_the_plugin_keeps_its_spec_current(h100_sim: SimBackend, tmp_path: Path) -> None:
    cdi_dir = tmp_path / "cdi"
    spec_file = cdi_dir / "k8s.device-plugin.nvidia.com-gpu.json"
    plugin = DevicePlugin(
        h100_sim, config=parse_config("flags: {plugin: {deviceListStrategy: cdi-cri}}"), socket_dir=tmp_path / "dp", env={},
        cdi_dir=cdi_dir,
    )  # fmt: skip
    gpus = [g.uuid for g in h100_sim.inventory().gpus]
    await plugin.start()
    try:
        names = [d["name"] for d in json.loads(spec_file.read_text())["devices"]]
        assert names == [*gpus, "all"]
        # Named by index now: the UUID entries are stale and go.
        await plugin.reload(parse_config("flags: {plugin: {deviceListStrategy: cdi-cri, deviceIDStrategy: index}}"))
        names = [d["name"] for d in json.loads(spec_file.read_text())["devices"]]
        assert names == [*map(str, range(8)), "all"]
        # Out of CDI mode: no spec left for the runtime to inject from.
        await plugin.reload(parse_config("flags: {plugin: {deviceListStrategy: envvar}}"))
        assert not spec_file.exists()
        assert list(cdi_dir.iterdir()) == []  # no temporary file left behind either
    finally:
        await plugin.stop()
