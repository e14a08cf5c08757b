"""Who changes a GPU's MIG layout: the MIG manager or the DRA driver, never both at once.

Both are node agents with their own processes. The MIG manager carves the layout the Node's
``nvidia.com/mig.config`` label names; the DRA driver, with partitionable devices, creates and
destroys MIG devices on Prepare and Unprepare. Were both to act on one GPU, one would destroy what
the other made for a running pod. They agree through the Node, as the device plugin and the DRA
driver do (``kube.allocator``), each writing its flag before it reads the other's:

- the DRA driver lists, in the annotation ``gpuchain.io/dra-mig-gpus``, the GPUs whose MIG layout
  it owns (published as partitionable devices, or holding a MIG device it created for a claim),
  before it publishes them; the MIG manager, which has set ``nvidia.com/mig.config.state=pending``
  first, refuses a change that would touch one of them;
- the DRA driver refuses to prepare a partitionable device while that state is ``pending``.

So whichever comes second sees the first. Pure functions over the Node object.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gpuchain.common.labels import MIG_CONFIG_STATE
from gpuchain.kube.objects import annotations_of, labels_of

DRA_MIG_GPUS = "gpuchain.io/dra-mig-gpus"
"""Node annotation: the indexes of the GPUs whose MIG layout the DRA driver owns, comma-separated."""
PENDING = "pending"
"""The ``nvidia.com/mig.config.state`` value of a MIG change under way."""


def dra_mig_gpus(node: Mapping[str, Any] | None) -> frozenset[int]:
    """The GPUs the Node's annotation gives to the DRA driver (an unreadable entry is skipped)."""
    text = annotations_of(dict(node or {})).get(DRA_MIG_GPUS) or ""
    return frozenset(int(part) for part in text.split(",") if part.strip().isdigit())


def annotation_value(gpus: Collection[int]) -> str | None:
    """The annotation's value for these GPUs; None (no annotation) for none."""
    return ",".join(str(i) for i in sorted(gpus)) or None


def mig_change_pending(node: Mapping[str, Any] | None) -> bool:
    """Whether the MIG manager is changing the Node's layout now."""
    return labels_of(dict(node or {})).get(MIG_CONFIG_STATE) == PENDING
