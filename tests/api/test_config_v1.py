"""gpuchain.api.config.v1: NVIDIA v1 keys and defaults, env precedence, errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuchain.api.config.v1.config import Config, parse_config, unsupported_settings, without_config_naming
from gpuchain.api.config.v1.durations import INFINITE_NS
from gpuchain.api.config.v1.environment import GFD_ENV_FLAGS, apply_env
from gpuchain.api.config.v1.flags import AllocationPolicy, DeviceIdStrategy, DeviceListStrategy, MigStrategy
from gpuchain.api.config.v1.load import load_config
from gpuchain.api.config.v1.selection import choose_config_file
from gpuchain.common.yamlfile import ConfigFileError

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


@pytest.mark.parametrize("data", [b"", b"  \n\n", b"null\n", b"~\n", b"---\n", b"# nothing set yet\n"])
def test_an_empty_config_file_starts_with_every_default(tmp_path: Path, data: bytes) -> None:
    """NVIDIA's plugin and GFD start on an empty config file (k8s-device-plugin CHANGELOG.md, v0.12.2:
    "Allow an empty config file"), e.g. a ConfigMap key created before anyone fills it in."""
    path = tmp_path / "config.yaml"
    path.write_bytes(data)
    assert load_config(path, env={}) == Config()


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


def test_time_slicing_and_mps_together_use_mps_as_nvidia_does() -> None:
    """NVIDIA's plugin takes such a file and uses MPS (its SharingStrategy(); the peer test in
    tests/peers/test_nvidia_config_peer.py found gpuchain refusing it); the start-up warning says
    time-slicing is ignored."""
    text = """
sharing:
  timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}
  mps: {resources: [{name: nvidia.com/gpu, replicas: 4}]}
"""
    config = parse_config(text)
    kind, settings = config.replication or ("", None)
    assert kind == "mps" and settings is not None and settings.resources[0].replicas == 4
    assert any("sharing.timeSlicing: ignored" in note for note in unsupported_settings(config))


def test_mps_forces_fail_requests_greater_than_one() -> None:
    c = parse_config("sharing: {mps: {resources: [{name: gpu, replicas: 4}]}}")
    kind, settings = c.replication or ("", None)
    assert kind == "mps"
    assert settings is not None and settings.fail_requests_greater_than_one is True
    assert settings.resources[0].name == "nvidia.com/gpu"


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("flags: {migStrategy: single, plugin: {passDeviceSpecs: false}}")
    c = load_config(path, env={"MIG_STRATEGY": "mixed", "PASS_DEVICE_SPECS": "true", "DEVICE_LIST_STRATEGY": "cdi-cri"})
    assert c.flags.mig_strategy is MigStrategy.MIXED
    assert c.flags.plugin.pass_device_specs is True
    assert c.flags.plugin.device_list_strategy == (DeviceListStrategy.CDI_CRI,)


def test_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigFileError) as err:
        apply_env(Config(), env={"DEVICE_ID_STRATEGY": "serial"})
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
    assert choose_config_file(tmp_path, label="a100-ts").name == "a100-ts"
    assert choose_config_file(tmp_path, label=None).name == "default"
    with pytest.raises(ConfigFileError) as err:
        choose_config_file(tmp_path, label="h100-mig")
    assert err.value.field == "nvidia.com/device-plugin.config"
    assert "'h100-mig', which does not exist; available: a100-ts, default" in err.value.reason


def test_single_config_without_label_or_default(tmp_path: Path) -> None:
    (tmp_path / "only").write_text("")
    assert choose_config_file(tmp_path, label=None).name == "only"
    (tmp_path / "other").write_text("")
    with pytest.raises(ConfigFileError, match="label the node"):
        choose_config_file(tmp_path, label=None)


# --- NVIDIA k8s-device-plugin v0.20.0 behaviour (api/config/v1, cmd/nvidia-device-plugin/main.go) ---

NAMING = """
resources:
  gpus: [{pattern: '*H100*', name: h100}]
