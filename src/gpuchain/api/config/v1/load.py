"""Loading the config as a component starts: the file, the environment over it, then resource naming."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from gpuchain.api.config.v1.config import Config, unsupported_settings, without_config_naming
from gpuchain.api.config.v1.environment import ENV_FLAGS, EnvFlags, apply_env
from gpuchain.common.yamlfile import ConfigFileError, load_yaml_file

log = logging.getLogger(__name__)


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    config_naming: bool = False,
    variables: EnvFlags = ENV_FLAGS,
) -> Config:
    """Read the config file (None: all defaults), then apply environment overrides.

    An empty file (no bytes, only whitespace or comments, or a ``null`` document) is every default,
    as NVIDIA's plugin and GFD read it: k8s-device-plugin CHANGELOG.md@v0.20.0 under v0.12.2 "Allow
    an empty config file and default to version: v1" (``parseConfigFrom`` in
    api/config/v1/config.go@v0.20.0 unmarshals nothing into a zero Config). A ConfigMap key created
    before anyone fills it in must not stop the plugin on every node.

    Without ``config_naming`` the config's resource naming is dropped, with NVIDIA's warnings
    logged, as NVIDIA's plugin and GFD do at start (see ``without_config_naming``).
    Raises ConfigFileError (`file:line: field: reason`) on a bad file or variable.
    """
    config = load_yaml_file(Config, path=path, empty_ok=True) if path else Config()
    config = apply_env(config, env=env or {}, variables=variables)
    for note in unsupported_settings(config):
        log.warning("%s", note)
    if config_naming:
        for kind, section in (("timeSlicing", config.sharing.time_slicing), ("mps", config.sharing.mps)):
            for i, entry in enumerate(section.resources if section is not None else ()):
                if entry.devices == ():
                    raise ConfigFileError(
                        str(path) if path else "<config>",
                        line=None,
                        field=f"sharing.{kind}.resources.{i}.devices",
                        reason="an empty device list selects nothing; use 'all', a count or indexes/UUIDs",
                    )
        return config
    config, warnings = without_config_naming(config)
    for warning in warnings:
        log.warning("%s (gpuchain: --config-resource-naming applies it)", warning)
    return config
