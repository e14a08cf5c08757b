"""Config file: NVIDIA v1 keys and defaults, env precedence, errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.deviceplugin.config import (
    AllocationPolicy,
    Config,
    DeviceIdStrategy,
    DeviceListStrategy,
    MigStrategy,
    apply_env,
    choose_config_file,
    load_config,
    parse_config,
)

NVIDIA_EXAMPLE = """
version: v1
flags:
  migStrategy: mixed
  failOnInitError: true
  nvidiaDriverRoot: /run/nvidia/driver
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: [envvar, cdi-annotations]
    deviceIDStrategy: index
  gfd:
    oneshot: false
    sleepInterval: 60s
sharing:
  timeSlicing:
    renameByDefault: false
    failRequestsGreaterThanOne: false
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""


def test_defaults_match_nvidia() -> None:
    c = Config()
    assert c.version == "v1"
    assert c.flags.mig_strategy is MigStrategy.NONE
    assert c.flags.fail_on_init_error is True
    assert c.flags.nvidia_driver_root == "/"
    assert c.flags.plugin.pass_device_specs is False
    assert c.flags.plugin.device_list_strategy == (DeviceListStrategy.ENVVAR,)
    assert c.flags.plugin.device_id_strategy is DeviceIdStrategy.UUID
    assert c.flags.plugin.cdi_annotation_prefix == "cdi.k8s.io/"
    assert c.flags.plugin.shared_devices_allocation_policy is AllocationPolicy.DISTRIBUTED
    assert c.replication is None


def test_an_nvidia_configmap_loads_unchanged() -> None:
    c = parse_config(NVIDIA_EXAMPLE)
    assert c.flags.mig_strategy is MigStrategy.MIXED
    assert c.flags.plugin.device_list_strategy == (DeviceListStrategy.ENVVAR, DeviceListStrategy.CDI_ANNOTATIONS)
    assert c.flags.plugin.device_id_strategy is DeviceIdStrategy.INDEX
    kind, settings = c.replication or ("", None)
    assert kind == "time-slicing"
    assert settings is not None and settings.resources[0].replicas == 10


def test_empty_version_and_empty_file_mean_v1() -> None:
    assert parse_config("").version == "v1"
    assert parse_config("version: ''").version == "v1"


def test_device_list_strategy_accepts_a_plain_string() -> None:
    c = parse_config("flags: {plugin: {deviceListStrategy: volume-mounts}}")
    assert c.flags.plugin.device_list_strategy == (DeviceListStrategy.VOLUME_MOUNTS,)


@pytest.mark.parametrize(
    ("text", "field", "reason"),
    [
        ("version: v2", "version", "unsupported config version"),
        ("flags: {migStrategy: half}", "flags.migStrategy", "'none', 'single' or 'mixed'"),
        ("flags: {plugin: {deviceIDStrategy: serial}}", "flags.plugin.deviceIDStrategy", "'uuid' or 'index'"),
        ("flags: {migStratgy: mixed}", "flags.migStratgy", "unknown field"),
        (
            "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}",
            "sharing.timeSlicing.resources.0.replicas",
            "greater than or equal to 2",
        ),
        (
            "sharing: {timeSlicing: {resources: [{name: 'bad name!', replicas: 2}]}}",
            "sharing.timeSlicing.resources.0.name",
            "not a valid resource name",
        ),
    ],
)
def test_bad_file_names_field_and_reason(text: str, field: str, reason: str) -> None:
    with pytest.raises(ConfigFileError) as err:
        parse_config(text, "cfg.yaml")
    assert err.value.field == field
    assert reason in err.value.reason
    assert str(err.value).startswith("cfg.yaml:1: ")


def test_time_slicing_and_mps_together_are_rejected() -> None:
    text = """
sharing:
  timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}
  mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}
"""
    with pytest.raises(ConfigFileError, match="pick one"):
        parse_config(text)


def test_mps_forces_fail_requests_greater_than_one() -> None:
    c = parse_config("sharing: {mps: {resources: [{name: gpu, replicas: 4}]}}")
    kind, settings = c.replication or ("", None)
    assert kind == "mps"
    assert settings is not None and settings.fail_requests_greater_than_one is True
    assert settings.resources[0].name == "nvidia.com/gpu"


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("flags: {migStrategy: single, plugin: {passDeviceSpecs: false}}")
    c = load_config(path, {"MIG_STRATEGY": "mixed", "PASS_DEVICE_SPECS": "true", "DEVICE_LIST_STRATEGY": "cdi-cri"})
    assert c.flags.mig_strategy is MigStrategy.MIXED
    assert c.flags.plugin.pass_device_specs is True
    assert c.flags.plugin.device_list_strategy == (DeviceListStrategy.CDI_CRI,)


def test_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigFileError) as err:
        apply_env(Config(), {"DEVICE_ID_STRATEGY": "serial"})
    assert err.value.field == "DEVICE_ID_STRATEGY"


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match="cannot read file"):
        load_config(tmp_path / "absent.yaml")


def test_health_section_and_env_build_the_xid_policy() -> None:
    c = parse_config("health: {ignoredXids: [48], enabledXids: [13], recoveryQuietSeconds: 2}")
    policy = c.health.policy({"DP_DISABLE_HEALTHCHECKS": "79"})
    assert not policy.marks_unhealthy(48)
    assert policy.marks_unhealthy(13)
    assert not policy.marks_unhealthy(79)
    assert c.health.recovery_quiet_seconds == 2


def test_node_label_picks_the_config_key(tmp_path: Path) -> None:
    (tmp_path / "default").write_text("version: v1")
    (tmp_path / "a100-ts").write_text("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 4}]}}")
    (tmp_path / "..data").mkdir()
    assert choose_config_file(tmp_path, "a100-ts").name == "a100-ts"
    assert choose_config_file(tmp_path, None).name == "default"
    with pytest.raises(ConfigFileError) as err:
        choose_config_file(tmp_path, "h100-mig")
    assert err.value.field == "nvidia.com/device-plugin.config"
    assert "'h100-mig', which does not exist; available: a100-ts, default" in err.value.reason


def test_single_config_without_label_or_default(tmp_path: Path) -> None:
    (tmp_path / "only").write_text("")
    assert choose_config_file(tmp_path, None).name == "only"
    (tmp_path / "other").write_text("")
    with pytest.raises(ConfigFileError, match="label the node"):
        choose_config_file(tmp_path, None)
