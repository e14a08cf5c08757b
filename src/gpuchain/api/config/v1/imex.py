"""``imex``: the IMEX channels NVIDIA's plugin injects (accepted here, reported as not implemented)."""

from __future__ import annotations

from typing import Any

from gpuchain.api.config.v1.section import Section
from gpuchain.common.schema import StrictInt, define, spec


def _channel_ids(v: Any) -> Any:
    if isinstance(v, str):  # IMEX_CHANNEL_IDS=0,1
        try:
            v = [int(x) for x in v.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"channel IDs are integers, e.g. 0 (got {v!r})") from None
    if isinstance(v, list | tuple) and len(v) > 0 and list(v) != [0]:
        raise ValueError(f"channelIDs must be [] or [0] (got {list(v)})")
    return v


@define
class Imex(Section):
    """``imex``: IMEX channels to inject. NVIDIA allows only channel 0 (``[]`` or ``[0]``)."""

    channel_ids: tuple[StrictInt, ...] = spec(default=(), key="channelIDs", before=_channel_ids)
    required: bool = False