sharing:
  timeSlicing:
    resources:
    - {name: nvidia.com/gpu, rename: gpu.ts, devices: [0, 1], replicas: 4}
"""


def test_start_drops_config_naming_with_nvidias_warnings(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(NAMING)
    c = load_config(path)
    assert c.resources.gpus == ()
    kind, settings = c.replication or ("", None)
    assert kind == "time-slicing" and settings is not None
    (entry,) = settings.resources
    assert (entry.name, entry.rename, entry.devices, entry.replicas) == ("nvidia.com/gpu", None, "all", 4)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 3
    assert warnings[0].startswith("Customizing the 'resources' field is not yet supported in the config. Ignoring...")
    assert warnings[1].startswith(
        "Setting the 'rename' field in sharing.timeSlicing.resources is not yet supported in the config. Ignoring..."
    )
    assert warnings[2].startswith(
        "Customizing the 'devices' field in sharing.timeSlicing.resources is not yet supported in the config."
    )


def test_config_naming_keeps_the_file_as_written(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(NAMING)
    c = load_config(path, config_naming=True)
    assert c.resources.gpus[0].name == "nvidia.com/h100"
    _, settings = c.replication or ("", None)
    assert settings is not None
    assert (settings.resources[0].rename, settings.resources[0].devices) == ("nvidia.com/gpu.ts", ("0", "1"))


def test_rename_by_default_survives_and_its_own_rename_is_not_warned() -> None:
    text = "sharing: {mps: {renameByDefault: true, resources: [{name: gpu, rename: gpu.shared, replicas: 2}]}}"
    c, warnings = without_config_naming(parse_config(text))
    assert warnings == []
    assert c == parse_config(text)
    other = "sharing: {mps: {renameByDefault: true, resources: [{name: gpu, rename: gpu.mine, replicas: 2}]}}"
    c, warnings = without_config_naming(parse_config(other))
    assert [w.split(" in ")[1][:21] for w in warnings] == ["sharing.mps.resources"]
    _, settings = c.replication or ("", None)
    assert settings is not None and settings.resources[0].rename == "nvidia.com/gpu.shared"


def test_nulls_mean_unset_as_in_the_json_nvidia_logs() -> None:
    text = """{"version": "v1", "flags": {"migStrategy": null, "failOnInitError": null, "gdrcopyEnabled": null,
      "plugin": {"passDeviceSpecs": null, "deviceListStrategy": null, "deviceIDStrategy": null},
      "gfd": {"oneshot": null, "sleepInterval": null}},
      "resources": {"gpus": null}, "sharing": {"timeSlicing": {}}, "imex": {"channelIDs": null}}"""
    assert parse_config(text) == Config()


@pytest.mark.parametrize(
    ("text", "field", "reason"),
    [
        ("sharing: {timeSlicing: {resources: []}}", "sharing.timeSlicing.resources", "no resources to share"),
        ("sharing: {timeSlicing: {renameByDefault: true}}", "sharing.timeSlicing", "no resources to share"),
        ("sharing: {mps: {}}", "sharing.mps", "no resources to share"),
        ("imex: {channelIDs: [2]}", "imex.channelIDs", "must be [] or [0]"),
        ("imex: {channelIDs: [0, 1]}", "imex.channelIDs", "must be [] or [0]"),
        ("flags: {plugin: {deviceListStrategy: [[envvar]]}}", "flags.plugin.deviceListStrategy", "each entry"),
        ("flags: {plugin: {deviceListStrategy: [envvar, nfs]}}", "flags.plugin.deviceListStrategy.1", "'envvar'"),
        ("flags: {deviceDiscoveryStrategy: pci}", "flags.deviceDiscoveryStrategy", "'auto'"),
        ("flags: {gfd: {sleepInterval: 60}}", "", ""),
        ("flags: {gfd: {sleepInterval: 60sec}}", "flags.gfd.sleepInterval", "not a duration"),
        ("flags: {gfd: {sleepInterval: true}}", "flags.gfd.sleepInterval", "give a duration"),
        ("sharing: {timeSlicing: {resources: [{name: GPU, replicas: 2}]}}", "", "lowercase"),
        ("sharing: {timeSlicing: {resources: [{name: example.com/gpu, replicas: 2}]}}", "", "not a valid"),
        ("sharing: {timeSlicing: {resources: [{name: gpu, rename: " + "x" * 60 + ", replicas: 2}]}}", "", "longer"),
        ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: '2'}]}}", "", "integer"),
        ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: some}]}}", "", "only word"),
        ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: 0}]}}", "", "greater than"),
        ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: [GPU-1]}]}}", "", "not a GPU index"),
    ],
)
def test_upstream_strictness(text: str, field: str, reason: str) -> None:
    if not reason:  # a bare number is nanoseconds, accepted
        assert parse_config(text).flags.gfd.sleep_interval == 60
        return
    with pytest.raises(ConfigFileError) as err:
        parse_config(text, "cfg.yaml")
    assert "\n" not in str(err.value)
    if field:
        assert err.value.field == field
    assert reason in err.value.reason


@pytest.mark.parametrize(
    ("value", "ns"),
    [("60s", 60 * 10**9), ("1m30s", 90 * 10**9), (5, 5), ("5ns", 5), (0, 0), ("0s", 0), ("infinite", INFINITE_NS)],
)
def test_gfd_sleep_interval_is_a_go_duration(value: str | int, ns: int) -> None:
    text = f"flags: {{gfd: {{sleepInterval: {value}}}}}"
    assert parse_config(text).flags.gfd.sleep_interval == ns


def test_mps_fail_requests_greater_than_one_default_and_explicit() -> None:
    on = parse_config("sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}")
    off = parse_config("sharing: {mps: {failRequestsGreaterThanOne: false, resources: [{name: gpu, replicas: 2}]}}")
    ts = parse_config("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}")
    assert [c.replication[1].fail_requests_greater_than_one for c in (on, off, ts) if c.replication] == [
        True,
        False,
        False,
    ]


def test_every_upstream_flag_key_and_variable() -> None:
    text = """
