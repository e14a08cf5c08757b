"""The doctor's knowledge kept as data beside its code (release facts, removed APIs, validation pods, image defects,
startup taints): one reader, so every such file is found the same way in a wheel, a zip or a source tree."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml


def packaged_yaml(name: str) -> Any:
    """The parsed YAML of ``gpuchain/doctor/<name>``, fresh on each call: its readers build frozen records from it
    and keep those (``functools.cache``), so nothing shares the mutable lists and maps."""
    return yaml.safe_load(resources.files("gpuchain.doctor").joinpath(name).read_text())
