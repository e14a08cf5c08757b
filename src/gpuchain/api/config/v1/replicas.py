"""``sharing.<kind>.resources[]``: which devices of a resource are announced how many times."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Literal

from gpuchain.api.config.v1.resources import check_resource_name
from gpuchain.api.config.v1.section import Section
from gpuchain.common.schema import StrictInt, define, spec

DeviceSelector = Literal["all"] | StrictInt | tuple[str, ...]
"""``devices``: ``all``, a count of devices, or GPU indexes, MIG indexes (``0:1``) and UUIDs."""

_UINT = re.compile(r"[0-9]+")


def _is_uuid(text: str) -> bool:
    import uuid  # here: it loads platform and libuuid, for a config that names a device by UUID

    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return len(text) == 36


def _device_ref(item: Any) -> str:
    """One entry of a ``devices`` list as NVIDIA reads it: a GPU index (number or string), a MIG
    index ``<gpu>:<mig>``, or a GPU or MIG UUID (``MIG-GPU-<uuid>/<gi>/<ci>`` too)."""
    if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
        return str(item)
    if isinstance(item, str):
        parts = item.split(":")
        if all(_UINT.fullmatch(p) for p in parts) and len(parts) <= 2:
            return item
        if item.startswith("GPU-") and _is_uuid(item[4:]):
            return item
        if item.startswith("MIG-"):
            rest = item[4:]
            gpu, _, tail = rest.partition("/")
            ids = tail.split("/")
            if _is_uuid(rest) or (
                gpu.startswith("GPU-") and _is_uuid(gpu[4:]) and len(ids) == 2 and all(_UINT.fullmatch(i) for i in ids)
            ):
                return item
    raise ValueError(
        f"device {item!r} is not a GPU index, a MIG index (0:1) or a GPU/MIG UUID (GPU-<uuid>, MIG-<uuid>)"
    )


def _device_list(v: Any) -> Any:
    """``all``, a count above 0, or a list of device references (NVIDIA's three forms)."""
    if v == "all":
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        if v <= 0:
            raise ValueError(f"a count of devices must be greater than 0 (got {v})")
        return v
    if isinstance(v, list | tuple):
        # An empty list is accepted as NVIDIA's reader accepts it: at start the devices field is
        # dropped (``without_config_naming``); only honoured naming refuses it (``load_config``).
        return tuple(_device_ref(item) for item in v)
    if isinstance(v, str):
        raise ValueError(f"the only word devices takes is 'all' (got {v!r}); or give a count or a list")
    raise ValueError(f"devices is 'all', a count or a list of indexes/UUIDs (got {v!r})")


@define(kw_only=True)
class ReplicatedResource(Section):
    """``sharing.<kind>.resources[]``: announce each selected device of ``name`` ``replicas`` times."""

    name: str = spec(check=check_resource_name)
    rename: str | None = spec(default=None, check=check_resource_name)
    devices: DeviceSelector = spec(default="all", ge=1, before=_device_list)
    replicas: StrictInt = spec(ge=2)


def _unique_names(v: tuple[ReplicatedResource, ...], _: Mapping[str, Any]) -> tuple[ReplicatedResource, ...]:
    if not v:
        raise ValueError("no resources to share; list at least one (name, replicas) or leave the section out")
    seen: set[str] = set()
    for r in v:
        if r.name in seen:
            raise ValueError(f"resource {r.name} is listed twice; give each resource one entry")
        seen.add(r.name)
    return v


@define
class ReplicatedResources(Section):
    """``sharing.timeSlicing`` / ``sharing.mps``.

    ``failRequestsGreaterThanOne`` left unset is off for time-slicing and on for MPS (NVIDIA's
    defaults); an explicit value is honoured for both (see ``Config.replication``), as
    k8s-device-plugin v0.20.0, the release gpuchain follows, does (``NewConfig`` in
    api/config/v1/config.go@v0.20.0, tested by config_test.go@v0.20.0). Releases v0.15.0 (which
    added MPS) through v0.19.3 force it on for MPS whatever the file says
    (api/config/v1/config.go@v0.18.0), so a ConfigMap with ``false`` allows multi-replica requests
    here and refuses them there; tests/peers/test_nvidia_config_peer.py lists that as known.
    """

    rename_by_default: bool = spec(default=False, key="renameByDefault")
    fail_requests_greater_than_one: bool | None = spec(default=None, key="failRequestsGreaterThanOne")
    resources: tuple[ReplicatedResource, ...] = spec(default=(), check=_unique_names)

    def _after(self) -> None:
        if not self.resources:
            raise ValueError("no resources to share; add resources: [{name: nvidia.com/gpu, replicas: N}]")

    def settled(self, kind: str) -> ReplicatedResources:
        """These settings with ``failRequestsGreaterThanOne`` resolved: unset is True for MPS."""
        if self.fail_requests_greater_than_one is not None:
            return self
        return dataclasses.replace(self, fail_requests_greater_than_one=kind == "mps")