flags:
  migStrategy: none
  failOnInitError: true
  mpsRoot: /run/nvidia/mps
  nvidiaDriverRoot: /
  nvidiaDevRoot: /
  gdrcopyEnabled: true
  gdsEnabled: false
  mofedEnabled: false
  useNodeFeatureAPI: true
  deviceDiscoveryStrategy: nvml
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: envvar
    deviceIDStrategy: uuid
    cdiAnnotationPrefix: cdi.k8s.io/
    nvidiaCTKPath: /usr/bin/nvidia-ctk
    containerDriverRoot: /driver-root
    sharedDevicesAllocationPolicy: packed
  gfd:
    oneshot: false
    noTimestamp: false
    sleepInterval: 60s
    outputFile: /etc/kubernetes/node-feature-discovery/features.d/gfd
    machineTypeFile: /sys/class/dmi/id/product_name
imex: {channelIDs: [0], required: true}
"""
    c = parse_config(text)
    assert c.flags.gdrcopy_enabled and c.imex.required and c.imex.channel_ids == (0,)
    env = {
        "GDRCOPY_ENABLED": "false",
        "NVIDIA_CDI_HOOK_PATH": "/hook",
        "NVIDIA_CTK_PATH": "/ignored",
        "CONTAINER_DRIVER_ROOT": "/drv",
        "SHARED_DEVICES_ALLOCATION_POLICY": "distributed",
        "IMEX_CHANNEL_IDS": "0",
    }
    e = apply_env(Config(), env=env)
    assert not e.flags.gdrcopy_enabled
    assert e.flags.plugin.nvidia_ctk_path == "/hook"
    assert e.flags.plugin.container_driver_root == "/drv"
    assert e.flags.plugin.shared_devices_allocation_policy is AllocationPolicy.DISTRIBUTED
    assert e.imex.channel_ids == (0,)
    with pytest.raises(ConfigFileError) as err:
        apply_env(Config(), env={"IMEX_CHANNEL_IDS": "3"})
    assert err.value.field == "IMEX_CHANNEL_IDS"


def test_gfd_variables_take_gfd_names_first() -> None:
    c = apply_env(
        Config(),
        env={"GFD_MIG_STRATEGY": "mixed", "MIG_STRATEGY": "single", "GFD_SLEEP_INTERVAL": "infinite"},
        variables=GFD_ENV_FLAGS,
    )
    assert c.flags.mig_strategy is MigStrategy.MIXED
    assert c.flags.gfd.sleep_interval == INFINITE_NS


def test_what_only_the_plugin_refuses() -> None:
    c = parse_config("flags: {deviceDiscoveryStrategy: vfio}")
    assert c.plugin_problems() and "feature discovery only" in c.plugin_problems()[0]
    mixed_mps = parse_config("flags: {migStrategy: mixed}\nsharing: {mps: {resources: [{name: gpu, replicas: 2}]}}")
    assert ["MPS sharing does not work with migStrategy mixed" in p for p in mixed_mps.plugin_problems()] == [True]
    assert parse_config("").plugin_problems() == []


def test_settings_gpuchain_does_not_implement_are_named() -> None:
    text = """
