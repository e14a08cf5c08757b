"""Which key of a mounted multi-config ConfigMap applies to a node, as NVIDIA's config manager decides."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from gpuchain.common.labels import DEVICE_PLUGIN_CONFIG
from gpuchain.common.yamlfile import ConfigFileError

NODE_CONFIG_LABEL = DEVICE_PLUGIN_CONFIG
"""Node label whose value picks one key of a multi-config ConfigMap."""


CLUSTER_DEFAULT_SOURCE = "--config-key/NODE_CONFIG_KEY"
"""Where the cluster-wide default key comes from (the ClusterPolicy's devicePlugin.config.default)."""


class ConfigKeyError(ConfigFileError):
    """A config key named by the node label (or the cluster default) is not in the ConfigMap.

    ``key`` is the missing name and ``available`` the keys that exist, for logs and Node events.
    """

    def __init__(self, source: str, *, field: str, key: str, available: Collection[str], hint: str = "") -> None:
        self.key = key
        self.available = tuple(sorted(available))
        listing = ", ".join(self.available) or "(none)"
        super().__init__(
            source,
            line=None,
            field=field,
            reason=f"names config {key!r}, which does not exist; available: {listing}{hint}",
        )


def select_config_key(
    label: str | None,
    *,
    cluster_default: str | None,
    available: Collection[str],
    default: str = "default",
    source: str = "<config directory>",
) -> str:
    """Which key of a multi-config ConfigMap applies to a node, as NVIDIA's config manager decides.

    The node's ``nvidia.com/device-plugin.config`` label wins; without it the cluster default
    (the ClusterPolicy's ``devicePlugin.config.default``), then the ``default`` key, then the only
    key. A key that was named (label or cluster default) but is missing is an error naming the
    keys that exist, never a silent fallback: the node would run a config nobody asked for.
    Raises ConfigKeyError (field: which name was wrong) or, with no key to go by, ConfigFileError.
    """
    names = sorted(available)
    if label:
        if label in available:
            return label
        raise ConfigKeyError(source, field=NODE_CONFIG_LABEL, key=label, available=names)
    if cluster_default:
        if cluster_default in available:
            return cluster_default
        hint = "; fix devicePlugin.config.default or add the key to the ConfigMap"
        raise ConfigKeyError(source, field=CLUSTER_DEFAULT_SOURCE, key=cluster_default, available=names, hint=hint)
    if default in available:
        return default
    if len(names) == 1:
        return names[0]
    listing = ", ".join(names) or "(none)"
    raise ConfigFileError(
        source,
        line=None,
        field=NODE_CONFIG_LABEL,
        reason=f"no label on the node and no {default!r} config among {listing}; label the node or add a {default!r} "
        "key",
    )


def config_files(directory: str | Path) -> dict[str, Path]:
    """The configs of a mounted ConfigMap by key (hidden entries such as ``..data`` skipped)."""
    root = Path(directory)
    try:
        return {p.name: p for p in sorted(root.iterdir()) if p.is_file() and not p.name.startswith(".")}
    except OSError as exc:
        raise ConfigFileError(
            str(root), line=None, field="", reason=f"cannot list config directory: {exc.strerror or exc}"
        ) from None


def choose_config_file(
    directory: str | Path, *, label: str | None, cluster_default: str | None = None, default: str = "default"
) -> Path:
    """The file of a mounted config ConfigMap that applies to this node (see select_config_key).

    Errors name the directory, so the message says where the available keys were looked for.
    """
    files = config_files(directory)
    return files[
        select_config_key(
            label, cluster_default=cluster_default, available=files, default=default, source=str(directory)
        )
    ]
