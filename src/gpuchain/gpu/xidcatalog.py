"""NVIDIA's XID catalog: each XID's mnemonic and NVIDIA's immediate resolution for it.

The data lives in ``xid_catalog.yaml`` beside this module, with its source; it is read on first
use. ``gpu.xid`` keeps gpuchain's own table (meanings, which XIDs the device plugin ignores, as
NVIDIA's plugin does); this catalog is what the repair loop follows to choose between resetting
a GPU and rebooting the node.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

import yaml


class Resolution(enum.StrEnum):
    """What the repair loop makes of NVIDIA's resolution bucket."""

    RESET = "reset"
    REBOOT = "reboot"
    NONE = "none"


REBOOT_BUCKETS = frozenset({"RESTART_BM"})
RESET_BUCKETS = frozenset({"RESET_GPU", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR"})
"""NVIDIA's workflows for XID 48 (double-bit ECC) and NVLink errors end in a GPU reset (the
catalog's text: 'A GPU reset or node reboot is needed to clear this error'); the loop tries the
reset first and asks for the reboot when it fails."""


@dataclass(frozen=True)
class CatalogEntry:
    """One XID as NVIDIA's catalog lists it."""

    code: int
    mnemonic: str
    bucket: str

    @property
    def resolution(self) -> Resolution:
        if self.bucket in REBOOT_BUCKETS:
            return Resolution.REBOOT
        if self.bucket in RESET_BUCKETS:
            return Resolution.RESET
        return Resolution.NONE


@functools.cache
def catalog() -> Mapping[int, CatalogEntry]:
    """Every catalogued XID (read from the data file once)."""
    text = (resources.files("gpuchain.gpu") / "xid_catalog.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    return {int(code): CatalogEntry(int(code), str(m), str(b)) for code, (m, b) in data["xids"].items()}


def source() -> str:
    """Where the catalog's figures come from."""
    data = yaml.safe_load((resources.files("gpuchain.gpu") / "xid_catalog.yaml").read_text(encoding="utf-8"))
    return str(data["source"])


def lookup(code: int) -> CatalogEntry | None:
    """NVIDIA's entry for ``code``; None for an XID the catalog file does not list."""
    return catalog().get(code)
