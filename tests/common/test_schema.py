"""``common.schema``: the light validator of the node agents' inputs reports what pydantic did, in
the same shape, so ``yamlfile`` names file, line and field for both, and a config written back
with ``dump`` reads back the same."""

from __future__ import annotations

import pytest

from gpuchain.api.config.v1.config import Config, parse_config
from gpuchain.api.config.v1.flags import MigStrategy
from gpuchain.common.schema import SchemaError, dump, validate
from gpuchain.common.yamlfile import ConfigFileError, load_yaml_model
from gpuchain.gpu.topology import Topology


def test_every_problem_is_found_each_at_its_path() -> None:
    with pytest.raises(SchemaError) as err:
        validate(Config, {"flags": {"migStrategy": "half", "plugin": {"passDeviceSpecs": "yes?"}}, "extra": 1})
    found = {".".join(map(str, e["loc"])) for e in err.value.errors()}
    assert found == {"flags.migStrategy", "flags.plugin.passDeviceSpecs", "extra"}
    kinds = {".".join(map(str, e["loc"])): e["type"] for e in err.value.errors()}
    assert kinds["extra"] == "extra_forbidden"


def test_a_field_check_sees_the_fields_above_it_whatever_the_key_order() -> None:
    text = "gpus: [{numaNodes: [0, 1, 0], count: 2, model: H100-80GB}]"
    with pytest.raises(ConfigFileError) as err:
        load_yaml_model(Topology, text=text, source="topo.yaml")
    assert err.value.field == "gpus.0.numaNodes" and "3 entries for 2 GPUs" in err.value.reason


def test_what_dump_writes_validates_back_to_the_same_config() -> None:
    config = parse_config(
        "flags: {migStrategy: mixed, plugin: {deviceListStrategy: [envvar, volume-mounts]}}\n"
        "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: gpu, replicas: 4, devices: [0, '1:2']}]}}\n"
        "health: {ignoredXids: [13], recoveryQuietSeconds: 5}\n"
    )
    assert validate(Config, dump(config)) == config
    assert validate(Config, dump(config, exclude_defaults=True)) == config
    assert config.flags.mig_strategy is MigStrategy.MIXED