flags: {gdsEnabled: true, gdrcopyEnabled: true, mofedEnabled: false, useNodeFeatureAPI: true, deviceDiscoveryStrategy: tegra}
imex: {channelIDs: [0]}
sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}
"""
    notes = unsupported_settings(parse_config(text))
    assert [n.split(":")[0].split("=")[0] for n in notes] == [
        "flags.gdrcopyEnabled",
        "flags.gdsEnabled",
        "imex.channelIDs",
        "flags.useNodeFeatureAPI",
        "flags.deviceDiscoveryStrategy",
        "sharing.mps",
    ]
    assert unsupported_settings(parse_config("")) == []


@pytest.mark.parametrize(
    ("text", "value"),
    [(t, True) for t in ("true", "1", "t", "TRUE", "True", "T")]
    + [(t, False) for t in ("false", "0", "f", "FALSE", "False", "F", "")],
)
def test_boolean_variables_take_gos_spellings(text: str, value: bool) -> None:
    """NVIDIA's plugin reads FAIL_ON_INIT_ERROR and the other boolean variables with Go's
    strconv.ParseBool, and a variable set to "" as false (checked against NVIDIA's reader in
    tests/peers/test_nvidia_config_peer.py)."""
    assert apply_env(Config(), env={"FAIL_ON_INIT_ERROR": text}).flags.fail_on_init_error is value
    assert apply_env(Config(), env={"GFD_ONESHOT": text}, variables=GFD_ENV_FLAGS).flags.gfd.oneshot is value


@pytest.mark.parametrize("text", ["yes", "no", "on", " true", "tRuE", "2"])
def test_boolean_variables_refuse_what_go_refuses(text: str) -> None:
    """Spellings a YAML file would read as booleans stop NVIDIA's plugin at start; here too, naming
    the variable."""
    with pytest.raises(ConfigFileError, match="PASS_DEVICE_SPECS.*not a boolean"):
        apply_env(Config(), env={"PASS_DEVICE_SPECS": text})


def test_an_empty_device_list_loads_as_nvidia_reads_it(tmp_path: Path) -> None:
    """NVIDIA's reader accepts ``devices: []`` and its plugin then drops the field at start (all
    devices, with its warning); gpuchain does the same, and refuses it only where it would honour
    the selection (--config-resource-naming), because there it would select nothing."""
    path = tmp_path / "cfg.yaml"
    path.write_text("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, devices: [], replicas: 4}]}}\n")
    entry = load_config(path, env={}).sharing.time_slicing.resources[0]  # type: ignore[union-attr]
    assert entry.devices == "all" and entry.replicas == 4
    with pytest.raises(ConfigFileError, match=r"sharing.timeSlicing.resources.0.devices: an empty device list"):
        load_config(path, env={}, config_naming=True)
