"""``sharing``: time-slicing or MPS, each a set of replicated resources."""

from __future__ import annotations

from typing import Any

from gpuchain.api.config.v1.replicas import ReplicatedResources
from gpuchain.api.config.v1.section import Section
from gpuchain.common.schema import define, spec


def _empty_is_unset(v: Any) -> Any:
    if isinstance(v, dict) and not {k: x for k, x in v.items() if x is not None}:
        return None
    return v


@define
class Sharing(Section):
    """``sharing``: time-slicing or MPS. Given both, MPS is used and time-slicing ignored, as
    NVIDIA's plugin does (``Config.replication``; a warning at start names the ignored section).

    ``timeSlicing: {}`` (no keys at all) is "no time-slicing", because that is how NVIDIA's
    components write an unset section in the JSON they log.
    """

    time_slicing: ReplicatedResources | None = spec(default=None, key="timeSlicing", before=_empty_is_unset)
    mps: ReplicatedResources | None = None
