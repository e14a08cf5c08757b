"""Resource names (``nvidia.com/...``) and ``resources``: which name a GPU or MIG profile is announced as."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpuchain.api.config.v1.section import Section
from gpuchain.common.schema import define, spec

RESOURCE_PREFIX = "nvidia.com/"
MAX_RESOURCE_NAME = 63
"""NVIDIA's limit on a fully-qualified resource name (``nvidia.com/`` included)."""
SHARED_SUFFIX = ".shared"

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")


def full_resource_name(v: str) -> str:
    """Accept ``gpu`` or ``nvidia.com/gpu`` as NVIDIA does; always return the full name.

    The part after ``nvidia.com/`` must be a DNS subdomain (lowercase letters, digits, '-', '.')
    and the whole name at most 63 characters.
    """
    full = v if v.startswith(RESOURCE_PREFIX) else RESOURCE_PREFIX + v
    short = full[len(RESOURCE_PREFIX) :]
    if len(full) > MAX_RESOURCE_NAME:
        raise ValueError(f"{full!r} is longer than {MAX_RESOURCE_NAME} characters; shorten it")
    if not _DNS_SUBDOMAIN.fullmatch(short) or len(short) > 253:
        raise ValueError(
            f"{v!r} is not a valid resource name; after nvidia.com/ use lowercase letters, digits, '-' and '.'"
            " (e.g. gpu.shared)"
        )
    return full


def check_resource_name(v: str | None, _: Mapping[str, Any]) -> str | None:
    """A name field's check: unset stays unset, a name is made full (see ``full_resource_name``)."""
    return None if v is None else full_resource_name(v)


@define
class ResourcePattern(Section):
    """``resources.gpus[]`` / ``resources.mig[]``: devices whose product (or MIG profile) matches
    ``pattern`` (``*`` matches any run of characters, nothing else is special) are announced as
    ``name`` instead of the default name."""

    pattern: str
    name: str = spec(check=check_resource_name)


@define
class Resources(Section):
    gpus: tuple[ResourcePattern, ...] = ()
    mig: tuple[ResourcePattern, ...] = ()
