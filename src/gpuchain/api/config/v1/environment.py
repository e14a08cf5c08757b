"""The environment variables that override the config file, read as NVIDIA's plugin and GFD read them.

Precedence is environment, then file, then default; the plugin and GFD read different sets
(``ENV_FLAGS``, ``GFD_ENV_FLAGS``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuchain.api.config.v1.config import Config
from gpuchain.common.schema import dump, field_types
from gpuchain.common.yamlfile import ConfigFileError, load_yaml_model

EnvFlags = tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]
"""Config keys (a path of file keys) each with the variables that set it, the first set one winning."""

ENV_FLAGS: EnvFlags = (
    (("flags", "migStrategy"), ("MIG_STRATEGY",)),
    (("flags", "failOnInitError"), ("FAIL_ON_INIT_ERROR",)),
    (("flags", "nvidiaDriverRoot"), ("NVIDIA_DRIVER_ROOT",)),
    (("flags", "nvidiaDevRoot"), ("NVIDIA_DEV_ROOT",)),
    (("flags", "mpsRoot"), ("MPS_ROOT",)),
    (("flags", "gdrcopyEnabled"), ("GDRCOPY_ENABLED",)),
    (("flags", "gdsEnabled"), ("GDS_ENABLED",)),
    (("flags", "mofedEnabled"), ("MOFED_ENABLED",)),
    (("flags", "deviceDiscoveryStrategy"), ("DEVICE_DISCOVERY_STRATEGY",)),
    (("flags", "plugin", "passDeviceSpecs"), ("PASS_DEVICE_SPECS",)),
    (("flags", "plugin", "deviceListStrategy"), ("DEVICE_LIST_STRATEGY",)),
    (("flags", "plugin", "deviceIDStrategy"), ("DEVICE_ID_STRATEGY",)),
    (("flags", "plugin", "cdiAnnotationPrefix"), ("CDI_ANNOTATION_PREFIX",)),
    (("flags", "plugin", "nvidiaCTKPath"), ("NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH")),
    (("flags", "plugin", "containerDriverRoot"), ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT")),
    (("flags", "plugin", "sharedDevicesAllocationPolicy"), ("SHARED_DEVICES_ALLOCATION_POLICY",)),
    (("imex", "channelIDs"), ("IMEX_CHANNEL_IDS",)),
    (("imex", "required"), ("IMEX_REQUIRED",)),
)
"""Environment variables NVIDIA's plugin reads, by the config key each overrides (the first set
variable of a key wins, as with NVIDIA's aliases)."""

GFD_ENV_FLAGS: EnvFlags = (
    (("flags", "migStrategy"), ("GFD_MIG_STRATEGY", "MIG_STRATEGY")),
    (("flags", "failOnInitError"), ("GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR")),
    (("flags", "useNodeFeatureAPI"), ("GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API")),
    (("flags", "deviceDiscoveryStrategy"), ("DEVICE_DISCOVERY_STRATEGY",)),
    (("flags", "plugin", "containerDriverRoot"), ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT")),
    (("flags", "gfd", "oneshot"), ("GFD_ONESHOT",)),
    (("flags", "gfd", "noTimestamp"), ("GFD_NO_TIMESTAMP",)),
    (("flags", "gfd", "sleepInterval"), ("GFD_SLEEP_INTERVAL",)),
    (("flags", "gfd", "outputFile"), ("GFD_OUTPUT_FILE",)),
    (("flags", "gfd", "machineTypeFile"), ("GFD_MACHINE_TYPE_FILE",)),
)
"""Environment variables NVIDIA's GFD reads, by config key (GFD_* first, then the shared name)."""


_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def go_env_bool(text: str) -> bool:
    """A boolean environment variable as NVIDIA's plugin and GFD read it (urfave/cli over Go's
    strconv.ParseBool): exactly the twelve spellings Go takes, and a variable set to the empty
    string is false. Anything else (``yes``, `` true``) stops NVIDIA's plugin at start, so it is
    refused here too rather than read the way a YAML file would read it."""
    if text == "" or text in _GO_FALSE:
        return False
    if text in _GO_TRUE:
        return True
    raise ValueError(f"{text!r} is not a boolean; use true or false (also 1/0, t/f, TRUE/FALSE, True/False)")


def _field_type(path: tuple[str, ...]) -> Any:
    """The type of the config field at ``path`` (aliases, as in the file)."""
    model: Any = Config
    for key in path:
        model = field_types(model)[key]
    return model


def apply_env(
    config: Config,
    *,
    env: Mapping[str, str],
    variables: EnvFlags = ENV_FLAGS,
) -> Config:
    """``config`` with the ``variables`` present in ``env`` applied over it (env wins).

    Validates the result as a whole; a bad value raises ConfigFileError naming the variable.
    """
    data = dump(config, exclude_none=True, exclude_defaults=True)
    names: dict[str, str] = {}
    for path, candidates in variables:
        var = next((v for v in candidates if v in env), None)
        if var is None:
            continue
        node = data
        for key in path[:-1]:
            node = node.setdefault(key, {})
        value: str | bool = env[var]
        if _field_type(path) is bool:
            try:
                value = go_env_bool(env[var])
            except ValueError as exc:
                raise ConfigFileError("environment", line=None, field=var, reason=str(exc)) from None
        node[path[-1]] = value
        names[".".join(path)] = var
    if not names:
        return config
    import yaml  # only when the environment sets a key: the device plugin role alone never loads PyYAML

    try:
        return load_yaml_model(Config, text=yaml.safe_dump(data, sort_keys=False), source="environment")
    except ConfigFileError as exc:
        var = names.get(exc.field, exc.field)
        raise ConfigFileError("environment", line=None, field=var, reason=exc.reason) from None
